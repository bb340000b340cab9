"""The ceilings a run measures at its start, and the bound its summary carries: on the tiny model
(CPU, float32) every key is there and consistent with the run's own throughput; on the null executor,
whose steps run no model, the bound is left out with the reason."""

import math

import pytest
import torch

from llmbench.config.load import parse_config
from llmbench.device.ceilings import measure_ceilings, run_ceilings
from llmbench.run.runner import run_benchmark
from tests.llmbench.null_run import NULL_RUN

TINY_MODEL = [
    'model.executor="model"',
    "model.device=cpu",
    "model.dtype=float32",
    "workload.num_requests=6",
    "workload.warmup_requests=0",
]


def test_cpu_ceilings_are_positive_finite_rates_with_their_method():
    c = measure_ceilings(torch.device("cpu"), torch.float32)
    for rate in (c.gemm_flops_per_s, c.copy_bytes_per_s):
        assert math.isfinite(rate) and rate > 0
    assert c.dtype == "float32" and c.device.startswith("CPU, ") and c.gemm_clock is None
    assert "512x512x512 float32 matmul" in c.method and "bytes read + written" in c.method


def test_no_ceilings_where_the_bound_does_not_apply():
    null = run_ceilings(parse_config(NULL_RUN, []))
    assert null == "model.executor null: no model runs, so its roofline does not apply"
    peer = run_ceilings(parse_config(NULL_RUN, ["backend.type=hf"]))
    assert peer == "backend.type hf: no engine step log"


def test_a_tiny_model_run_writes_the_bound_beside_its_ceilings(tmp_path):
    result = run_benchmark(parse_config(NULL_RUN, TINY_MODEL), tmp_path / "r")
    steps, metrics = result.summary.to_dict()["steps"], result.summary.to_dict()["metrics"]
    assert "bound_unavailable" not in steps
    assert steps["ceilings_dtype"] == "float32" and steps["ceilings_devices"] == 1
    assert steps["ceiling_gemm_flops_per_s"] > 0 and steps["ceiling_copy_bytes_per_s"] > 0
    assert 0 < steps["bound_s"] < metrics["duration_s"]
    # one trial: the bound's throughput over the same tokens, and achieved / bound
    assert steps["bound_output_throughput"] == pytest.approx(
        metrics["total_output_tokens"] / steps["bound_s"]
    )
    assert steps["throughput_of_bound"] == pytest.approx(
        metrics["output_throughput"] / steps["bound_output_throughput"]
    )


def test_a_run_through_our_server_has_the_bound_from_the_servers_step_log(tmp_path):
    # the engine's steps come back over HTTP and the ceilings are measured in the runner's process on
    # the same device: the bound table of a backend.type server run is filled, not "n/a"
    result = run_benchmark(parse_config(NULL_RUN, [*TINY_MODEL, "backend.type=server"]), tmp_path / "r")
    steps, metrics = result.summary.to_dict()["steps"], result.summary.to_dict()["metrics"]
    assert "bound_unavailable" not in steps and steps["num_steps"] > 0
    assert 0 < steps["bound_s"] < metrics["duration_s"]
    assert 0 < steps["throughput_of_bound"] < 1


def test_a_null_executor_run_says_why_it_has_no_bound(tmp_path):
    steps = run_benchmark(parse_config(NULL_RUN, []), tmp_path / "r").summary.to_dict()["steps"]
    assert steps["bound_s"] is None and steps["throughput_of_bound"] is None
    assert steps["bound_unavailable"].startswith("model.executor null")


@pytest.mark.gpu
def test_gpu_ceilings_are_timed_with_cuda_events_and_give_the_memory_back():
    reserved = torch.cuda.memory_reserved()
    c = measure_ceilings(torch.device("cuda"), torch.bfloat16)
    assert c.gemm_flops_per_s > 1e13 and c.copy_bytes_per_s > 1e11
    assert "8192x8192x8192 bfloat16 matmul and a 1024 MiB copy" in c.method
    assert "CUDA events" in c.method and c.device == torch.cuda.get_device_name()
    # the 2.4 GB of operands are released; cuBLAS may keep its workspace (tens of MiB) in the allocator
    assert torch.cuda.memory_reserved() < reserved + 2**27


def test_a_run_records_the_clock_of_its_ceilings_gemm_and_of_its_timed_trials(tmp_path, monkeypatch):
    """A sampler's reads while the ceilings' GEMM runs land in ceiling_gemm_clock; those while the timed
    trials run (not the warm-up) in gpu_clock. The reader stands in for NVML: a warm-up sampled by
    mistake would show as samples at 1,980 MHz with no limit, the ceilings' samples kept as a "hw
    slowdown"."""
    from llmbench.device.clocks import ClockSampler
    from llmbench.device.nvml import GpuSample
    from llmbench.run import runner

    phase = {"now": "ceilings"}
    # between phases (the moments a trial's sampling starts before its first request) as in a trial
    clock_of = {"ceilings": (1500, 0x8), "warm-up": (1980, 0x0), "trial": (1785, 0x4), "between": (1785, 0x4)}
    sampler = ClockSampler(lambda: GpuSample(*clock_of[phase["now"]]), interval_s=0.001)
    monkeypatch.setattr(runner, "run_clock_sampler", lambda config: sampler)
    run_phase = runner.run_phase

    def tagged_phase(state, requests, trial, warmup, label):
        phase["now"] = "warm-up" if warmup else "trial"
        try:
            run_phase(state, requests, trial, warmup, label)
        finally:
            phase["now"] = "between"

    monkeypatch.setattr(runner, "run_phase", tagged_phase)
    config = parse_config(NULL_RUN, [*TINY_MODEL, "workload.warmup_requests=2", "workload.num_requests=4"])
    steps = run_benchmark(config, tmp_path / "r", repeat=2).summary.to_dict()["steps"]
    assert steps["ceiling_gemm_clock"] == {
        "sm_clock_mhz": 1500,
        "limited_fraction": 1.0,
        "limits": ["hw slowdown"],
    }
    assert steps["gpu_clock"] == {"sm_clock_mhz": 1785, "limited_fraction": 1.0, "limits": ["sw power cap"]}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_a_cpu_run_has_no_clock_to_record(tmp_path):
    steps = run_benchmark(parse_config(NULL_RUN, TINY_MODEL), tmp_path / "r").summary.to_dict()["steps"]
    assert "gpu_clock" not in steps and "ceiling_gemm_clock" not in steps
