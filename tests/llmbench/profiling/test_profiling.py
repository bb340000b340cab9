import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.observe.nvtx_ranges import nvtx_ranges
from llmbench.engine.request import SamplingParams
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.profiling import nsys
from llmbench.profiling.nsys_stats import load_stats, stats_csv_path
from llmbench.profiling.steps import ProfileError, StepRange, parse_steps
from llmbench.profiling.window import ProfileWindow, window_from_env
from llmbench.studies.profile_run import profile_run

DATA = Path(__file__).parents[2] / "data"
# the nsys stats tables captured on the H200 with every optimization on (see test_nsys_stats.py)
ALL_ON = DATA / "nsys" / "all_on"


# --steps


@pytest.mark.parametrize(
    "text, expected",
    [("20:30", StepRange(20, 30)), ("5:", StepRange(5, None)), (":8", StepRange(0, 8)), (None, StepRange())],
)
def test_parse_steps(text, expected):
    assert parse_steps(text) == expected


@pytest.mark.parametrize("text", ["30:20", "5:5", "-1:4", "a:b", "7", "1.5:3", ""])
def test_parse_steps_rejects_bad_ranges(text):
    with pytest.raises(ProfileError, match="--steps"):
        parse_steps(text)


def test_step_range_covers_like_a_slice():
    window = StepRange(3, 6)
    assert [step for step in range(10) if window.covers(step)] == [3, 4, 5]
    assert str(window) == "3:6" and str(StepRange(4)) == "4:"


def test_window_round_trips_through_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMBENCH_PROFILE", f"torch:2:5:{tmp_path}")
    window = window_from_env()
    assert (window.tool, window.steps, window.out_dir) == ("torch", StepRange(2, 5), tmp_path)
    monkeypatch.delenv("LLMBENCH_PROFILE")
    assert window_from_env() is None


def test_nsys_window_is_harmless_without_a_gpu(tmp_path):
    window = ProfileWindow("nsys", StepRange(1, 3), tmp_path)
    states = []
    for _ in range(5):
        window.before_step()
        states.append(window.active)
    assert states == [False, True, True, False, False]
    assert window.done


# NVTX


class StepCounter:
    """An engine step hook that counts the steps it is called for."""

    def __init__(self):
        self.steps, self.closed = 0, False

    def before_step(self) -> None:
        self.steps += 1

    def close(self) -> None:
        self.closed = True


def test_the_window_counts_engine_steps_not_a_streamed_windows_hand_overs():
    """A streamed multi-step window takes one step() call per forward, yet it is one engine step, one
    row of steps.csv: --steps A:B must name the same steps as that column."""
    hook = StepCounter()
    engine = LLMEngine(EngineConfig(model=ModelConfig(executor="null"), num_scheduler_steps=4), hook)
    for request_id in "ab":
        engine.add_request(request_id, [5, 6, 7], SamplingParams(max_tokens=25, ignore_eos=True))
    calls = 0
    while engine.has_unfinished():
        engine.step()
        calls += 1
    records = engine.drain_step_records()
    assert hook.steps == len(records) == records[-1].step + 1
    assert calls > 2 * hook.steps  # most calls were hand-overs
    engine.shutdown()
    assert hook.closed


def test_nvtx_ranges_are_off_without_a_profiler():
    assert nvtx_ranges() is None


NVTX_HEADERS = sorted(glob.glob("/usr/local/cuda*/include/nvtx3/nvToolsExt.h"))

ENGINE_STEPS = """
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams

engine = LLMEngine(EngineConfig(model=ModelConfig(preset="tiny", executor="null")))
engine.add_request("a", [1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True))
while engine.has_unfinished():
    engine.step()
engine.step()  # nothing scheduled: empty prepare and sample phases
"""


