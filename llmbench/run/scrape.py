"""The target server's own metrics during an HTTP run: GET /metrics every telemetry.scrape_interval_s on
a daemon thread over each timed trial, read into llmbench/metrics/prometheus.py's quantities.

A server without /metrics (or one that answers with something else) costs a warning and nothing else:
the run goes on, and summary.json says why it holds no server figures."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from llmbench.config.schema import RunConfig
from llmbench.metrics.prometheus import known_quantities, parse_samples
from llmbench.metrics.server_side import summarize_scrapes
from llmbench.results.summary import ServerMetrics

logger = logging.getLogger(__name__)

Row = tuple[float, int, dict[str, float]]  # (seconds since the run started, trial, quantities)


def metrics_url(config: RunConfig, backend: object) -> str | None:
    """Where the target's /metrics is: telemetry.metrics_url, else beside the server's API (the run's own
    `llmbench serve`, or backend.url's host); None for a backend without an HTTP server."""
    if not config.telemetry.server_metrics:
        return None
    if config.telemetry.metrics_url:
        return config.telemetry.metrics_url
    if config.backend.type == "server":
        return f"{backend.url}/metrics"
    if config.backend.type == "openai":
        parts = urlsplit(config.backend.url)
        return f"{parts.scheme}://{parts.netloc}/metrics"
    return None


def http_get(url: str, timeout_s: float) -> str:
    import httpx

    response = httpx.get(url, timeout=timeout_s)
    if response.status_code >= 400:  # httpx's own error text ends in a page of documentation
        raise MetricsUnavailable(response.status_code)
    return response.text


class MetricsUnavailable(Exception):
    """The server answers GET /metrics with an error status."""

    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.status = status


class MetricsScraper:
    """A context manager: scrapes `url` from entry to exit (one scrape at each end, so a trial's deltas
    span all of it); rows accumulate over trials. The first failure before any scrape succeeded turns
    it off for the run."""

    def __init__(
        self,
        url: str,
        interval_s: float,
        run_start: float,
        fetch: Callable[[str, float], str] = http_get,
    ):
        self.url, self.interval_s, self.run_start, self.fetch = url, interval_s, run_start, fetch
        self.rows: list[Row] = []
        self.sources: dict[str, str] = {}
        self.error: str | None = None  # why there are no rows
        self.trial = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> MetricsScraper:
        self._stop.clear()
        self.scrape()  # here, not on the thread: the trial's first reading must come before its requests
        if self.error is None:
            self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self.scrape()
        self.trial += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.scrape()

    def scrape(self) -> None:
        if self.error is not None:
            return
        try:
            text = self.fetch(self.url, max(1.0, self.interval_s))
            values, sources = known_quantities(parse_samples(text))
        except MetricsUnavailable as e:
            # a server without /metrics (transformers serve) is no fault of the run's: said once, quietly
            self._failed(f"answered {e}", quiet=e.status == 404)
            return
        # best effort: httpx's transport errors share no base with OSError, and a server's text can be
        # anything; no failure of the scrape may fail the run
        except Exception as e:
            self._failed(f"{type(e).__name__}: {str(e)[:200]}")
            return
        self.sources.update(sources)
        self.rows.append((time.perf_counter() - self.run_start, self.trial, values))

    def _failed(self, reason: str, quiet: bool = False) -> None:
        if self.rows:
            logger.debug("server metrics: a scrape of %s failed (%s)", self.url, reason)
            return
        self.error = f"GET {self.url} {reason}" if quiet else f"GET {self.url} failed ({reason})"
        log = logger.info if quiet else logger.warning
        log("server metrics: %s; the run goes on without the server's own figures", self.error)

    def csv_text(self) -> str:
        """server_metrics.csv: one line a scrape, a column a quantity the server reported."""
        columns = sorted({key for _, _, values in self.rows for key in values})
        lines = [",".join(["time_s", "trial", *columns])]
        for t, trial, values in self.rows:
            cells = ["" if values.get(c) is None else f"{values[c]:.6g}" for c in columns]
            lines.append(",".join([f"{t:.3f}", str(trial), *cells]))
        return "\n".join(lines) + "\n"

    def summary(self) -> ServerMetrics:
        if not self.rows:
            return ServerMetrics(url=self.url, available=False, reason=self.error or "no scrape was taken")
        return summarize_scrapes(self.url, self.rows, self.sources)
