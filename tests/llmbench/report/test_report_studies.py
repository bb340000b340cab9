"""The report pages of studies (an ablation from its variants and trials, a sweep from its rates) and of
a directory of collected result files, as docs/measurements/h200 is."""

import json
from pathlib import Path

from llmbench.report import write_report
from llmbench.report.format import number
from llmbench.report.plots import _waterfall_bottoms
from llmbench.results.ablation import Ablation
from tests.llmbench.run_dirs import (
    chart_specs,
    make_run_dir,
    metrics_with,
    study_dir,
    visible,
    write_ablation,
)


def test_ablation_page_is_built_from_its_variants(tmp_path):
    root = study_dir(tmp_path / "ablation", "ablation", ["all off", "+chunked_prefill", "+prefix_caching"])
    html = write_report([root], root).read_text()
    page = visible(html)
    assert "No completed requests" not in page and "No step log" not in page
    labels = ["all off", "+chunked_prefill", "+prefix_caching"]
    breakdown, throughput = chart_specs(html)[:2]
    assert breakdown["labels"] == labels and throughput["labels"] == labels
    variants = json.loads((root / "ablation.json").read_text())["variants"]
    assert throughput["datasets"][0]["data"] == [v["metrics"]["output_throughput"] for v in variants]
    assert '<td class="text">chunked_prefill</td>' in page  # what the variant switched on
    headline = page[page.index("Headline figures") : page.index("Step time breakdown")]
    assert headline.count("<tr>") == 4 and headline.count("<th>") <= 12  # one row per variant, not 21 columns
    assert (root / "step_breakdown_ablation_of_study.png").is_file()


def test_ablation_trials_show_their_spread(tmp_path):
    root = study_dir(tmp_path / "ablation", "ablation", ["all off", "+chunked_prefill"])
    data = json.loads((root / "ablation.json").read_text())
    for variant in data["variants"]:
        base = variant["metrics"]["output_throughput"]
        variant["trials"] = [
            {"trial": t, "run_dir": "", "metrics": variant["metrics"] | {"output_throughput": base * f}}
            | {"steps": variant["steps"]}
            for t, f in enumerate((0.9, 1.0, 1.2), start=1)
        ]
    (root / "ablation.json").write_text(json.dumps(data))
    page = visible(write_report([root], root).read_text())
    low, high = (number(data["variants"][0]["metrics"]["output_throughput"] * f) for f in (0.9, 1.2))
    assert f"{low}–{high} over 3 trials" in page and "medians over trials" in page


def test_sweep_page_is_built_from_its_rates(tmp_path):
    root = study_dir(tmp_path / "sweep", "sweep", ["10", "40"])
    html = write_report([root], root).read_text()
    page = visible(html)
    assert "10 req/s" in page and "40 req/s" in page and "offered rates 10 req/s, 40 req/s" in page
    ttft = next(s for s in chart_specs(html) if s.get("title") == "TTFT as the load rises")
    assert [p["note"] for p in ttft["datasets"][0]["data"]] == ["10 req/s", "40 req/s"]


def collected_results(root: Path) -> Path:
    """A directory of collected result files of every kind a GPU session leaves, written here."""
    root.mkdir(parents=True)

    def write(name: str, data: dict) -> None:
        (root / name).write_text(json.dumps(data))

    def ablation(busy_key: str, off: float, on: float) -> dict:
        variants = [
            {"name": name, "toggles": {}, "metrics": metrics_with(output_throughput=tok_s), "steps": steps}
            | {"run_dir": ""}
            for name, tok_s, steps in (
                ("all off", off, {"num_steps": 9, busy_key: 0.861, "mean_gpu_ms": 24.0}),
                ("all on", on, {"num_steps": 9, busy_key: 0.983, "mean_gpu_ms": 11.0}),
            )
        ]
        command = "llmbench ablate configs/llama3-8b-decode.yaml"
        return {"command": command, "order": [], "complete": True, "variants": variants}

    write("ablation.json", ablation("gpu_busy_step_spans", 9949.0, 19031.0))
    write("ablation_slower_host.json", ablation("gpu_busy_fraction", 8940.0, 18981.0))
    environment = {"python": "3.12", "gpu": "NVIDIA H200", "gpu_memory_gb": 139.8, "torch": "2.11"}
    run = {
        "name": "throughput",
        "complete": True,
        "config": {"name": "throughput"},
        "environment": environment,
    }
    write(
        "throughput_bundled.json",
        {
            **run,
            "metrics": metrics_with(output_throughput=10997.0),
            "steps": {"num_steps": 9, "mean_gpu_ms": 9.9},
        },
    )
    profile = Path(__file__).parents[2] / "data" / "nsys" / "profile_all_on.json"
    (root / "profile_all_on.json").write_text(profile.read_text())
    write("decode_bs1.json", {"command": "python h200_decode.py", "wall_ms_per_token": {"graphs": 4.04}})
    kernel = {"kernel": "paged_decode_attention", "shape": "B=64 ctx=2048", "median_us": 136.6}
    write("kernels.json", {"command": "llmbench kernels", "kernels": [kernel]})
    write(
        "serving.json", {"command": "python h200_serving.py", "variants": {"in-process": {"tok_s": 19824.0}}}
    )
    write(
        "sampling_drain.json",
        {"command": "bash h200_sampling_drain.sh", "points": {"greedy": {"tok_s": 1.0}}},
    )
    return root


def test_collected_results_render_as_what_they_are(tmp_path):
    root = collected_results(tmp_path / "h200")
    html = write_report([root], tmp_path / "report").read_text()
    page = visible(html)
    assert "llmbench report: h200 (result files)" in page
    for title in ("Ablation: ablation.json", "Ablation: ablation_slower_host.json", "Runs"):
        assert f"<h3>{title}</h3>" in page
    all_on = json.loads((root / "ablation.json").read_text())["variants"][-1]
    assert number(all_on["metrics"]["output_throughput"]) in page
    assert number(all_on["steps"]["gpu_busy_step_spans"], "%") in page
    older = json.loads((root / "ablation_slower_host.json").read_text())["variants"][-1]
    assert number(older["steps"]["gpu_busy_fraction"], "%") in page  # old key, read as step-span busy
    assert "Kernel busy (nsys): 98.2%" in page  # the nsys profile, as its own section
    assert "Batch-1 decode: decode_bs1.json" in page and "Kernel timings: kernels.json" in page
    assert "NVIDIA H200" in page and "CUDA device" not in page
    # named variants and points (not a study's lists) are files, not an ablation or a sweep
    assert "serving.json" in page and "sampling_drain.json" in page
    assert "<h3>Ablation: serving.json</h3>" not in page and "<h3>Sweep: sampling_drain.json</h3>" not in page


def test_ablation_waterfall(tmp_path):
    run = make_run_dir(tmp_path / "run")
    write_ablation(run, {"all off": 100.0, "chunked_prefill": 130.0, "async_output": 125.0, "all on": 160.0})
    html = write_report([run], run).read_text()
    assert (run / "ablation_synthetic.png").is_file()  # a CI artifact; the page draws its own bars
    assert "Ablation of synthetic: output throughput by variant" in html and "async_output" in html

    variants = Ablation.load(run).variants
    values = [v.metrics.output_throughput for v in variants]
    # each toggle stands on its predecessor; all on is a whole bar (equal toggles to the last step)
    assert _waterfall_bottoms(variants, values) == [0.0, 100.0, 130.0, 0.0]
