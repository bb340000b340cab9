import json

import pytest
from typer.testing import CliRunner

from llmbench.ablate import DEFAULT_ORDER, TOGGLES, AblationError, Variant, available, parse_order, plan
from llmbench.cli import app
from llmbench.config import parse_config
from llmbench.results import load_requests, load_summary
from tests.llmbench.conftest import NULL_RUN


def test_order_names_are_checked():
    assert parse_order(None) == DEFAULT_ORDER == [name for name in TOGGLES if name != "dependent_launch"]
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
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, [*args, "--set", "output.save_tokens=true"])
    assert result.exit_code == 0, result.output

    ablation = json.loads((out / "ablation.json").read_text())
    assert ablation["order"] == ["process_split", "num_scheduler_steps"] and ablation["complete"]
    assert ablation["command"] == " ".join(["llmbench", *args[:4], "--set", "output.save_tokens=true"])
    names = [v["name"] for v in ablation["variants"]]
    assert names == ["all off", "+process_split", "+num_scheduler_steps", "all on"]
    assert ablation["variants"][-1]["toggles"] == {"process_split": True, "num_scheduler_steps": 8}
    assert ablation["variants"][-1]["run_dir"] == ablation["variants"][-2]["run_dir"]

    tokens = []
    for variant in ablation["variants"][:3]:
        run_dir = out / variant["run_dir"]
        summary = load_summary(run_dir)
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
        load_summary(out)["name"] == "t"
        and load_summary(out)["metrics"] == ablation["variants"][-1]["metrics"]
    )
    assert (out / "ablation_t.png").is_file() and "+num_scheduler_steps" in (out / "report.html").read_text()
    assert "vs all off" in result.output and "1.00x" in result.output
