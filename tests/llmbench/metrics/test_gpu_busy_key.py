"""The step-span GPU busy figure is `gpu_busy_step_spans`; result files written before the rename hold
it as `gpu_busy_fraction`, and the ablation table and compare read it from there."""

import io
import json
from pathlib import Path

import msgspec
from rich.console import Console

from llmbench.gate.compare import REGRESSION, compare_summaries, parse_metric_spec
from llmbench.gate.load import load_summary
from llmbench.metrics.steps import summarize_steps
from llmbench.results.ablation import Ablation
from llmbench.studies.ablation_table import ablation_table
from tests.llmbench.run_dirs import metrics_with

WRITTEN = Path(__file__).parents[3] / "docs/measurements/h200/field/capacity/summary.json"


def rows() -> list[dict]:
    return [
        {"t_start": 0.0, "t_end": 0.010, "gpu_start": 0.002, "gpu_end": 0.010, "gpu_ms": 8.0, "num_steps": 1},
        {
            "t_start": 0.010,
            "t_end": 0.020,
            "gpu_start": 0.015,
            "gpu_end": 0.020,
            "gpu_ms": 5.0,
            "num_steps": 1,
        },
    ]


def test_summary_names_the_figure_step_spans():
    steps = summarize_steps(rows())
    assert steps.gpu_busy_step_spans == 13 / 20 and "gpu_busy_fraction" not in msgspec.to_builtins(steps)


def test_compare_reads_the_old_name_in_an_older_baseline(tmp_path):
    written = json.loads(WRITTEN.read_text())
    written["steps"].pop("gpu_busy_step_spans", None)
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(written | {"steps": written["steps"] | {"gpu_busy_fraction": 0.9}}))
    new.write_text(json.dumps(written | {"steps": written["steps"] | {"gpu_busy_step_spans": 0.6}}))
    check = parse_metric_spec("steps.gpu_busy_step_spans")
    verdicts = compare_summaries(load_summary(old), load_summary(new), [check])
    verdict = next(v for v in verdicts if v.metric == check.name)
    assert (verdict.baseline, verdict.current, verdict.verdict) == (0.9, 0.6, REGRESSION)


def test_ablation_table_shows_an_older_files_figure_as_step_span_busy():
    figures = [
        ("all off", 100.0, {"gpu_busy_fraction": 0.91}),
        ("all on", 150.0, {"gpu_busy_step_spans": 0.42}),
    ]
    variants = [
        {"name": name, "toggles": {}, "run_dir": "", "steps": {"num_steps": 9, **busy}}
        | {"metrics": metrics_with(output_throughput=throughput)}
        for name, throughput, busy in figures
    ]
    older = Ablation.from_dict({"command": "", "order": ["a"], "complete": True, "variants": variants})
    out = io.StringIO()
    Console(file=out, width=250).print(ablation_table(older))
    text = out.getvalue()
    assert "GPU busy (step spans)" in text and "91.0%" in text and "42.0%" in text
