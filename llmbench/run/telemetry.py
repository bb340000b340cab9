"""What a run watches beside the client over each timed trial: the GPU its model runs on (NVML, through
the clock sampler of llmbench/device/clocks.py) and the target server's own Prometheus /metrics
(llmbench/run/scrape.py). Entered around each trial; at the end its figures go to summary.json and
its time series to files of the run directory."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from llmbench.config.schema import RunConfig
from llmbench.device.ceilings import run_clocks
from llmbench.device.clocks import ClockSampler
from llmbench.run.result_files import write_atomic
from llmbench.run.scrape import MetricsScraper, metrics_url


class Telemetry:
    def __init__(self, config: RunConfig, backend: object, clocks: ClockSampler | None, run_start: float):
        self.clocks = clocks
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

    def steps_summary(self) -> dict[str, Any]:
        """The GPU's figures over the timed trials, for summary.json's steps."""
        return run_clocks(self.clocks)

    def finish(self, summary: dict[str, Any], run_dir: Path) -> None:
        """The server's figures into the summary, the scrapes into server_metrics.csv."""
        if self.scraper is None:
            return
        summary["server_metrics"] = self.scraper.summary()
        if self.scraper.rows:
            write_atomic(Path(run_dir) / "server_metrics.csv", self.scraper.csv_text())
