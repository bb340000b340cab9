import json

import msgspec
import pytest
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.config.load import parse_config
from llmbench.results.ablation import Ablation, Trial
from llmbench.results.metrics import Metrics, type_metrics
from llmbench.results.records import load_requests
from llmbench.results.steps import Steps
from llmbench.results.summary import RunSummary
from llmbench.studies.ablation import (
    DEFAULT_ORDER,
    TOGGLES,
    AblationError,
    Variant,
    available,
    parse_order,
    plan,
)
from tests.llmbench.null_run import NULL_RUN
from tests.llmbench.run_dirs import metrics_with


def test_order_names_are_checked():
    by_name = ("dependent_launch", "prefill_attention")
    assert parse_order(None) == DEFAULT_ORDER == [name for name in TOGGLES if name not in by_name]
    assert parse_order("cuda_graphs,dependent_launch") == ["cuda_graphs", "dependent_launch"]
    assert parse_order(" async_output, num_scheduler_steps ") == ["async_output", "num_scheduler_steps"]
    with pytest.raises(AblationError, match="unknown toggle 'turbo'"):
        parse_order("async_output,turbo")
    with pytest.raises(AblationError, match="named twice"):
        parse_order("async_output,async_output")


def test_plan_adds_toggles_one_at_a_time_then_leaves_each_out():
    variants = plan(["async_output", "num_scheduler_steps"], leave_one_out=True)
    assert variants == [
        Variant("all off", "00-all-off", {"async_output": False, "num_scheduler_steps": 1}),
        Variant("+async_output", "01-async_output", {"async_output": True, "num_scheduler_steps": 1}),
        Variant(
            "+num_scheduler_steps", "02-num_scheduler_steps", {"async_output": True, "num_scheduler_steps": 8}
        ),
        Variant("-async_output", "without-async_output", {"async_output": False, "num_scheduler_steps": 8}),
        Variant(
            "-num_scheduler_steps",
            "without-num_scheduler_steps",
            {"async_output": True, "num_scheduler_steps": 1},
        ),
    ]


def test_gpu_toggles_are_left_out_without_kernels_to_run(caplog):
    config = parse_config(NULL_RUN)
    with caplog.at_level("INFO"):
        assert available(["cuda_graphs", "dependent_launch", "prefix_caching"], config) == ["prefix_caching"]
    assert "leaves out cuda_graphs: the null executor runs no kernels" in caplog.text
    assert "leaves out dependent_launch: the null executor runs no kernels" in caplog.text
    assert available(["prefix_caching"], config) == ["prefix_caching"]


def test_bad_order_exits_2_naming_the_toggle(null_config_file, tmp_path):
    result = CliRunner().invoke(app, ["ablate", str(null_config_file), "--order", "async_output,warp_drive"])
    assert result.exit_code == 2
    assert "unknown toggle 'warp_drive'" in result.output
    result = CliRunner().invoke(app, ["ablate", str(null_config_file), "--order", "cuda_graphs"])
    assert result.exit_code == 2 and "none of its toggles can be switched on here" in result.output


def test_ablate_runs_each_variant_through_llmbench_run(null_config_file, tmp_path):
    out = tmp_path / "ablation"
    args = [
        "ablate",
        str(null_config_file),
        "--order",
        "process_split,num_scheduler_steps",
        "--repeat",
        "1",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, [*args, "--set", "output.save_tokens=true"])
    assert result.exit_code == 0, result.output

    ablation = json.loads((out / "ablation.json").read_text())
    assert ablation["order"] == ["process_split", "num_scheduler_steps"] and ablation["complete"]
    assert ablation["command"] == " ".join(["llmbench", *args[:6], "--set", "output.save_tokens=true"])
    names = [v["name"] for v in ablation["variants"]]
    assert names == ["all off", "+process_split", "+num_scheduler_steps", "all on"]
    assert ablation["variants"][-1]["toggles"] == {"process_split": True, "num_scheduler_steps": 8}
    assert ablation["variants"][-1]["run_dir"] == ablation["variants"][-2]["run_dir"]

    tokens = []
    for variant in ablation["variants"][:3]:
        run_dir = out / variant["run_dir"]
        assert variant["run_dir"].endswith("/trial-1")
        summary = RunSummary.load(run_dir).to_dict()
        assert summary["complete"] and summary["metrics"] == variant["metrics"]
        assert summary["config"]["engine"]["process_split"] == variant["toggles"]["process_split"]
        assert variant["metrics"]["completed"] == NULL_RUN["workload"]["num_requests"]
        records = sorted((r for r in load_requests(run_dir) if not r.warmup), key=lambda r: r.id)
        tokens.append([r.output_token_ids for r in records])
    # the null executor's tokens depend on the sequence and position only: every variant agrees
    assert tokens[0] == tokens[1] == tokens[2]
    steps = [v["steps"] for v in ablation["variants"]]
    assert steps[0]["mean_ipc_ms"] == 0 < steps[1]["mean_ipc_ms"]  # split: IPC measured in the core
    assert steps[2]["num_forwards"] > steps[2]["num_steps"]  # multi-step decodes

    assert (
        RunSummary.load(out).to_dict()["name"] == "t"
        and RunSummary.load(out).to_dict()["metrics"] == ablation["variants"][-1]["metrics"]
    )
    assert (out / "ablation_t.png").is_file() and "+num_scheduler_steps" in (out / "report.html").read_text()
    assert "vs all off" in result.output and "1.00x" in result.output


