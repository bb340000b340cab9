"""What a run watches beside the client over each timed trial: the GPU its model runs on (NVML, through
the clock sampler of llmbench/device/clocks.py) and the target server's own Prometheus /metrics
(llmbench/run/scrape.py). Entered around each trial; at the end its figures go to summary.json and
its time series to files of the run directory."""

from __future__ import annotations

import contextlib
from pathlib import Path

import msgspec
from msgspec import UNSET

from llmbench.config.schema import RunConfig
from llmbench.device.ceilings import why_no_gpu_samples
from llmbench.device.clocks import ClockSampler
from llmbench.device.power import Power, no_power, power_series, power_summary
from llmbench.results.files import write_atomic
from llmbench.results.metrics import Metrics
from llmbench.results.steps import GpuClock, Steps
from llmbench.results.summary import RunSummary
from llmbench.run.scrape import MetricsScraper, metrics_url


class Telemetry:
    def __init__(self, config: RunConfig, backend: object, clocks: ClockSampler | None, run_start: float):
        self.config, self.clocks, self.run_start = config, clocks, run_start
        self.gpu_series: list[dict[str, float | None]] = []
        url = metrics_url(config, backend)
        interval = config.telemetry.scrape_interval_s
        self.scraper = MetricsScraper(url, interval, run_start) if url else None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Telemetry:
        for watcher in (self.clocks, self.scraper):
            if watcher is not None:
                self._stack.enter_context(watcher)
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def with_gpu_figures(self, steps: Steps, trial_metrics: list[Metrics]) -> Steps:
        """`steps` with the GPU's figures over the timed trials: energy, joules per output token and
        power (null, with the reason, without a GPU to read), then the SM clock."""
        if self.clocks is None:
            return _with_power(steps, no_power(why_no_gpu_samples(self.config)))
        output_tokens = [m.total_output_tokens for m in trial_metrics]
        power = power_summary(self.clocks.samples, self.clocks.spans, output_tokens)
        self.gpu_series = power_series(self.clocks.samples, self.run_start)
        steps = _with_power(steps, power)
        clock = self.clocks.take()  # which clears the samples: after the power's
        if clock is None:
            return steps
        reading = msgspec.convert(clock, GpuClock, from_attributes=True)
        return msgspec.structs.replace(steps, gpu_clock=reading)

    def finish(self, summary: RunSummary, run_dir: Path) -> None:
        """The server's figures into the summary; the GPU's samples into gpu_samples.csv and the
        server's scrapes into server_metrics.csv."""
        if self.gpu_series:
            lines = [",".join(self.gpu_series[0])]
            lines += [
                ",".join("" if v is None else f"{v:.6g}" for v in row.values()) for row in self.gpu_series
            ]
            write_atomic(Path(run_dir) / "gpu_samples.csv", "\n".join(lines) + "\n")
        if self.scraper is None:
            return
        summary.server_metrics = self.scraper.summary()
        if self.scraper.rows:
            write_atomic(Path(run_dir) / "server_metrics.csv", self.scraper.csv_text())


def _with_power(steps: Steps, power: Power) -> Steps:
    return msgspec.structs.replace(
        steps,
        energy_j=power.energy_j,
        joules_per_output_token=power.joules_per_output_token,
        joules_per_output_token_by_trial=power.joules_per_output_token_by_trial,
        mean_power_w=power.mean_power_w,
        max_power_w=power.max_power_w,
        max_memory_used_gb=power.max_memory_used_gb,
        power_unavailable=UNSET if power.unavailable is None else power.unavailable,
    )
