import base64
import json
import math
import re

import matplotlib.image
import pytest
import yaml
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.report import ReportError, default_report_dir, sections, write_report
from llmbench.report.charts import chart
from llmbench.report.format import number
from llmbench.report.load import load_run
from tests.llmbench.null_run import NULL_RUN
from tests.llmbench.run_dirs import chart_specs, make_run_dir, visible

EMBEDDED = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def embedded_images(html: str) -> list[bytes]:
    return [base64.b64decode(data) for data in EMBEDDED.findall(html)]


HOSTILE_PROMPT = "<script>alert('owned')</script> & more"


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    """One CPU run's report, shared by the tests that only read it."""
    run = make_run_dir(tmp_path_factory.mktemp("cpu") / "run", name="<b>bold$name</b>", prompt=HOSTILE_PROMPT)
    return run, write_report([run], run).read_text()


def test_cpu_run_report_writes_pngs_and_embeds_those_without_a_chart(cpu_report):
    run, html = cpu_report
    pngs = sorted(p.name for p in run.glob("*.png"))
    assert pngs == ["latency_cdf.png", "over_time.png", "step_breakdown_run.png", "step_timeline.png"]
    assert embedded_images(html) == [(run / "step_timeline.png").read_bytes()]
    for name in pngs:
        height, width, _ = matplotlib.image.imread(run / name).shape
        assert width > 500 and height > 150


def test_the_step_timeline_caption_names_gpu_time_only_where_it_was_measured(cpu_report, tmp_path):
    assert "Host phases per step, step by step" in visible(cpu_report[1])
    gpu = make_run_dir(tmp_path / "gpu", gpu=True)
    assert "Host phases per step against GPU time, step by step" in visible(
        write_report([gpu], gpu).read_text()
    )


def test_report_is_self_contained(cpu_report):
    html = cpu_report[1]
    assert re.findall(r"<script[^>]*\ssrc=", html) == [] and "<link" not in html and "<iframe" not in html
    assert "@import" not in html and "url(" not in visible(html) and "href=" not in html
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]*)"', html))
    assert "Chart.js v4.6.1" in html  # the vendored library, inline
    assert len(chart_specs(html)) == 8  # breakdown, four CDFs, throughput, queue, KV blocks


def test_header_says_what_ran(cpu_report):
    html = visible(cpu_report[1])
    for text in ("Device", "SLOs", "llmbench", "Software"):
        assert f'<td class="text">{text}</td>' in html
    assert "test cpu" in html and "Model" not in html  # the synthetic run's config names no model
    assert "TTFT ≤ 45.0 ms" in html


