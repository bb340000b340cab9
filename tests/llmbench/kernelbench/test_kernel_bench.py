"""`llmbench kernels`: its CPU-side behaviour (the timings themselves need a GPU)."""

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.kernelbench.bench import result_table


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_kernels_command_without_gpu_exits_2_with_a_message():
    result = CliRunner().invoke(app, ["kernels"])
    assert result.exit_code == 2
    assert "needs a CUDA GPU" in result.output


def test_result_table_shows_rates_fractions_and_target_verdicts():
    result = {
        "device": "GPU",
        "dtype": "bf16",
        "ceilings": {
            "copy_gb_per_s": 4000.0,
            "gemm_tflop_per_s": 800.0,
            "gemm_clock": {"sm_clock_mhz": 1755.0, "limited_fraction": 1.0, "limits": ["sw power cap"]},
        },
        "kernels": [
            {
                "kernel": "paged_decode_attention",
                "shape": "B=64 ctx=2048",
                "median_us": 150.0,
                "bound": "memory",
                "achieved": 3000.0,
                "fraction_of_ceiling": 0.75,
                "target": 0.8,
            },
            {
                "kernel": "paged_prefill_attention",
                "shape": "B=4 new=2048 cached=0",
                "median_us": 500.0,
                "bound": "compute",
                "achieved": 400.0,
                "fraction_of_ceiling": 0.5,
                "target": None,
                "clock": {"sm_clock_mhz": 1785.0, "limited_fraction": 0.5, "limits": ["sw power cap"]},
            },
        ],
    }
    console = Console(record=True, width=200)
    console.print(result_table(result))
    text = console.export_text()
    assert "3000 GB/s" in text and "75%" in text and "80% MISSED" in text
    assert "400 TFLOP/s" in text and "50%" in text
    # the clock each figure ran at: a compute-bound rate moves with it (a row without one, a file
    # written before it was recorded or where NVML is absent, shows nothing)
    assert "1785 MHz, sw power cap 50%" in text and "GEMM 800 TFLOP/s at 1755 MHz, sw power cap 100%" in text


def test_every_engine_kernel_has_a_case_and_cases_are_distinct():
    from llmbench.kernelbench.bench import all_cases

    cases = all_cases(torch.bfloat16)  # building a Case allocates nothing: inputs come from make()
    keys = [(case.kernel, case.shape) for case in cases]
    assert len(keys) == len(set(keys))
    kernels = {case.kernel.split(" ")[0] for case in cases}
    for name in ("rms_norm", "rope_and_write_kv", "silu_and_mul", "write_kv", "paged_decode_attention"):
        assert name in kernels
    assert {"paged_prefill_attention", "gemv", "argmax"} <= kernels
    # one-row GEMVs move their weight once: the LM head is 128256 x 4096 bf16
    lm_head = next(case for case in cases if case.kernel == "gemv (lm_head)")
    assert lm_head.work == 128256 * 4096 * 2 and lm_head.bound == "memory"
    # the throughput workload's GEMMs: every linear at a full decode batch, and the prefill step's
    # (the LM head only samples rows there, so it never runs at 8192), judged in FLOPs
    linears = {case.shape: case for case in cases if case.kernel.startswith("linear (")}
    assert len([shape for shape in linears if shape.startswith("M=256 ")]) == 5
    assert len([shape for shape in linears if shape.startswith("M=8192 ")]) == 4
    down = linears["M=256 N=4096 K=14336"]
    assert (
        down.kernel == "linear (down_proj)"
        and down.bound == "compute"
        and down.work == 2 * 256 * 4096 * 14336
    )


def test_the_flash_split_is_timed_at_every_prefill_shape_where_it_runs(monkeypatch):
    """Where FlashAttention-4 runs, the engine's flash op beside ours at each prefill shape, cached
    prefix included, with the same FLOP count; elsewhere its rows are left out."""
    from llmbench.kernels import flash_attention

    from llmbench.kernelbench.bench import all_cases

    monkeypatch.setattr(flash_attention, "unavailable_reason", lambda device, dtype, head_dim: "absent")
    assert not [case for case in all_cases(torch.bfloat16) if "flash split" in case.kernel]
    monkeypatch.setattr(flash_attention, "unavailable_reason", lambda device, dtype, head_dim: None)
    cases = all_cases(torch.bfloat16)
    flash = {case.shape: case for case in cases if case.kernel == "prefill_attention flash split"}
    assert set(flash) == {"B=4 new=2048 cached=0", "B=8 new=512 cached=1536", "B=1 new=8192 cached=0"}
    paged = {case.shape: case.work for case in cases if case.kernel == "paged_prefill_attention"}
    assert all(case.optional and case.work == paged[shape] for shape, case in flash.items())


def test_no_prefix_prefill_shapes_are_timed_ours_paged_ours_split_and_torch_alone(monkeypatch):
    from llmbench.kernels import flash_attention

    from llmbench.kernelbench.bench import all_cases

    # the flash rows, where they run, have a test of their own
    monkeypatch.setattr(flash_attention, "unavailable_reason", lambda device, dtype, head_dim: "absent")

    cases = all_cases(torch.bfloat16)
    kernels_of: dict[str, set[str]] = {}
    for case in cases:
        kernels_of.setdefault(case.shape, set()).add(case.kernel)
    split, paged = "prefill_attention sdpa split", "paged_prefill_attention"
    for shape in ("B=4 new=2048 cached=0", "B=1 new=8192 cached=0"):
        assert kernels_of[shape] == {paged, split, "torch sdpa cudnn", "torch sdpa flash"}
        assert len({case.work for case in cases if case.shape == shape}) == 1  # one FLOP count: rates compare
    assert kernels_of["B=2 new=2048 cached=0 + 64 decodes"] == {paged, split}
    assert kernels_of["B=8 new=512 cached=1536"] == {paged}  # a cached prefix: nothing for SDPA alone
    # torch's kernels (and our op around them) may be refused by a device; ours never are
    assert {case.kernel for case in cases if case.optional} == {split, "torch sdpa cudnn", "torch sdpa flash"}
