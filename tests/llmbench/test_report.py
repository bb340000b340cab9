import base64
import io
import json
import re

import matplotlib.image
import pytest
import yaml
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.report import ReportError, default_report_dir, write_report
from llmbench.report.load import load_run
from llmbench.report.plots import _waterfall_bottoms
from tests.llmbench.conftest import NULL_RUN
from tests.llmbench.run_dirs import make_run_dir, write_ablation

EMBEDDED = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def embedded_images(html: str) -> list[bytes]:
    return [base64.b64decode(data) for data in EMBEDDED.findall(html)]


HOSTILE_PROMPT = "<script>alert('owned')</script> & more"


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    """One CPU run's report, shared by the tests that only read it."""
    run = make_run_dir(tmp_path_factory.mktemp("cpu") / "run", name="<b>bold$name</b>", prompt=HOSTILE_PROMPT)
    return run, write_report([run], run).read_text()


def test_cpu_run_report_embeds_every_png_it_wrote(cpu_report):
    run, html = cpu_report
    pngs = sorted(p.name for p in run.glob("*.png"))
    assert pngs == ["latency_cdf.png", "over_time.png", "step_timeline.png"]
    images = embedded_images(html)
    assert sorted(images) == sorted((run / name).read_bytes() for name in pngs)
    for image in images:
        height, width, _ = matplotlib.image.imread(io.BytesIO(image), format="png").shape
        assert width > 500 and height > 300
    assert "No GPU timing" in html


def test_report_is_self_contained(cpu_report):
    html = cpu_report[1]
    text = EMBEDDED.sub("", html).lower()
    assert "<script" not in text and "<link" not in text and "<iframe" not in text
    assert "//" not in text and "url(" not in text and "@import" not in text
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]*)"', html))


def test_summary_table_shows_headline_metrics_and_environment(cpu_report):
    run, html = cpu_report
    summary = json.loads((run / "summary.json").read_text())
    assert "output tokens/s" in html and "mean TPOT (ms)" in html and "steps: mean_cpu_ms_per_step" in html
    assert f"{summary['metrics']['output_throughput']:,.1f}" in html
    assert f"<td>{summary['metrics']['completed']:,.0f}</td>" in html
    assert "test cpu" in html
    assert "INCOMPLETE" not in html


def test_user_text_is_escaped(cpu_report):
    html = cpu_report[1]
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt; &amp; more" in html
    assert "&lt;b&gt;bold$name&lt;/b&gt;" in html
    assert "<script" not in html and "<b>" not in html
    assert "outside the vocabulary" in html  # the failed request's error is listed


def test_gpu_run_adds_gpu_busy_plot(tmp_path):
    run = make_run_dir(tmp_path / "run", gpu=True)
    html = write_report([run], run).read_text()
    assert (run / "gpu_busy.png").is_file()
    assert "No GPU timing" not in html
    assert "mean_gpu_ms" in html


def test_incomplete_run_is_recomputed_from_requests(tmp_path):
    complete = load_run(make_run_dir(tmp_path / "complete", seed=3))
    cut = make_run_dir(tmp_path / "cut", seed=3, complete=False)
    with open(cut / "requests.jsonl", "a") as f:
        f.write('{"id": "req-torn", "tri')  # killed mid-write

    run = load_run(cut)
    assert not run.complete and run.summary["complete"] is False
    assert run.metrics["completed"] == 12 and run.metrics["failed"] == 1
    for key in ("output_throughput", "mean_ttft_ms", "p99_itl_ms", "mean_tpot_ms", "request_goodput"):
        assert run.metrics[key] == pytest.approx(complete.metrics[key])
    assert run.summary["steps"]["num_steps"] == complete.summary["steps"]["num_steps"]
    html = write_report([cut], cut).read_text()
    assert "INCOMPLETE" in html


def test_summary_marked_incomplete_is_recomputed(tmp_path):
    run_dir = make_run_dir(tmp_path / "run")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.update(complete=False, metrics={})
    (run_dir / "summary.json").write_text(json.dumps(summary))
    run = load_run(run_dir)
    assert not run.complete and run.metrics["completed"] == 12
    assert run.summary["environment"]["cpu"] == "test cpu"


def test_latency_samples_match_the_summary(tmp_path):
    run = load_run(make_run_dir(tmp_path / "run"))
    assert run.samples["ttft"].size == 12
    assert run.samples["ttft"].mean() == pytest.approx(run.metrics["mean_ttft_ms"])
    assert run.samples["itl"].mean() == pytest.approx(run.metrics["mean_itl_ms"])
    assert run.samples["e2el"].max() == pytest.approx(run.metrics["max_e2el_ms"])


def test_several_runs_get_side_by_side_bars_and_unique_labels(tmp_path):
    a = make_run_dir(tmp_path / "a", name="same")
    b = make_run_dir(tmp_path / "b", name="same", slowdown=1.3, gpu=True)
    out = tmp_path / "both"
    html = write_report([a, b], out).read_text()
    assert (out / "runs_side_by_side.png").is_file() and (out / "gpu_busy.png").is_file()
    assert "same (a)" in html and "same (b)" in html
    assert len(embedded_images(html)) == len(list(out.glob("*.png"))) == 5
    assert not (a / "report.html").exists()


def test_ablation_waterfall(tmp_path):
    run = make_run_dir(tmp_path / "run")
    write_ablation(run, {"all off": 100.0, "chunked_prefill": 130.0, "async_output": 125.0, "all on": 160.0})
    html = write_report([run], run).read_text()
    assert (run / "ablation_synthetic.png").is_file()
    assert "Ablation waterfall: synthetic" in html and "async_output" in html

    variants = json.loads((run / "ablation.json").read_text())["variants"]
    values = [v["metrics"]["output_throughput"] for v in variants]
    # each toggle stands on its predecessor; all on is a whole bar (equal toggles to the last step)
    assert _waterfall_bottoms(variants, values) == [0.0, 100.0, 130.0, 0.0]


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
        assert len(embedded_images((out / "report.html").read_text())) == 3


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
    assert "<script>" not in html
