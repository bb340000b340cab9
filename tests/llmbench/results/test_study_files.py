"""The study files as declared types: files written before the types load (migrated from version 0),
re-save byte for byte but for their version, and the types survive a round trip."""

import json
from pathlib import Path

import msgspec
import pytest

from llmbench.results.ablation import Ablation
from llmbench.results.calibrate import Calibrate, CalibrateOptions, Fidelity, Level
from llmbench.results.capacity import Capacity
from llmbench.results.json_file import ResultFileError
from llmbench.results.summary import Spread
from llmbench.results.sweep import Sweep

MEASUREMENTS = Path(__file__).parents[3] / "docs" / "measurements"
# written before the types, in the shape they declare
CURRENT = [
    (Ablation, MEASUREMENTS / "h200/ablation.json"),
    (Ablation, MEASUREMENTS / "h200/ablation-cpu-overhead-server.json"),
    (Sweep, MEASUREMENTS / "h200/sharegpt/sweep/sweep.json"),
    (Capacity, MEASUREMENTS / "h200/field/capacity/capacity.json"),
]
# the oldest: gpu_busy_fraction for gpu_busy_step_spans; no preset, trials or intervals
OLDEST_ABLATION = MEASUREMENTS / "h200/ablation_slower_host.json"
OLDEST_SWEEP = MEASUREMENTS / "cpu/sweep_ci.json"


def with_version(text: str) -> str:
    return text.replace("{\n", '{\n  "schema_version": 1,\n', 1)


@pytest.mark.parametrize(("type_", "path"), CURRENT, ids=lambda p: getattr(p, "name", ""))
def test_a_file_written_before_the_type_saves_byte_identical_but_for_its_version(type_, path, tmp_path):
    loaded = type_.load(path)
    assert loaded.schema_version == 1
    loaded.save(tmp_path / path.name)
    assert (tmp_path / path.name).read_text() == with_version(path.read_text())


def test_the_oldest_ablation_is_migrated_to_the_step_span_name():
    written = json.loads(OLDEST_ABLATION.read_text())
    ablation = Ablation.load(OLDEST_ABLATION)
    assert [v.name for v in ablation.variants] == [v["name"] for v in written["variants"]]
    for variant, old in zip(ablation.variants, written["variants"], strict=True):
        assert variant.steps.gpu_busy_step_spans == old["steps"]["gpu_busy_fraction"]
        assert variant.metrics.output_throughput == old["metrics"]["output_throughput"]
    # settings the file predates take the values it ran with
    assert (ablation.preset, ablation.fixed, ablation.repeat) == ("all", {}, 1)
    assert ablation.backend is msgspec.UNSET and ablation.variants[0].trials is msgspec.UNSET
    assert "gpu_busy_fraction" not in json.dumps(ablation.to_dict())


def test_the_oldest_sweep_is_migrated_to_the_step_span_name():
    written = json.loads(OLDEST_SWEEP.read_text())
    sweep = Sweep.load(OLDEST_SWEEP)
    busy = [p["steps"]["gpu_busy_fraction"] for p in written["points"]]
    assert [p.steps.gpu_busy_step_spans for p in sweep.points] == busy
    assert [p.rate for p in sweep.points] == [p["rate"] for p in written["points"]]


def test_an_ablation_loads_from_its_directory_and_the_p99_keys_stay_flat(tmp_path):
    path = MEASUREMENTS / "h200/ablation.json"
    (tmp_path / "ablation.json").write_text(path.read_text())
    ablation = Ablation.load(tmp_path)
    written = json.loads(path.read_text())["variants"][0]
    assert ablation.variants[0].metrics.value("p99_ttft_ms") == written["metrics"]["p99_ttft_ms"]
    assert ablation.variants[0].trials[0].run_dir == written["trials"][0]["run_dir"]
    assert ablation.variants[1].vs_previous.against == "all off"


def test_a_calibration_survives_a_round_trip_and_an_unversioned_file_loads():
    rung = Level(
        streams=4,
        workers=1,
        chunks_per_s=3900.0,
        mock_chunks_per_s=4000.0,
        schedule_lag_ms=Spread(0.1, 0.9, 1.2, 8),
        client_limited=False,
        reason="",
    )
    fidelity = Fidelity(
        requests=16,
        median_ttft_error_ms=0.4,
        mean_itl_error_ms=0.02,
        client_median_ttft_ms=50.4,
        mock_median_ttft_ms=50.0,
        client_mean_itl_ms=10.02,
        mock_mean_itl_ms=10.0,
        client=None,
    )
    calibrate = Calibrate(
        command="llmbench calibrate configs/ci.yaml",
        options=CalibrateOptions(max_streams=4),
        workers="auto",
        lag_bound_ms=5.0,
        complete=True,
        runs=["fidelity", "streams-1"],
        fidelity=fidelity,
        capacity=[rung],
        sustained=rung,
        load_average_1m=0.5,
    )
    data = calibrate.to_dict()
    assert list(data)[:6] == ["schema_version", "command", "options", "workers", "lag_bound_ms", "complete"]
    assert "host_capacity_file" not in data and "stop_reason" not in data
    assert Calibrate.from_dict(data) == calibrate
    unversioned = {k: v for k, v in data.items() if k != "schema_version"}
    assert Calibrate.from_dict(unversioned) == calibrate


def test_a_newer_or_foreign_file_is_refused_naming_it(tmp_path):
    newer = json.loads((MEASUREMENTS / "h200/ablation.json").read_text()) | {"schema_version": 9}
    (tmp_path / "ablation.json").write_text(json.dumps(newer))
    with pytest.raises(ResultFileError, match="ablation schema_version 9 is newer than this llmbench reads"):
        Ablation.load(tmp_path)
    (tmp_path / "sweep.json").write_text(json.dumps({"command": "x", "complete": True, "points": [1]}))
    with pytest.raises(ResultFileError, match=r"sweep.json: not an llmbench sweep"):
        Sweep.load(tmp_path)
    (tmp_path / "capacity.json").write_text("[]")
    with pytest.raises(ResultFileError, match="not an llmbench capacity"):
        Capacity.load(tmp_path)
