"""`llmbench calibrate` end to end on a small load: the client's error against the mock's own send times,
the capacity ladder, and calibrate.json."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from llmbench.engine.loading.packaged import PACKAGED, packaged_model_path
from typer.testing import CliRunner

from llmbench.backends.client_capacity import capacity_path, choose_workers, load_capacity
from llmbench.cli import app
from llmbench.config.load import SHIPPED_CONFIGS, load_config
from llmbench.results.calibrate import Level
from llmbench.studies.calibrate import host_capacity
from tests.llmbench.processes import sigterm_after_first_row

CONFIG = {
    "name": "calib",
    "model": {"preset": "tiny"},
    "workload": {
        "num_requests": 6,
        "warmup_requests": 2,
        "max_concurrency": 3,
        "input": {"dist": "fixed", "mean": 8},
        "output": {"dist": "fixed", "mean": 12},
    },
    "output": {"report": False},
}


def test_calibrate_measures_the_error_and_climbs_the_ladder(tmp_path, client_cache):
    config = tmp_path / "calib.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "out"
    # a bound no host misses, so the ladder reaches its top: which rung a real bound stops at is the host's
    args = ["calibrate", str(config), "--max-streams", "2", "--ttft-ms", "5", "--itl-ms", "2"]
    args += ["--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--set", "backend.client_lag_bound_ms=1000000"])
    assert result.exit_code == 0, result.output
    assert "client error at the config's load" in result.output
    data = json.loads((out / "calibrate.json").read_text())
    assert data["complete"] and data["runs"] == ["fidelity", "streams-1", "streams-2"]
    fidelity = data["fidelity"]
    assert fidelity["requests"] == 6  # the timed ones: the warm-up and the preflight are left out
    # the mock's own TTFT is its 5 ms setting or later, never earlier; the client adds to it
    assert fidelity["mock_median_ttft_ms"] >= 5.0 - 0.5
    assert math.isclose(
        fidelity["median_ttft_error_ms"], fidelity["client_median_ttft_ms"] - fidelity["mock_median_ttft_ms"]
    )
    assert fidelity["client"]["schedule_lag_ms"]["count"] == 6
    assert [level["streams"] for level in data["capacity"]] == [1, 2]
    assert not any(level["client_limited"] for level in data["capacity"])
    assert data["sustained"]["streams"] == 2 and data["sustained"]["chunks_per_s"] > 0
    assert (out / "streams-2" / "summary.json").is_file()
    # workers auto: the ladder ran one worker; 2 streams, never client-limited, are a lower bound below
    # the estimate auto takes without a figure, so none is kept
    assert data["workers"] == "auto" and [level["workers"] for level in data["capacity"]] == [1, 1]
    assert "host_capacity_file" not in data and load_capacity() is None


def rung(streams: int, chunks_per_s: float, limited: bool = False) -> Level:
    return Level(
        streams=streams,
        workers=1,
        chunks_per_s=chunks_per_s,
        mock_chunks_per_s=chunks_per_s,
        schedule_lag_ms=None,
        client_limited=limited,
        reason="schedule lag" if limited else "",
    )


def test_the_figure_kept_is_one_workers_limit_or_a_bound_past_the_estimate(tmp_path, client_cache):
    found = host_capacity([rung(64, 60_000.0), rung(128, 90_000.0), rung(256, 95_000.0, True)], 10.0)
    assert (found.chunks_per_s, found.streams, found.lag_bound_ms) == (90_000.0, 128, 10.0)
    assert host_capacity([rung(256, 190_000.0), rung(512, 300_000.0)], 10.0).chunks_per_s == 300_000.0
    assert host_capacity([rung(1, 1_000.0), rung(2, 2_000.0)], 10.0) is None  # a bound, below 100k
    assert host_capacity([rung(1, 1_000.0, True)], 10.0) is None  # not even one stream


def test_calibrate_keeps_the_figure_auto_sizes_by(tmp_path, client_cache, monkeypatch):
    from llmbench.studies import calibrate

    monkeypatch.setattr(calibrate, "DEFAULT_CHUNKS_PER_S", 1.0)  # any ladder's top passes it
    config = tmp_path / "calib.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    args = ["calibrate", str(config), "--max-streams", "1", "--ttft-ms", "1", "--itl-ms", "1"]
    args += ["--out", str(tmp_path / "out"), "--set", "backend.client_lag_bound_ms=1000000"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "calibrate.json").read_text())
    kept = load_capacity()
    assert data["host_capacity_file"] == str(capacity_path()) and str(client_cache) in str(capacity_path())
    assert (kept.chunks_per_s, kept.streams) == (data["sustained"]["chunks_per_s"], 1)
    assert "backend.workers auto sizes by it" in result.output
    workload = load_config(config).workload
    assert (
        f"{kept.chunks_per_s / 1000:,.0f}k chunks/s per worker, calibrate"
        in choose_workers("auto", workload).reason
    )


def test_a_ladder_of_more_workers_keeps_no_figure(tmp_path, client_cache):
    config = tmp_path / "calib.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    args = ["calibrate", str(config), "--max-streams", "1", "--ttft-ms", "1", "--itl-ms", "1"]
    args += ["--out", str(tmp_path / "out"), "--set", "backend.workers=2"]
    result = CliRunner().invoke(app, [*args, "--set", "backend.client_lag_bound_ms=1000000"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "calibrate.json").read_text())
    assert data["capacity"][0]["workers"] == 2 and "host_capacity_file" not in data
    assert load_capacity() is None  # one worker's figure is what auto divides by


def test_a_config_error_is_one_line_and_exit_2(tmp_path):
    config = tmp_path / "calib.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    result = CliRunner().invoke(app, ["calibrate", str(config), "--set", "backend.client_lag_bound_ms=-1"])
    assert result.exit_code == 2
    assert "client_lag_bound_ms" in result.output


def test_sigterm_stops_the_calibration_with_what_it_measured(tmp_path):
    """SIGTERM (a CI runner's, a scheduler's) mid-run stops the calibration as Ctrl-C does: no further
    run starts, calibrate.json says where it stopped, exit 130."""
    config = tmp_path / "calib.yaml"
    slow = {**CONFIG["workload"], "num_requests": 200, "max_concurrency": 2}
    config.write_text(yaml.safe_dump({**CONFIG, "workload": slow}))
    out = tmp_path / "out"
    args = ["calibrate", str(config), "--itl-ms", "50", "--out", str(out)]
    assert sigterm_after_first_row(args, out / "fidelity" / "requests.jsonl") == 130
    data = json.loads((out / "calibrate.json").read_text())
    assert data["runs"] == ["fidelity"] and not data["complete"]
    assert data["stop_reason"] == "interrupted during fidelity"
    summary = json.loads((out / "fidelity" / "summary.json").read_text())
    assert summary["complete"] is False and "SIGTERM" in summary["stop_reason"]


def test_the_mock_side_leaves_out_every_warm_up_turn_of_a_multi_turn_workload(tmp_path):
    # a warm-up session sends one request a turn: the mock's records of the timed requests start after
    # as many records as there are warm-up rows, not warmup_requests
    from llmbench.config.load import parse_config
    from llmbench.mock_server import MockServer, MockSettings
    from llmbench.studies.calibrate import _judged_run

    with MockServer(MockSettings(ttft_ms=1, itl_ms=1, output_tokens=4)) as mock:
        sets = ["backend.type=openai", f"backend.url={mock.url}", "backend.model=mock"]
        sets += ["telemetry.server_metrics=false", "workload.session.turns=2", "workload.num_requests=3"]
        config = parse_config(CONFIG, sets)
        _, rows, sent, _ = _judged_run(config, "run.yaml", tmp_path / "run", mock, None)
    timed = [r for r in rows if not r.warmup]
    assert sum(r.warmup for r in rows) == 4 and len(timed) == 6  # 2 and 3 sessions of 2 turns
    assert len(sent) == len(timed)


@pytest.mark.parametrize("name", sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml")))
def test_calibrate_runs_on_every_shipped_config(name, sharegpt, tmp_path, client_cache):
    # the ladder's workload is its own whatever the config's lengths, prefixes, dataset or sessions (the
    # quickstart's input range [32, 256] refused its 16-token prompts); a ShareGPT config gets the small
    # dataset and tokenizer its comment asks for, and the fidelity run a few requests, to stay short
    directory, _ = sharegpt
    preset = load_config(name).model.preset
    if preset in PACKAGED:
        try:
            packaged_model_path(preset)
        except ValueError:
            pytest.skip(f"{name}: {PACKAGED[preset].distribution} not installed: {PACKAGED[preset].install}")
    sets = ["workload.num_requests=2", "workload.warmup_requests=1", "output.report=false"]
    sets += ["backend.client_lag_bound_ms=1000000"]  # the ladder climbs to its top on any host
    if load_config(name).workload.dataset.type == "sharegpt":
        sets += [f"workload.dataset.path={directory / 'sharegpt.json'}"]
        sets += [f"workload.dataset.tokenizer={directory / 'tokenizer.json'}"]
    out = tmp_path / "out"
    args = ["calibrate", name, "--max-streams", "2", "--ttft-ms", "1", "--itl-ms", "1", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, *[a for s in sets for a in ("--set", s)]])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "calibrate.json").read_text())
    assert data["complete"] and data["runs"] == ["fidelity", "streams-1", "streams-2"]
    assert data["fidelity"]["requests"] >= 2  # a multi-turn config's sessions send a request a turn
    assert data["sustained"]["streams"] == 2
