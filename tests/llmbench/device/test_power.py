"""Power and energy from NVML readings: the reader against a fake pynvml (the boundary NVML is read
through), and the arithmetic of a run's energy, joules per token and mean power over its trials."""

import dataclasses
import sys
import time
import types
from types import SimpleNamespace

import msgspec
import pytest
import torch

from llmbench.config.load import parse_config
from llmbench.device.clocks import ClockSampler
from llmbench.device.nvml import GpuSample, NvmlUnavailable, open_reader
from llmbench.device.power import Power, no_power, power_series, power_summary
from llmbench.metrics.requests import compute_metrics
from llmbench.report.telemetry_plots import power_over_time
from llmbench.results.metrics import Metrics
from llmbench.results.steps import Steps
from llmbench.run.telemetry import Telemetry


class FakeNvml(types.ModuleType):
    """pynvml's calls the reader makes, answering from scripted values."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def __init__(self, energy_counter=True, known_uuid="GPU-abc"):
        super().__init__("pynvml")
        self.energy_mj = 5_000_000
        self.power_mw = 650_000
        self.energy_counter, self.known_uuid = energy_counter, known_uuid

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid != self.known_uuid:
            raise self.NVMLError("Not Found")
        return "handle"

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x4

    def nvmlDeviceGetClockInfo(self, handle, which):
        assert which == self.NVML_CLOCK_SM
        return 1785

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy_counter:
            raise self.NVMLError("Not Supported")
        return self.energy_mj

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=70 * 10**9)


@pytest.fixture
def fake_gpu(monkeypatch):
    def install(**kwargs):
        nvml = FakeNvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(uuid="abc"))
        return nvml

    return install


def test_the_reader_reads_clock_reasons_power_energy_and_memory(fake_gpu):
    nvml = fake_gpu()
    read = open_reader(torch.device("cuda", 0))
    first = read()
    nvml.energy_mj += 1_500
    nvml.power_mw = 700_000
    second = read()
    assert (first.sm_clock_mhz, first.reasons, first.power_w, first.energy_j) == (1785, 0x4, 650.0, 5000.0)
    assert (second.power_w, second.energy_j, second.memory_used_bytes) == (700.0, 5001.5, 70 * 10**9)
    assert second.t >= first.t


def test_a_gpu_without_an_energy_counter_reads_power_alone(fake_gpu):
    fake_gpu(energy_counter=False)
    sample = open_reader(torch.device("cuda", 0))()
    assert sample.energy_j is None and sample.power_w == 650.0


def test_why_a_gpu_cannot_be_read(fake_gpu, monkeypatch):
    fake_gpu(known_uuid="GPU-other")
    with pytest.raises(NvmlUnavailable, match="NVML: Not Found"):
        open_reader(torch.device("cuda", 0))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what an absent package looks like to import
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py is not installed"):
        open_reader(torch.device("cuda", 0))


def samples(times, energies, powers=None, memory=None):
    powers = powers or [600.0] * len(times)
    memory = memory or [10**9] * len(times)
    return [
        GpuSample(1800, 0, t, p, e, m) for t, e, p, m in zip(times, energies, powers, memory, strict=True)
    ]


def test_energy_is_the_counter_s_increase_over_each_trial_not_over_the_gap_between_them():
    # trial 0 from t=0 to 2 s (300 J), trial 1 from t=10 to 11 s (200 J); 4,000 J went between them
    run = samples(
        [0, 1, 2, 10, 10.5, 11], [1000, 1150, 1300, 5300, 5400, 5500], powers=[100, 900, 150, 200, 200, 200]
    )
    summary = power_summary(run, spans=[0, 3], trial_output_tokens=[600, 400])
    assert summary.energy_j == pytest.approx(500)
    assert summary.joules_per_output_token == pytest.approx(0.5)
    assert summary.joules_per_output_token_by_trial == pytest.approx([0.5, 0.5])
    assert summary.mean_power_w == pytest.approx(500 / 3)  # energy over the sampled 3 s
    assert summary.max_power_w == 900
    assert summary.unavailable is None


def test_each_trial_has_its_joules_per_token_and_one_without_samples_adds_nothing():
    # trial 0: 300 J for 100 tokens; trial 1 ended before the sampler's first read; trial 2: 100 J for 200
    run = samples([0, 1, 2, 5, 6], [1000, 1100, 1300, 2000, 2100])
    summary = power_summary(run, spans=[0, 3, 3], trial_output_tokens=[100, 50, 200])
    assert summary.energy_j == pytest.approx(400)
    assert summary.joules_per_output_token == pytest.approx(400 / 350)
    assert summary.joules_per_output_token_by_trial == pytest.approx([3.0, None, 0.5])


def test_without_a_counter_power_is_averaged_and_energy_stays_unknown():
    run = samples([0, 1, 2], [None, None, None], powers=[100, 200, 300], memory=[1e9, 3e9, 2e9])
    summary = power_summary(run, spans=[0], trial_output_tokens=[10])
    assert summary.energy_j is None and summary.joules_per_output_token is None
    assert summary.joules_per_output_token_by_trial is None
    assert summary.mean_power_w == 200 and summary.max_memory_used_gb == 3
    assert "no energy counter" in summary.unavailable


def test_without_samples_every_key_is_null_with_the_reason():
    assert power_summary([], [], [10]) == Power(unavailable="no GPU sample was taken")
    reason = "device cpu: no NVIDIA GPU to read"
    assert no_power(reason) == Power(unavailable=reason)


def test_the_plotted_series_is_thinned_and_starts_at_the_run_start():
    run = samples([100 + i * 0.01 for i in range(5000)], [float(i) for i in range(5000)])
    series = power_series(run, start=100.0)
    assert len(series) <= 2000 and series[0]["time_s"] == 0.0
    assert series[1]["time_s"] == pytest.approx(0.03) and series[0]["memory_used_gb"] == 1.0


class CountingNvml(FakeNvml):
    """Each read of the energy counter finds 1 J more than the last."""

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy_mj += 1000
        return self.energy_mj


def test_the_run_s_sampler_gives_energy_per_trial_and_joules_per_token(fake_gpu, monkeypatch, tmp_path):
    """The clock sampler a run already has takes the power samples too: two trials, with 500 J spent
    between them that no trial may count."""
    nvml = CountingNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(uuid="abc"))
    sampler = ClockSampler(open_reader(torch.device("cuda", 0)), interval_s=0.001)
    telemetry = Telemetry(parse_config({}), None, sampler, run_start=0.0)
    for _ in range(2):
        with telemetry:
            time.sleep(0.01)
        nvml.energy_mj += 500_000
    spans = [*sampler.spans, len(sampler.samples)]
    reads = [b - a for a, b in zip(spans, spans[1:], strict=False)]
    steps = telemetry.with_gpu_figures(Steps(num_steps=0), [_trial(40), _trial(60)])
    assert steps.energy_j == pytest.approx(sum(n - 1 for n in reads))  # 1 J a read, within each trial
    assert steps.joules_per_output_token == pytest.approx(steps.energy_j / 100)
    by_trial = [(reads[0] - 1) / 40, (reads[1] - 1) / 60]
    assert steps.joules_per_output_token_by_trial == pytest.approx(by_trial)
    assert steps.max_power_w == 650.0 and steps.gpu_clock.sm_clock_mhz == 1785
    assert sampler.samples == [] and sampler.spans == []  # the clock reading took them
    telemetry.finish({}, tmp_path)
    lines = (tmp_path / "gpu_samples.csv").read_text().splitlines()
    assert lines[0] == "time_s,power_w,sm_clock_mhz,memory_used_gb" and len(lines) == sum(reads) + 1
    run = SimpleNamespace(path=tmp_path, label="run", name="run")  # what the report's plot reads of a run
    assert power_over_time([run], tmp_path).stat().st_size > 0


def test_a_cpu_run_has_the_power_keys_null_with_the_reason(tmp_path):
    from llmbench.run.runner import run_benchmark
    from tests.llmbench.null_run import NULL_RUN

    steps = run_benchmark(parse_config(NULL_RUN), tmp_path / "run").summary.to_dict()["steps"]
    figures = [f.name for f in dataclasses.fields(Power) if f.name != "unavailable"]
    assert all(steps[key] is None for key in figures)
    assert steps["power_unavailable"] == "model.executor null: no model runs on a GPU"
    assert not (tmp_path / "run" / "gpu_samples.csv").exists()


def _trial(output_tokens: int) -> Metrics:
    """A trial's metrics with `output_tokens` (no request measured otherwise)."""
    return msgspec.structs.replace(compute_metrics([], [50]), total_output_tokens=output_tokens)
