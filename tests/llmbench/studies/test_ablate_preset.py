"""`llmbench ablate --preset`: cpu-overhead starts from graphs on and everything hiding CPU overhead off,
then adds process_split, async_output, num_scheduler_steps, async_scheduling; the table, the waterfall
and ablation.json say which preset ran."""

import io
import json

from rich.console import Console
from typer.testing import CliRunner

import llmbench.studies.ablation
from llmbench.cli import app
from llmbench.results.ablation import Ablation
from llmbench.results.summary import RunSummary
from llmbench.studies.ablation import DEFAULT_ORDER
from llmbench.studies.ablation_table import ablation_table

CPU_OVERHEAD = ["process_split", "async_output", "num_scheduler_steps", "async_scheduling"]


def test_cpu_overhead_preset_adds_the_overlap_toggles_with_graphs_on_throughout(
    null_config_file, tmp_path, monkeypatch
):
    # as on a GPU host: nothing is left out, so the preset's cuda_graphs reaches every variant
    monkeypatch.setattr(llmbench.studies.ablation, "available", lambda order, config: list(order))
    out = tmp_path / "ablation"
    args = ["ablate", str(null_config_file), "--preset", "cpu-overhead", "--repeat", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    ablation = json.loads((out / "ablation.json").read_text())
    assert ablation["preset"] == "cpu-overhead" and ablation["fixed"] == {"cuda_graphs": True}
    assert ablation["order"] == CPU_OVERHEAD and ablation["backend"] == "bundled"
    assert "--preset cpu-overhead" in ablation["command"]
    names = [v["name"] for v in ablation["variants"]]
    assert names == ["all off", *(f"+{name}" for name in CPU_OVERHEAD), "all on"]
    for variant in ablation["variants"]:
        engine = RunSummary.load(out / variant["run_dir"]).to_dict()["config"]["engine"]
        assert engine["cuda_graphs"] is True
        assert {name: engine[name] for name in CPU_OVERHEAD} == variant["toggles"]
    assert ablation["variants"][0]["toggles"] == {
        "process_split": False,
        "async_output": False,
        "num_scheduler_steps": 1,
        "async_scheduling": False,
    }
    console = Console(file=io.StringIO(), width=300, record=True)
    console.print(ablation_table(Ablation.load(out)))
    title = "ablation, preset cpu-overhead (cuda_graphs=True throughout): process_split -> async_output"
    assert title in console.export_text()
    assert (out / "ablation_t.png").is_file()


def test_the_graphs_setting_is_left_out_on_the_cpu_and_preset_all_keeps_the_default_order(
    null_config_file, tmp_path
):
    out = tmp_path / "ablation"
    args = ["ablate", str(null_config_file), "--preset", "cpu-overhead", "--repeat", "1", "--out", str(out)]
    assert CliRunner().invoke(app, [*args, "--no-report"]).exit_code == 0
    ablation = json.loads((out / "ablation.json").read_text())
    assert ablation["fixed"] == {}  # the null executor runs no kernels: no graphs to switch on
    assert llmbench.studies.ablation.PRESETS["all"].order == DEFAULT_ORDER
    assert DEFAULT_ORDER.index("async_scheduling") == DEFAULT_ORDER.index("async_output") + 2


def test_unknown_preset_exits_2_naming_the_presets(null_config_file):
    result = CliRunner().invoke(app, ["ablate", str(null_config_file), "--preset", "fast"])
    assert result.exit_code == 2
    assert "--preset: unknown preset 'fast'; presets: all, cpu-overhead" in result.output