def test_header_names_version_commit_and_threads_when_recorded(tmp_path):
    run = make_run_dir(tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    summary["environment"].update(llmbench="0.1.0", git_commit="abc1234+dirty", torch_threads=1)
    summary["config"].update(
        engine={"chunked_prefill": True, "num_scheduler_steps": 1, "async_output": False}
    )
    (run / "summary.json").write_text(json.dumps(summary))
    page = visible(write_report([run], run).read_text())
    assert "0.1.0 commit abc1234+dirty" in page and "torch threads 1" in page
    assert "on: chunked_prefill; off: num_scheduler_steps, async_output" in page  # True == 1 is not off


def test_headline_figures_have_friendly_labels_units_and_definitions(cpu_report):
    run, html = cpu_report
    summary = json.loads((run / "summary.json").read_text())
    metrics = summary["metrics"]
    page = visible(html)
    assert page.index("Headline figures") < page.index("Step time breakdown") < page.index("Latency")
    assert f'{number(metrics["output_throughput"])} <span class="unit">tok/s</span>' in page
    assert 'title="output tokens of the timed requests / duration"' in page
    assert "Goodput" in page and "SLOs: TTFT ≤ 45.0 ms" in page
    for label in ("TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99"):
        assert f">{label}</div>" in page
    # no raw key names and no mixed formats on the page
    assert "mean_cpu_ms_per_forward" not in page and "steps:" not in page and "output_throughput" not in page
    assert str(metrics["output_throughput"]) not in page


def test_cpu_run_says_once_that_gpu_figures_need_cuda(cpu_report):
    page = visible(cpu_report[1])
    assert page.count("CUDA device") == 1
    assert "GPU busy (step spans)</div>" not in page and "GPU work" not in page and "n/a" not in page
    assert "INCOMPLETE" not in page


def test_step_breakdown_chart_stacks_host_phases(cpu_report):
    run, html = cpu_report
    steps = json.loads((run / "summary.json").read_text())["steps"]
    spec = chart_specs(html)[0]
    assert spec["stacked"] and spec["labels"] == ["<b>bold$name</b>"]
    data = {d["label"]: d["data"][0] for d in spec["datasets"]}
    assert data["schedule"] == pytest.approx(steps["mean_schedule_ms"])
    assert data["readback wait"] == pytest.approx(steps["mean_wait_ms"])
    assert "GPU work" not in data and "IPC" not in data  # no GPU timing, no time in IPC


def test_every_configured_percentile_is_shown(tmp_path):
    run = make_run_dir(tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    summary["metrics"]["p99.9_ttft_ms"] = 47.654321
    (run / "summary.json").write_text(json.dumps(summary))
    page = visible(write_report([run], run).read_text())
    header = "<th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th>"
    assert header in page and "<td>47.7</td>" in page


def test_number_format_is_one_format():
    assert [number(v) for v in (2979.73, 2143.4, 0.007121, 12.345, 1.234, 0, 5, 123456)] == [
        "2,980",
        "2,143",
        "0.00712",
        "12.3",
        "1.23",
        "0",
        "5",
        "123,456",
    ]
    assert number(None) == "n/a" and number(0.9962, "%") == "99.6%" and number(3e-6) == "<0.0001"


def test_chart_data_is_safe_json():
    html = chart(
        {"type": "bar", "labels": ["</script><b>"], "datasets": [{"data": [1.5, math.nan, math.inf]}]}
    )
    spec = json.loads(re.search(r">(\{.*\})</script>", html).group(1))
    assert spec["datasets"][0]["data"] == [1.5, None, None] and spec["labels"] == ["</script><b>"]
    assert "</script><b>" not in html


def test_user_text_is_escaped(cpu_report):
    html = cpu_report[1]
    page = visible(html)
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt; &amp; more" in page
    assert "&lt;b&gt;bold$name&lt;/b&gt;" in page
    assert "<script>alert" not in html and "<b>" not in html
    assert "\\u003cb>bold$name\\u003c/b>" in html  # in chart data no `<` can close the script
    assert "outside the vocabulary" in page  # the failed request's error is listed


@pytest.mark.parametrize("key", ["gpu_busy_step_spans", "gpu_busy_fraction"])
def test_gpu_run_shows_gpu_busy_under_the_new_key_or_the_old(tmp_path, key):
    run = make_run_dir(tmp_path / "run", gpu=True)
    summary = json.loads((run / "summary.json").read_text())
    summary["steps"].pop("gpu_busy_fraction", None)
    summary["steps"].update({key: 0.875, "gpu_idle_ms": 12.0})
    if key == "gpu_busy_fraction":  # the name version 1 files had before the rename
        summary["schema_version"] = 1
    (run / "summary.json").write_text(json.dumps(summary))
    html = write_report([run], run).read_text()
    page = visible(html)
    assert "GPU busy (step spans)</div>" in page and "87.5%" in page and "CUDA device" not in page
    data = {d["label"]: d for d in chart_specs(html)[0]["datasets"]}
    assert data["GPU work"]["data"] == [pytest.approx(7.5)] and data["GPU work"]["stack"] == "GPU"
    assert data["GPU idle"]["data"] == [pytest.approx(12.0 / summary["steps"]["num_steps"])]


def test_incomplete_run_is_recomputed_from_requests(tmp_path):
    complete = load_run(make_run_dir(tmp_path / "complete", seed=3))
    cut = make_run_dir(tmp_path / "cut", seed=3, complete=False)
    with open(cut / "requests.jsonl", "a") as f:
        f.write('{"id": "req-torn", "tri')  # killed mid-write

    run = load_run(cut)
    assert not run.complete and run.summary.complete is False
    assert run.metrics.completed == 12 and run.metrics.failed == 1
    for key in ("output_throughput", "mean_ttft_ms", "p99_itl_ms", "mean_tpot_ms", "request_goodput"):
        assert run.metrics.value(key) == pytest.approx(complete.metrics.value(key))
    assert run.summary.steps.num_steps == complete.summary.steps.num_steps
    html = write_report([cut], cut).read_text()
    assert "INCOMPLETE" in html


def test_a_step_row_cut_short_is_a_report_error(tmp_path):
    cut = make_run_dir(tmp_path / "cut", complete=False)
    with open(cut / "steps.csv", "a") as f:
        f.write("0,999,1.0,1.1,0,1\n")  # killed mid-write: no num_steps
    with pytest.raises(ReportError, match=r"steps.csv: a row without num_steps"):
        load_run(cut)


def test_summary_marked_incomplete_is_recomputed(tmp_path):
    run_dir = make_run_dir(tmp_path / "run")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.update(complete=False, metrics={})
    (run_dir / "summary.json").write_text(json.dumps(summary))
    run = load_run(run_dir)
    assert not run.complete and run.metrics.completed == 12
    assert run.summary.environment.cpu == "test cpu"


def test_latency_samples_match_the_summary(tmp_path):
    run = load_run(make_run_dir(tmp_path / "run"))
    assert run.samples["ttft"].size == 12
    latencies = run.metrics.latencies
    assert run.samples["ttft"].mean() == pytest.approx(latencies.mean_ttft_ms)
    assert run.samples["itl"].mean() == pytest.approx(latencies.mean_itl_ms)
    assert run.samples["e2el"].max() == pytest.approx(latencies.max_e2el_ms)


def test_several_runs_get_one_row_each_and_unique_labels(tmp_path):
    a = make_run_dir(tmp_path / "a", name="same")
    b = make_run_dir(tmp_path / "b", name="same", slowdown=1.3, gpu=True)
    out = tmp_path / "both"
    html = write_report([a, b], out).read_text()
    assert (out / "runs_side_by_side.png").is_file()
    page = visible(html)
    assert "same (a)" in page and "same (b)" in page and page.count("<td>same (a)</td>") >= 2
    assert chart_specs(html)[0]["labels"] == ["same (a)", "same (b)"]
    assert not (a / "report.html").exists()


def test_a_section_is_one_function_in_the_list(tmp_path, monkeypatch):
    run = make_run_dir(tmp_path / "run")
    extra = lambda page: f"<h2>Extra for {len(page.points)} point</h2>"
    after = sections.SECTIONS.index(sections.breakdown.render) + 1
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS[:after], extra, *sections.SECTIONS[after:]))
    page = visible(write_report([run], run).read_text())
    assert page.index("Step time breakdown") < page.index("Extra for 1 point") < page.index("Latency")


