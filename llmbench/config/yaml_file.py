"""Reading a config file's YAML the way a user means it, and never worse than a one-line error.

PyYAML follows YAML 1.1, where `1e-3` and `4.8e3` are strings and a repeated key silently wins; configs
want YAML 1.2's numbers and an error for the repeat. What a file may be is bounded before it is parsed
(its size, its encoding, its nesting), so a device, a binary or a pathological file is refused instead
of exhausting memory or the interpreter's recursion limit."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20  # far above any real config; /dev/zero or a stray binary stops here
MAX_DEPTH = 32  # configs nest 4 levels deep; the composer recurses once per level

# YAML 1.2 core schema floats: the exponent needs no dot and no sign (PyYAML's 1.1 regex needs both)
_FLOAT = re.compile(
    r"^[-+]?(?:(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+|[0-9][0-9_]*\.[0-9_]*|\.[0-9_]+)$"
)


class YamlFileError(ValueError):
    """A file that is not a usable YAML document; the message is one line."""


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats, no duplicate keys and a nesting limit."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            # merge keys (<<) may repeat and be overridden on purpose; they are not duplicates
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {_clip(key_node.value)!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """One YAML document as plain data; a YAMLError on bad syntax, repeats or nesting."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (_Loader is a SafeLoader)


def read_yaml_file(path: Path) -> Any:
    """The document in `path`, or a YamlFileError saying in one line why the file is unusable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise YamlFileError(f"cannot read ({e.strerror})") from None
    if len(raw) > MAX_BYTES:
        raise YamlFileError(f"larger than {MAX_BYTES // 2**20} MiB, not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlFileError(f"not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start})") from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as e:
        raise YamlFileError(f"invalid YAML: {_clip(' '.join(str(e).split()), 300)}") from None
    except ValueError as e:  # an integer past Python's 4,300-digit conversion limit
        raise YamlFileError(f"invalid YAML: {_clip(str(e), 100)}") from None


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"