def test_repeated_variants_are_interleaved_and_keep_every_trial(null_config_file, tmp_path):
    out = tmp_path / "ablation"
    args = ["ablate", str(null_config_file), "--order", "async_output,num_scheduler_steps", "--repeat", "3"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    ablation = json.loads((out / "ablation.json").read_text())
    assert ablation["repeat"] == 3 and ablation["complete"]
    variants = ablation["variants"][:3]
    # trial 1 of every variant, then trial 2 of every variant, ...
    run_dirs = [out / v["trials"][k]["run_dir"] for k in range(3) for v in variants]
    assert [d.relative_to(out).as_posix() for d in run_dirs[:3]] == [
        "00-all-off/trial-1",
        "01-async_output/trial-1",
        "02-num_scheduler_steps/trial-1",
    ]
    started = [(d / "config.yaml").stat().st_mtime_ns for d in run_dirs]
    assert started == sorted(started)
    for variant in variants:
        assert [t["trial"] for t in variant["trials"]] == [1, 2, 3]
        throughputs = sorted(t["metrics"]["output_throughput"] for t in variant["trials"])
        assert variant["metrics"]["output_throughput"] == pytest.approx(throughputs[1])
        median_trial = next(t for t in variant["trials"] if t["run_dir"] == variant["run_dir"])
        assert median_trial["metrics"]["output_throughput"] == throughputs[1]
        low, high = variant["intervals"]["output_throughput"]
        assert throughputs[0] <= low <= throughputs[1] <= high <= throughputs[2]
        for trial in variant["trials"]:
            assert RunSummary.load(out / trial["run_dir"]).to_dict()["metrics"] == trial["metrics"]
    effect = variants[1]["vs_previous"]
    assert effect["against"] == "all off" and len(effect["ci"]) == 2
    assert effect["within_noise"] == (effect["ci"][0] <= 1 <= effect["ci"][1])
    assert "vs_previous" not in variants[0] and "vs_previous" not in ablation["variants"][-1]
    all_on = RunSummary.load(out / ablation["variants"][-1]["run_dir"]).to_dict()
    assert RunSummary.load(out).to_dict()["metrics"] == all_on["metrics"]
    assert "median of 3 interleaved trials" in result.output


@pytest.mark.parametrize("repeat", ["0", "-3", "1000000000000"])
def test_absurd_repeat_counts_exit_2_before_anything_runs(null_config_file, tmp_path, repeat):
    out = tmp_path / "ablation"
    result = CliRunner().invoke(app, ["ablate", str(null_config_file), "--repeat", repeat, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"--repeat: expected 1 to 100 trials per variant, got {repeat}" in result.output
    assert not out.exists()


def test_a_toggle_inside_the_noise_is_shown_as_such():
    from llmbench.studies.ablation import _entries
    from llmbench.studies.ablation_table import ablation_table

    def trial(k: int, throughput: float) -> Trial:
        metrics = msgspec.convert(type_metrics(metrics_with(output_throughput=throughput)), Metrics)
        return Trial(k, f"d/trial-{k}", metrics, Steps(num_steps=10))

    variants = plan(["prefix_caching", "async_output"], leave_one_out=False)
    trials = {
        "all off": [trial(1, 100.0), trial(2, 90.0), trial(3, 110.0)],
        "+prefix_caching": [trial(1, 115.0), trial(2, 95.0), trial(3, 105.0)],  # +5%, inside the noise
        "+async_output": [trial(1, 160.0), trial(2, 155.0), trial(3, 150.0)],  # +48%, clear
    }
    entries = _entries(variants, trials, ["prefix_caching", "async_output"])
    effects = {e.name: e.vs_previous for e in entries}
    assert effects["+prefix_caching"].within_noise is True
    assert effects["+prefix_caching"].ratio == pytest.approx(105 / 100)
    assert effects["+async_output"].within_noise is False
    assert effects["+async_output"].ratio == pytest.approx(155 / 105)
    from rich.console import Console

    console = Console(width=250, record=True)
    order = ["prefix_caching", "async_output"]
    console.print(
        ablation_table(Ablation(command="", order=order, repeat=3, complete=True, variants=entries))
    )
    text = console.export_text()
    assert "+5% (noise)" in text and "+48%" in text and "+48% (noise)" not in text
