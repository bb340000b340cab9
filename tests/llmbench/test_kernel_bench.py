"""`llmbench kernels`: its CPU-side behaviour (the timings themselves need a GPU)."""

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.kernel_bench import result_table


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_kernels_command_without_gpu_exits_2_with_a_message():
    result = CliRunner().invoke(app, ["kernels"])
    assert result.exit_code == 2
    assert "needs a CUDA GPU" in result.output


def test_result_table_shows_rates_fractions_and_target_verdicts():
    result = {
        "device": "GPU",
        "dtype": "bf16",
        "ceilings": {"copy_gb_per_s": 4000.0, "gemm_tflop_per_s": 800.0},
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
            },
        ],
    }
    console = Console(record=True, width=200)
    console.print(result_table(result))
    text = console.export_text()
    assert "3000 GB/s" in text and "75%" in text and "80% MISSED" in text
    assert "400 TFLOP/s" in text and "50%" in text
