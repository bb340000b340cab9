"""Reading a run config: a YAML file, or a shipped config by name, plus `--set a.b=value` overrides, validated
into a RunConfig. Every problem is a ConfigFileError whose one-line message names the file and the key."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from llmbench.config.build import build, clip
from llmbench.config.schema import RunConfig
from llmbench.config.yaml_file import YamlFileError, parse_yaml, read_yaml_file
from llmbench.engine.config import ConfigError, EngineConfig

# `llmbench run quickstart` from anywhere: the package llmbench.configs is the repository's configs/ folder
SHIPPED_CONFIGS = Path(importlib.util.find_spec("llmbench.configs").submodule_search_locations[0])


class ConfigFileError(ValueError):
    """A config that cannot be used, with a one-line message naming the file and key."""


# the engine section is EngineConfig without its model field: the model is its own section
_SKIP = {(EngineConfig, "model")}


def parse_config(data: Any, overrides: Sequence[str] = (), default_name: str = "run") -> RunConfig:
    """Validate a YAML-shaped mapping (plus `a.b=value` overrides) into a RunConfig."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("<top>", f"expected a mapping of sections, got {type(data).__name__}")
    data = dict(data)
    data.setdefault("name", default_name)
    for item in overrides:
        _apply_override(data, item)
    return build(RunConfig, data, "", skip=_SKIP)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    """Read and validate a YAML config file, or a shipped one by name (`quickstart`). Errors carry the
    file name in their message."""
    path = resolve_config_path(path)
    shown = str(path) if str(path).isprintable() else repr(str(path))  # the file itself: where it is
    if not path.exists() and len(path.parts) == 1:
        names = ", ".join(p.stem for p in sorted(SHIPPED_CONFIGS.glob("*.yaml")))
        raise ConfigFileError(f"{clip(shown, 200)}: no such file, nor a shipped config ({names})")
    try:
        data = read_yaml_file(path)
    except YamlFileError as e:
        raise ConfigFileError(f"{clip(shown, 200)}: {e}") from None
    if data is None:
        raise ConfigFileError(f"{clip(shown, 200)}: empty config (expected sections such as model, workload)")
    name = path.stem if path.stem.isprintable() and path.stem else "run"
    try:
        return parse_config(data, overrides, default_name=name)
    except ConfigError as e:
        raise ConfigFileError(f"{config_label(path)}: {e}") from None


def config_label(path: str | Path) -> str:
    """What every error about a config's settings begins with, whichever step found it (the schema, the
    dataset, the model): the file's name, `quickstart.yaml` also for the shipped config given as
    `quickstart`. An error about the file itself (unreadable, not YAML) names its path instead."""
    name = resolve_config_path(path).name
    return clip(name if name.isprintable() else repr(name), 200)


def resolve_config_path(path: str | Path) -> Path:
    """`path` itself when it exists or has a directory part, else the shipped config of that name."""
    path = Path(path).expanduser()
    shipped = SHIPPED_CONFIGS / f"{path.name.removesuffix('.yaml')}.yaml"
    if not path.exists() and len(path.parts) == 1 and shipped.is_file():
        return shipped
    return path


def _apply_override(data: dict, item: str) -> None:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(item, "expected --set key.path=value")
    parts = key.strip().split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(".".join(parts[: i + 1]), f"is a value, cannot set {key}")
        else:
            child = node[part] = dict(child)
        node = child
    try:
        node[parts[-1]] = parse_yaml(raw) if raw.strip() else None
    except (yaml.YAMLError, ValueError):
        node[parts[-1]] = raw
