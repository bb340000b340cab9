import json
import math

import pytest
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.results.summary import RunSummary
from llmbench.studies.sweep import SweepError, parse_rates, rate_overrides
from tests.llmbench.null_run import NULL_RUN


def test_rates_are_parsed_sorted_and_checked():
    assert parse_rates(" 4, 2,inf ") == [2.0, 4.0, math.inf]
    assert parse_rates("Infinity,0.001,1e6") == [0.001, 1e6, math.inf]
    for text, message in (
        ("2,fast", "'fast' is not a number"),
        ("0,2", "expected rates >= 0.001 and <= 1,000,000, or inf, got '0'"),
        ("-1", "expected rates >= 0.001"),
        ("nan", "expected rates >= 0.001"),
        ("1e400", "got '1e400'"),  # float() reads it as inf: only the word means all at once
        ("2e6", "got '2e6'"),
        ("2,2.0", "given twice"),
    ):
        with pytest.raises(SweepError, match=message):
            parse_rates(text)


def test_each_rate_keeps_the_configs_arrival_process():
    all_at_once = parse_config(NULL_RUN)  # process inf: a finite rate arrives as a Poisson process
    assert rate_overrides(2.5, all_at_once) == [
        "workload.arrival.process=poisson",
        "workload.arrival.rate=2.5",
    ]
    assert rate_overrides(math.inf, all_at_once) == ["workload.arrival.process=inf"]
    bursty = parse_config(NULL_RUN, ["workload.arrival.process=gamma", "workload.arrival.burstiness=0.5"])
    assert rate_overrides(8, bursty) == ["workload.arrival.process=gamma", "workload.arrival.rate=8"]


def test_sweep_runs_each_rate_through_llmbench_run(null_config_file, tmp_path):
    out = tmp_path / "sweep"
    result = CliRunner().invoke(
        app, ["sweep", str(null_config_file), "--rates", "inf,400", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output

    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["complete"] and [p["label"] for p in sweep["points"]] == ["400", "inf"]
    assert [p["rate"] for p in sweep["points"]] == [400.0, None]
    arrivals = []
    for point in sweep["points"]:
        summary = RunSummary.load(out / point["run_dir"]).to_dict()
        assert summary["complete"] and summary["metrics"] == point["metrics"]
        assert point["metrics"]["completed"] == NULL_RUN["workload"]["num_requests"]
        arrivals.append(summary["config"]["workload"]["arrival"])
    assert arrivals[0]["process"] == "poisson" and arrivals[0]["rate"] == 400
    assert arrivals[1]["process"] == "inf"
    # the directory's own summary is the highest rate's, so report and compare take the directory
    top = RunSummary.load(out).to_dict()
    assert top["metrics"] == sweep["points"][-1]["metrics"] and top["name"] == NULL_RUN["name"]
    assert "offered req/s" in result.output


def test_sweep_report_has_the_curve_and_the_table(null_config_file, tmp_path):
    out = tmp_path / "sweep"
    result = CliRunner().invoke(
        app, ["sweep", str(null_config_file), "--rates", "300,inf", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    html = (out / "report.html").read_text()
    assert "Sweep of" in html and "<td>inf req/s</td>" in html
    assert any(path.name.startswith("sweep_") for path in out.glob("*.png"))


@pytest.mark.parametrize(
    "rates, message", [("2,x", "--rates: 'x' is not a number"), ("5,5", "given twice")], ids=["word", "twice"]
)
def test_bad_rates_exit_2(null_config_file, rates, message):
    result = CliRunner().invoke(app, ["sweep", str(null_config_file), "--rates", rates])
    assert result.exit_code == 2
    assert message in result.output
