"""Numbers and signals at their limits: every number of the config has both bounds, checked before
anything is built, so a value past one is exit 2 with one line naming the key and its range, never a
traceback or a hang; a value the run would silently change is refused; SIGTERM ends a run as Ctrl-C
does, its files written."""

from __future__ import annotations

import dataclasses
import json
import time
import types
import typing

import pytest
import yaml
from llmbench.engine.config import ConfigError, EngineConfig

from llmbench.config.load import parse_config
from llmbench.config.schema import RunConfig
from llmbench.run.workload import shared_prefixes
from tests.llmbench.cli.command_line import invoke, one_line_error
from tests.llmbench.null_run import NULL_RUN
from tests.llmbench.processes import sigterm_after_first_row

HUGE = 10**30  # past every bound; an int that C code (struct, torch, time_t) cannot hold


def numeric_keys(cls: type, path: str = "") -> list[tuple[str, dataclasses.Field, str]]:
    """(dotted key, field, the value past every bound) for every int or float of a config section, nested
    sections and lists of numbers included."""
    found = []
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        hint, key = hints[spec.name], f"{path}{spec.name}"
        if dataclasses.is_dataclass(hint):
            if (cls, spec.name) != (EngineConfig, "model"):  # the model is its own section
                found += numeric_keys(hint, f"{key}.")
            continue
        listed = typing.get_origin(hint) is list
        arms = (
            typing.get_args(hint)
            if listed or typing.get_origin(hint) in (typing.Union, types.UnionType)
            else [hint]
        )
        if int in arms or float in arms:
            value = str(HUGE) if int in arms else "1e300"
            found.append((key, spec, f"[{value}]" if listed else value))
    return found


NUMERIC_KEYS = numeric_keys(RunConfig)


def test_every_number_of_the_config_has_both_bounds():
    assert len(NUMERIC_KEYS) > 40
    unbounded = [
        key
        for key, spec, _ in NUMERIC_KEYS
        if spec.metadata.get("le") is None
        or (spec.metadata.get("ge"), spec.metadata.get("gt")) == (None, None)
    ]
    assert unbounded == []


@pytest.mark.parametrize("key,spec,value", NUMERIC_KEYS, ids=[k for k, _, _ in NUMERIC_KEYS])
def test_a_number_past_its_bound_names_the_key_and_the_range(key, spec, value):
    with pytest.raises(ConfigError) as error:
        parse_config(NULL_RUN, [f"{key}={value}"])
    assert error.value.key == (f"{key}[0]" if value.startswith("[") else key)
    assert error.value.message.startswith("expected ") and " and <= " in error.value.message


def test_an_engine_config_built_in_python_refuses_an_int_past_the_float_range():
    # math.isfinite on such an int raises OverflowError: the bound check says what it expected instead
    with pytest.raises(ConfigError) as error:
        EngineConfig(num_gpu_blocks=10**400)
    assert error.value.key == "num_gpu_blocks" and error.value.message.startswith("expected an integer")


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "model.null_forward_ms=1e30",
            "model.null_forward_ms: expected a number >= 0 and <= 60000, got 1e+30",
        ),
        (f"engine.block_size={HUGE}", f"engine.block_size: expected an integer >= 1 and <= 1024, got {HUGE}"),
        (f"model.seed={HUGE}", f"model.seed: expected an integer >= 0 and <= {2**63 - 1}, got {HUGE}"),
        (f"workload.prefix.groups={HUGE}", "workload.prefix.groups: expected an integer >= 0 and <= 1000000"),
        (
            "workload.arrival={process: constant, rate: 1e-300}",
            "workload.arrival.rate: expected a number >= 0.001",
        ),
        (
            "workload.session={turns: 2, think_time_s: 1e300}",
            "think_time_s: expected a number >= 0 and <= 86400",
        ),
        ("name=" + "a" * 300, "name: expected at most 200 bytes (a directory's name), got 300"),
        (
            "workload={num_requests: 1001, session: {turns: 1000}}",
            "workload.session.turns: 1000 turns x 1,001 sessions is 1,001,000 requests, more than 1,000,000",
        ),
    ],
    ids=["null_forward_ms", "block_size", "seed", "groups", "tiny_rate", "think_time", "long_name", "turns"],
)
def test_a_value_past_what_its_consumer_holds_is_one_line(null_config_file, tmp_path, override, message):
    result = invoke("run", null_config_file, "--set", override, "--out", tmp_path / "out")
    assert message in one_line_error(result, "run.yaml: ")
    assert not (tmp_path / "out").exists()


def test_a_huge_name_in_a_config_file_is_one_line(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({**NULL_RUN, "name": "b" * 900_000}))
    line = one_line_error(invoke("run", path), "big.yaml: name: ")
    assert line.endswith("expected at most 200 bytes (a directory's name), got 900,000")


