"""Hostile configs: random keys, types and values over the YAML schema (derived from the RunConfig
dataclasses) never produce a traceback. Every rejection is a one-line error naming the key, exit 2."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import tempfile
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from llmbench.engine.config import EngineConfig
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.config.load import ConfigFileError, load_config
from llmbench.config.schema import RunConfig
from llmbench.results.summary import RunSummary

# a valid, seconds-long run: the base every mutation starts from
BASE = {
    "name": "fuzz",
    "model": {"preset": "tiny", "executor": "null"},
    "engine": {"max_num_seqs": 4, "max_num_batched_tokens": 64},
    "workload": {"num_requests": 3, "input": {"mean": 8}, "output": {"mean": 4}},
    "output": {"report": False},
}


def schema(cls: type = RunConfig, prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """Leaf key paths with their type hints, and section paths, of a config dataclass."""
    leaves, sections = {}, []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if (cls, f.name) == (EngineConfig, "model"):
            continue  # the model is its own top-level section
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            sections.append(path)
            sub_leaves, sub_sections = schema(hints[f.name], f"{path}.")
            leaves.update(sub_leaves)
            sections += sub_sections
        else:
            leaves[path] = hints[f.name]
    return leaves, sections


LEAVES, SECTIONS = schema()
FLOATS = st.floats(-2, 8) | st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e-9])


def values(huge: bool) -> st.SearchStrategy:
    """Any YAML value; `huge` adds magnitudes no run could survive, for the parse-only test."""
    ints = st.integers(-3, 300) | (st.integers(-(10**400), 10**400) if huge else st.nothing())
    scalars = st.none() | st.booleans() | ints | FLOATS | st.text(max_size=8)
    return scalars | st.lists(scalars, max_size=4) | st.dictionaries(st.text(max_size=5), ints, max_size=2)


def typed(hint: Any) -> st.SearchStrategy:
    """Values of the field's own type (including invalid ranges), so valid configs are reached too."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return st.none() | typed(next(a for a in args if a is not type(None)))
    if origin is Literal:
        return st.sampled_from(args) | st.text(max_size=6)
    if origin is list:
        return st.lists(typed(args[0]), max_size=4)
    if dataclasses.is_dataclass(hint):  # a list's item (backend.models): a mapping of its own fields
        return st.fixed_dictionaries({name: typed(h) for name, h in typing.get_type_hints(hint).items()})
    return {bool: st.booleans(), int: st.integers(-3, 300), float: FLOATS, str: st.text(max_size=8)}[hint]


def mutations(huge: bool) -> st.SearchStrategy:
    """1-3 changes: a field set to a value of any type, a section replaced by a value, an unknown key."""
    leaf = st.sampled_from(sorted(LEAVES)).flatmap(
        lambda path: st.tuples(st.just(path), typed(LEAVES[path]) | values(huge))
    )
    section = st.tuples(st.sampled_from(SECTIONS), values(huge))
    unknown_key = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8) | st.integers()
    unknown = st.tuples(st.sampled_from(["", *SECTIONS]), unknown_key).map(
        lambda t: f"{t[0]}.{t[1]}" if t[0] else str(t[1])
    )
    return st.lists(leaf | section | st.tuples(unknown, values(huge)), min_size=1, max_size=3)


def typed_mutations() -> st.SearchStrategy:
    """1-4 fields set to values of their own type: most configs stay valid and reach the engine."""
    leaf = st.sampled_from(sorted(LEAVES)).flatmap(lambda path: st.tuples(st.just(path), typed(LEAVES[path])))
    return st.lists(leaf, min_size=1, max_size=4)


def mutate(changes: list[tuple[str, Any]]) -> tuple[dict, list[str]]:
    """BASE with each change applied (skipped where an earlier change replaced a section by a value)."""
    data, applied = copy.deepcopy(BASE), []
    for path, value in changes:
        *parents, key = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[key] = value
            applied.append(path)
    return data, applied


def names_a_changed_key(message: str, applied: list[str]) -> bool:
    """Some key in the message (after the file name) is a changed path, a section above one, a field
    beside one (cross-field checks such as max < min), or a field below a changed section."""
    error_key = message.partition(": ")[2].partition(": ")[0].split("[")[0]
    keys = [error_key, *re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+\b", message)]
    return any(
        key == p
        or p.startswith(f"{key}.")
        or key.startswith(f"{p}.")
        or key.rpartition(".")[0] == p.rpartition(".")[0]
        for key in keys
        for p in applied
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=mutations(huge=True))
def test_parsing_accepts_or_names_the_key(tmp_path, changes):
    data, applied = mutate(changes)
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        load_config(path)
    except ConfigFileError as e:
        message = str(e)
        assert "\n" not in message and message.startswith("fuzz.yaml: ")
        assert names_a_changed_key(message, applied), (message, applied)


def too_slow_to_run(path) -> bool:
    """A valid config whose run would take long: slow arrivals, or many tokens through a real model."""
    try:
        config = load_config(path)
    except ConfigFileError:
        return False
    workload = config.workload
    count = workload.num_requests + workload.warmup_requests
    if workload.arrival.process != "inf" and count / workload.arrival.rate > 2:
        return True
    longest = (workload.input.max or workload.input.mean) + (workload.output.max or workload.output.mean)
    tokens = count * longest
    real_model = config.model.executor == "model" or config.backend.type == "hf"
    return real_model and (tokens > 2000 or config.engine.attention_backend == "triton")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=mutations(huge=False) | typed_mutations())
def test_cli_never_shows_a_traceback(tmp_path, changes):
    data, applied = mutate(changes)
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data))
    assume(not too_slow_to_run(path))
    run_dir = Path(tempfile.mkdtemp(dir=tmp_path)) / "run"  # fresh per example: no stale summary
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(run_dir), "--no-report"])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        applied,
        result.output,
    )
    assert "Traceback" not in result.output, (applied, result.output)
    assert result.exit_code in (0, 1, 2), (applied, result.exit_code, result.output)
    if result.exit_code == 1:  # the one run failure hostile settings may cause on purpose
        assert "stop_reason" in RunSummary.load(run_dir).to_dict(), (applied, result.output)
    event(f"exit {result.exit_code}")  # --hypothesis-show-statistics: how many configs ran
    if result.exit_code == 2:
        line = " ".join(result.output.split())
        assert line.startswith("error: fuzz.yaml: "), (applied, result.output)
        assert names_a_changed_key(line.removeprefix("error: "), applied), (applied, result.output)


YAML_CHARS = st.sampled_from(list("{}[]:,-?&*!|>'\"%@`#\n\t ") + ["name", "model", "1e3", "~", "<<"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=200) | st.lists(YAML_CHARS, max_size=40).map(lambda p: "".join(p).encode()))
def test_any_file_content_is_a_config_or_a_one_line_error(tmp_path, content):
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(content)
    try:
        load_config(path)
    except ConfigFileError as e:
        message = str(e)
        assert "\n" not in message and len(message) < 600
        assert message.startswith((f"{path}: ", "fuzz.yaml: ")), message
