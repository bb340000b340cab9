import json
import shutil
from pathlib import Path

import pytest

from llmbench.results.json_file import ResultFileError
from llmbench.results.summary import SCHEMA_VERSION, RunSummary

MEASUREMENTS = Path(__file__).parents[3] / "docs" / "measurements"
# written by the version this type replaced: schema_version 1, every key the runner writes on a GPU
CURRENT = [
    MEASUREMENTS / "h200/field/energy/throughput/summary.json",
    MEASUREMENTS / "h200/field/capacity/summary.json",
    MEASUREMENTS / "h200/sharegpt_real/summary.json",
]
# version 1 from before the rename of gpu_busy_fraction to gpu_busy_step_spans, with fewer environment keys
OLDEST = MEASUREMENTS / "h200/throughput_bundled.json"


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: p.parent.name)
def test_a_version_1_file_saves_byte_identical_but_for_its_version(path, tmp_path):
    RunSummary.load(path).save(tmp_path / "summary.json")
    before = path.read_text().replace('"schema_version": 1,', f'"schema_version": {SCHEMA_VERSION},', 1)
    assert (tmp_path / "summary.json").read_text() == before


def test_percentiles_stay_after_each_latencys_max_in_the_file(tmp_path):
    summary = RunSummary.load(CURRENT[0])
    keys = list(summary.to_dict()["metrics"])
    assert keys[keys.index("max_ttft_ms") + 1 : keys.index("mean_tpot_ms")] == [
        "p50_ttft_ms",
        "p90_ttft_ms",
        "p95_ttft_ms",
        "p99_ttft_ms",
    ]
    written = json.loads(CURRENT[0].read_text())["metrics"]
    assert summary.metrics.value("p99_ttft_ms") == written["p99_ttft_ms"]


def test_an_old_version_1_file_migrates():
    old = json.loads(OLDEST.read_text())
    assert old["schema_version"] == 1 and "gpu_busy_step_spans" not in old["steps"]
    summary = RunSummary.load(OLDEST)
    assert summary.schema_version == SCHEMA_VERSION
    assert summary.steps.gpu_busy_step_spans == old["steps"]["gpu_busy_fraction"]
    assert summary.metrics.latencies.mean_ttft_ms == old["metrics"]["mean_ttft_ms"]
    assert summary.environment.gpu == "NVIDIA H200" and summary.environment.command is None


def test_a_file_without_schema_version_reads_as_version_1(tmp_path):
    data = json.loads(OLDEST.read_text())
    del data["schema_version"]
    (tmp_path / "summary.json").write_text(json.dumps(data))
    assert RunSummary.load(tmp_path) == RunSummary.load(OLDEST)


def test_a_run_directory_loads_its_summary(tmp_path):
    shutil.copy(CURRENT[1], tmp_path / "summary.json")
    assert RunSummary.load(tmp_path).name == RunSummary.load(CURRENT[1]).name


def test_a_run_that_finished_no_trial_keeps_empty_metrics(tmp_path):
    data = json.loads(CURRENT[1].read_text())
    data.update(metrics={}, complete=False)
    (tmp_path / "summary.json").write_text(json.dumps(data))
    summary = RunSummary.load(tmp_path)
    assert summary.metrics is None
    assert summary.to_dict()["metrics"] == {}


def test_a_future_schema_version_is_refused_naming_the_file(tmp_path):
    data = json.loads(CURRENT[1].read_text()) | {"schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match=r"summary.json: summary schema_version 3 is newer"):
        RunSummary.load(tmp_path)


@pytest.mark.parametrize(
    "text, why",
    [
        ("[1, 2]", "not a JSON object"),
        ("{", "not JSON"),
        ('{"command": "kernels"}', "no 'name' and 'metrics'"),
    ],
)
def test_a_file_that_is_not_a_summary_is_one_line_naming_it(tmp_path, text, why):
    (tmp_path / "x.json").write_text(text)
    with pytest.raises(ResultFileError) as error:
        RunSummary.load(tmp_path / "x.json")
    assert str(error.value).startswith(f"{tmp_path / 'x.json'}: not an llmbench summary")
    assert why in str(error.value) and "\n" not in str(error.value)


def test_a_wrongly_typed_value_is_refused(tmp_path):
    data = json.loads(CURRENT[1].read_text())
    data["metrics"]["completed"] = "many"
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match=r"not an llmbench summary \(Expected `int`"):
        RunSummary.load(tmp_path)