def test_bad_run_directories_raise_report_errors(tmp_path):
    with pytest.raises(ReportError, match="not a run directory"):
        write_report([tmp_path / "missing"], tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="neither summary.json nor requests.jsonl"):
        write_report([tmp_path / "empty"], tmp_path)
    with pytest.raises(ReportError, match="at least one"):
        write_report([], tmp_path)


def test_default_report_dir(tmp_path):
    assert default_report_dir([tmp_path / "run"]) == tmp_path / "run"
    several = default_report_dir([tmp_path / "a", tmp_path / "b"], root=tmp_path)
    assert several.parent == tmp_path and several.name.startswith("report-")


def test_report_command_exit_codes(tmp_path):
    from typer.testing import CliRunner

    from llmbench.cli import app

    a, b = make_run_dir(tmp_path / "a"), make_run_dir(tmp_path / "b", seed=1)
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(a), str(b), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "report.html").is_file()
    assert runner.invoke(app, ["report", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["report"]).exit_code == 2


@pytest.mark.parametrize("flags, reported", [([], True), (["--no-report"], False)])
def test_run_writes_the_report_unless_told_not_to(tmp_path, flags, reported):
    from typer.testing import CliRunner

    from llmbench.cli import app

    out = tmp_path / "run"
    overrides = ["workload.num_requests=12", "workload.warmup_requests=0", "output.report=true"]
    args = ["run", "configs/ci.yaml", "--out", str(out), *flags]
    result = CliRunner().invoke(app, args + [arg for o in overrides for arg in ("--set", o)])
    assert result.exit_code == 0, result.output
    assert (out / "summary.json").is_file()
    assert (out / "report.html").is_file() == reported
    if reported:
        assert len(embedded_images((out / "report.html").read_text())) == 1


def test_dataset_prompts_reach_the_report_as_text(sharegpt, tmp_path):
    """A ShareGPT prompt saved with save_tokens is shown in the report, escaped: markup stays text."""
    root, _ = sharegpt
    hostile = "<script>alert(1)</script> what is the capital of france"
    turns = [[hostile, "a spider has eight legs"], ["tell me a story about a cat", "the capital of france"]]
    conversations = [
        {"conversations": [{"from": "human", "value": h}, {"from": "gpt", "value": g}]} for h, g in turns
    ]
    (root / "hostile.json").write_text(json.dumps(conversations))
    config = {
        **NULL_RUN,
        "workload": {
            "num_requests": 2,
            "dataset": {
                "type": "sharegpt",
                "path": str(root / "hostile.json"),
                "tokenizer": str(root / "tokenizer.json"),
            },
        },
        "output": {"report": False, "save_tokens": True},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--out", str(run_dir)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert {r["prompt"] for r in records} == {hostile, "tell me a story about a cat"}
    html = write_report([run_dir], run_dir).read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; what is the capital" in html
    assert "<script>alert" not in html