@pytest.mark.skipif(shutil.which("gcc") is None or not NVTX_HEADERS, reason="needs gcc and NVTX headers")
def test_engine_steps_become_nvtx_ranges(tmp_path):
    # a real NVTX tool (tests/data/nvtx/recorder.c) attached the way Nsight Systems attaches
    tool = tmp_path / "librecorder.so"
    include = str(Path(NVTX_HEADERS[-1]).parent.parent)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-I{include}", "-o", tool, DATA / "nvtx" / "recorder.c"], check=True
    )
    record = tmp_path / "ranges.txt"
    env = {"NVTX_INJECTION64_PATH": str(tool), "NVTX_RECORD_FILE": str(record), "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # where the packages are not installed, only on the path
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    subprocess.run([sys.executable, "-c", ENGINE_STEPS], env=env, check=True)
    phases = ["push prepare", "pop", "push sample", "pop", "push output", "pop", "pop"]
    assert record.read_text().splitlines() == [
        *["push step 0", "push schedule", "pop", *phases],  # prefill
        *["push step 1", "push schedule", "pop", *phases],  # decode, the request finishes
        *["push step 2", "push schedule", "pop", *phases],  # empty step
    ]


# nsys command line


def test_nsys_commands(tmp_path):
    run = ["python", "-m", "llmbench", "run", "c.yaml", "--out", str(tmp_path)]
    command = nsys.profile_command("/opt/nsys", tmp_path, run, ["--sample=none"])
    assert command[:2] == ["/opt/nsys", "profile"]
    assert "--trace=cuda,nvtx,osrt" in command
    assert "--capture-range=cudaProfilerApi" in command and "--capture-range-end=stop" in command
    assert command[-len(run) - 1 :] == ["--sample=none", *run]
    stats = nsys.stats_command("/opt/nsys", tmp_path / "profile.nsys-rep", tmp_path / "nsys")
    assert stats[2:6] == [
        "--report",
        "nvtx_sum,cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_trace",
        "--format",
        "csv",
    ]
    assert stats[-1] == str(tmp_path / "profile.nsys-rep")
    assert stats_csv_path(tmp_path / "nsys", "nvtx_sum") == tmp_path / "nsys_nvtx_sum.csv"


def test_missing_nsys_is_a_clear_error(monkeypatch, tmp_path, null_config_file):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ProfileError, match="nsys not found: install Nsight Systems or use --torch"):
        profile_run(null_config_file, "nsys", StepRange(), tmp_path / "out")
    result = CliRunner().invoke(app, ["profile", str(null_config_file), "--nsys"])
    assert result.exit_code == 2
    assert "nsys not found: install Nsight Systems or use --torch" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--torch", "--steps", "9:3"], "--steps: expected A:B"),
        (["--torch", "--steps", "x"], "--steps: expected A:B"),
        (["--nsys", "--torch"], "choose one profiler"),
        ([], "choose one profiler"),
        (["--torch", "--", "--sample=none"], "need --nsys"),
    ],
)
def test_profile_usage_errors_exit_2(null_config_file, args, message):
    result = CliRunner().invoke(app, ["profile", str(null_config_file), *args])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize("split", [[], ["--set", "engine.process_split=true"]], ids=["in-process", "split"])
def test_torch_profile_end_to_end(null_config_file, tmp_path, split, monkeypatch):
    # split: the core process opens the window around its own steps; the frontend, which runs no
    # torch op, would capture an empty table
    out = tmp_path / "run"
    args = ["profile", str(null_config_file), "--torch", "--steps", "3:6", "--out", str(out), *split]
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/llmbench", *args])  # as the shell would start it
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    profile = json.loads((out / "profile.json").read_text())
    # CUDA activity is recorded wherever a GPU is present, even around the null executor's CPU steps
    assert (profile["tool"], profile["step_range"]) == ("torch", "3:6")
    assert profile["command"] == shlex.join(["llmbench", *args])
    assert profile["cuda"] == torch.cuda.is_available()
    names = [op["name"] for op in profile["top_ops"]]
    assert names and all(
        op["count"] >= 1 and op["cpu_total_ms"] >= op["self_cpu_ms"] for op in profile["top_ops"]
    )
    trace = json.loads((out / "trace.json").read_text())
    assert any(event.get("name") == names[0] for event in trace["traceEvents"])
    assert "Self CPU" in (out / "key_averages.txt").read_text()
    assert "Profile (torch, steps 3:6)" in (out / "report.html").read_text()
    assert (out / "summary.json").exists() and (out / "steps.csv").exists()


def test_profile_json_is_plain_json():
    summary = load_stats(ALL_ON)
    assert json.loads(json.dumps(summary)) == summary
