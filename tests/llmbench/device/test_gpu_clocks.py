"""The SM-clock sampler beside `llmbench kernels`' timings: its summary of samples, its thread, and the
absence of NVML on a machine without an NVIDIA driver."""

import time

import msgspec
import pytest
import torch

from llmbench.device.clocks import (
    ClockSampler,
    clock_reading,
    describe,
    device_sampler,
    nvml_reader,
    summarize,
)


def test_summary_takes_the_median_clock_and_the_share_of_samples_held_down():
    # 0x4 sw power cap, 0x100 hw power brake; 0x1 (idle) lowers no clock the load asks for
    samples = [(1965, 0x0), (1785, 0x4), (1770, 0x104), (1785, 0x4), (345, 0x1)]
    summary = summarize(samples)
    assert summary.sm_clock_mhz == 1785
    assert summary.limited_fraction == pytest.approx(3 / 5)
    assert summary.limits == ["sw power cap", "hw power brake"]
    assert summarize([]) is None


def test_sampler_reads_from_entry_to_exit_only():
    reads = []

    def read():
        reads.append(time.perf_counter())
        return 1980, 0x4

    sampler = ClockSampler(read, interval_s=0.002)
    with sampler:
        time.sleep(0.05)
    taken = len(reads)
    time.sleep(0.02)
    assert taken >= 3 and len(reads) == taken  # the thread stopped at exit
    reading = clock_reading(sampler)
    assert reading == {"sm_clock_mhz": 1980, "limited_fraction": 1.0, "limits": ["sw power cap"]}
    assert describe(reading) == "1980 MHz, sw power cap 100%"
    # take() cleared the samples; spans after it accumulate until the next take()
    with sampler:
        pass
    with sampler:
        pass
    assert 2 <= len(sampler.samples) < taken
    assert sampler.take().sm_clock_mhz == 1980 and sampler.samples == [] and sampler.take() is None


def test_a_reading_without_limits_or_without_nvml_describes_itself():
    assert describe({"sm_clock_mhz": 1965.0, "limited_fraction": 0.0, "limits": []}) == "1965 MHz"
    assert describe(None) == ""
    assert clock_reading(None) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_no_reader_without_a_gpu():
    assert nvml_reader(torch.device("cuda")) is None
    assert device_sampler(torch.device("cuda")) is None


def test_a_cpu_has_no_clock_sampler():
    assert device_sampler(torch.device("cpu")) is None


@pytest.mark.gpu
def test_reader_reads_a_running_clock_on_a_gpu():
    read = nvml_reader(torch.device("cuda"))
    assert read is not None
    sample = read()
    assert 100 <= sample.sm_clock_mhz <= 5000 and sample.reasons >= 0
    assert sample.power_w > 0 and sample.memory_used_bytes > 0
    assert sample.energy_j is None or sample.energy_j > 0  # GPUs before Volta have no energy counter


def test_the_run_table_and_the_report_show_a_run_s_clock_beside_its_ceiling_s():
    from rich.console import Console

    from llmbench.cli.console import metrics_table
    from llmbench.report.format import describe as describe_key
    from llmbench.report.format import number
    from llmbench.results.steps import Steps
    from llmbench.results.summary import SCHEMA_VERSION, Environment, RunSummary

    run = {"sm_clock_mhz": 1785.0, "limited_fraction": 1.0, "limits": ["sw power cap"]}
    ceiling = {"sm_clock_mhz": 1500.0, "limited_fraction": 0.79, "limits": ["sw power cap"]}
    steps = {"gpu_clock": run, "ceiling_gemm_clock": ceiling}
    summary = RunSummary(
        schema_version=SCHEMA_VERSION,
        name="run",
        complete=True,
        started_at="",
        config={},
        environment=Environment(),
        metrics=None,
        steps=msgspec.convert({"num_steps": 0, **steps}, Steps),
    )
    console = Console(record=True, width=200)
    console.print(metrics_table(summary))
    text = console.export_text()
    assert "GPU SM clock, timed trials" in text
    assert "1785 MHz, sw power cap 100% (GEMM ceiling at 1500 MHz, sw power cap 79%)" in text
    assert number(run, describe_key("gpu_clock").unit) == "1785 MHz, sw power cap 100%"
    assert describe_key("ceiling_gemm_clock").label == "GEMM ceiling's SM clock"


def test_an_ablation_variant_pools_its_trials_clocks():
    """Each trial of a variant is its own run with its own reading; the variant's steps hold them
    pooled, not the first trial's (what a median over non-numbers keeps)."""
    from llmbench.results.ablation import Trial
    from llmbench.results.steps import GpuClock, Steps
    from llmbench.studies.ablation import Variant, _entry

    readings = [
        GpuClock(1500, 1.0, ["sw power cap"]),
        GpuClock(1980, 0.0, []),
        GpuClock(1700, 0.5, ["hw power brake", "sw power cap"]),
    ]
    done = [
        Trial(k, f"trial-{k}", None, Steps(num_steps=9, mean_wait_ms=1.0, gpu_clock=r))
        for k, r in enumerate(readings, start=1)
    ]
    steps = _entry(Variant("all off", "00-all-off", {}), done).steps
    assert steps.gpu_clock == GpuClock(1700, 0.5, ["sw power cap", "hw power brake"])
    assert steps.mean_wait_ms == 1.0
    cpu_done = [msgspec.structs.replace(t, steps=Steps(num_steps=9, mean_wait_ms=1.0)) for t in done]
    assert _entry(Variant("all off", "00-all-off", {}), cpu_done).steps.gpu_clock is msgspec.UNSET