def test_an_out_the_file_system_cannot_hold_or_write_is_one_line(null_config_file, tmp_path):
    too_long = tmp_path / ("d" * 300)
    line = one_line_error(invoke("run", null_config_file, "--out", too_long), "")
    assert line.endswith("unusable (File name too long); choose another --out")
    # root writes anywhere a mode allows; /proc takes no file from anyone
    line = one_line_error(invoke("run", null_config_file, "--out", "/proc/self"), "")
    assert line.startswith("error: /proc/self: cannot write (") and line.endswith("choose another --out")


def test_prefix_groups_past_the_requests_are_never_drawn():
    """Request i takes group i % groups: 12 requests use 12 of a million groups, and only those are drawn
    (in a second, where drawing a million hung the run)."""
    from llmbench.backends.base import ModelInfo

    config = parse_config(NULL_RUN, ["workload.prefix={groups: 1000000, prefix_len: 8}"])
    info = ModelInfo(vocab_size=1000, eos_token_id=0, max_model_len=2048)
    start = time.monotonic()
    prefixes = shared_prefixes(config, info)
    assert len(prefixes) == 12 and all(len(p) == 8 for p in prefixes)
    assert time.monotonic() - start < 30  # a loaded 2-core host; the unbounded draw took minutes


def test_a_workload_past_the_token_budget_is_refused_before_drawing(null_config_file, tmp_path):
    sets = ["workload.num_requests=1000000", "workload.prefix={groups: 1000000, prefix_len: 64}"]
    result = invoke(
        "run", null_config_file, *[a for s in sets for a in ("--set", s)], "--out", tmp_path / "o"
    )
    line = one_line_error(result, "run.yaml: workload: 128,000,000 synthetic tokens to draw, more than ")
    assert not (tmp_path / "o").exists()
    assert "lower num_requests" in line


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "workload.output={dist: fixed, mean: 500, max: 128}",
            "workload.output.mean: 500 is outside [min, max] = [1, 128]: every length would be clipped",
        ),
        (
            "workload.input={dist: normal, mean: 2, std: 1, min: 4, max: 40}",
            "workload.input.mean: 2 is outside [min, max] = [4, 40]: more than half the lengths",
        ),
        (
            "engine.tensor_parallel_size=2",
            "engine.tensor_parallel_size: 2 ranks, but the null executor has no weights to split (set 1)",
        ),
    ],
    ids=["fixed_above_max", "normal_below_min", "tp_null"],
)
def test_a_setting_the_run_would_change_silently_is_refused(null_config_file, tmp_path, override, message):
    result = invoke("run", null_config_file, "--set", override, "--out", tmp_path / "out")
    assert message in one_line_error(result, "run.yaml: ")


@pytest.mark.parametrize("rates", ["1e400", "2,1e400", "-inf", "0.0001"])
def test_sweep_takes_inf_only_as_the_word(null_config_file, tmp_path, rates):
    result = invoke("sweep", null_config_file, "--rates", rates, "--out", tmp_path / "out")
    line = one_line_error(result, "--rates: expected rates >= 0.001 and <= 1,000,000, or inf, got ")
    assert line.endswith(f"got {rates.split(',')[-1]!r}")
    assert not (tmp_path / "out").exists()


def test_the_report_counts_one_request_in_the_singular(null_config_file, tmp_path):
    sets = ["workload.num_requests=1", "workload.prefix={groups: 1, prefix_len: 1}", "output.report=true"]
    result = invoke(
        "run", null_config_file, *[a for s in sets for a in ("--set", s)], "--out", tmp_path / "r"
    )
    assert result.exit_code == 0, result.output
    html = (tmp_path / "r" / "report.html").read_text()
    assert "1 request (+2 warm-up)" in html and "1 shared prefix of 1 token" in html
    assert "1 requests" not in html


def test_sigterm_ends_a_run_as_ctrl_c_does(tmp_path):
    """A CI runner's or a scheduler's SIGTERM: the rows so far kept, summary.json written with
    complete false and a stop_reason naming the signal, exit 130."""
    config = tmp_path / "slow.yaml"
    slow = {"num_requests": 400, "arrival": {"process": "constant", "rate": 20}}
    config.write_text(
        yaml.safe_dump(
            {
                **NULL_RUN,
                "model": {**NULL_RUN["model"], "null_forward_ms": 20},
                "workload": {**NULL_RUN["workload"], **slow},
            }
        )
    )
    out = tmp_path / "run"
    rows = out / "requests.jsonl"
    assert sigterm_after_first_row(["run", str(config), "--out", str(out), "--no-report"], rows) == 130
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False
    assert summary["stop_reason"].startswith("interrupted (SIGTERM); ")
    assert summary["stop_reason"].endswith(" not started")
    assert rows.read_text().count("\n") >= 1


@pytest.mark.parametrize("option,value", [("--requests", "1000000000000"), ("--seed", "-1")])
def test_soak_options_are_bounded(option, value):
    """A trillion requests ran for ever; a negative seed was numpy's traceback."""
    result = invoke("soak", option, value)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"Invalid value for '{option}'" in result.output
