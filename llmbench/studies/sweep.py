"""`llmbench sweep`: one workload at several request rates, to see where latency turns up as the offered
load nears what the engine sustains. Every rate is an ordinary `llmbench run` in a sub-directory; sweep.json
collects their metrics, and the directory's summary.json is the highest rate's, so `report` and `compare`
can take the sweep directory itself."""

from __future__ import annotations

import logging
import math
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from rich.table import Table

from llmbench.config.load import load_config
from llmbench.config.schema import MAX_RATE, MIN_RATE, RunConfig
from llmbench.results.sweep import Point, Sweep
from llmbench.run.result_files import default_run_dir
from llmbench.studies.study import StudyResult, run_point

if TYPE_CHECKING:
    from llmbench.run.progress import Progress

logger = logging.getLogger(__name__)


class SweepError(ValueError):
    """Unusable sweep arguments (exit code 2)."""


def parse_rates(text: str) -> list[float]:
    """Requests per second from `--rates 2,4,8,inf`, ascending; inf, written so, submits every request at
    once. Each finite rate is held to workload.arrival.rate's bounds here, before the first point runs."""
    rates = []
    for item in (part.strip() for part in text.split(",")):
        try:
            rate = float(item)
        except ValueError:
            raise SweepError(f"--rates: {item!r} is not a number (use inf for all at once)") from None
        # float() reads 1e400 as inf too: only the word means all at once
        if item.lower().lstrip("+") not in ("inf", "infinity") and not MIN_RATE <= rate <= MAX_RATE:
            raise SweepError(
                f"--rates: expected rates >= {MIN_RATE:g} and <= {MAX_RATE:,.0f}, or inf, got {item!r}"
            )
        rates.append(rate)
    if len(set(rates)) != len(rates):
        raise SweepError(f"--rates: a rate is given twice in {text!r}")
    return sorted(rates)


def rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def rate_overrides(rate: float, base: RunConfig) -> list[str]:
    """The arrival settings of one point: the config's arrival process at `rate` (Poisson when the config
    submits everything at once), or everything at once for inf."""
    if math.isinf(rate):
        return ["workload.arrival.process=inf"]
    process = base.workload.arrival.process
    return [
        f"workload.arrival.process={'poisson' if process == 'inf' else process}",
        f"workload.arrival.rate={rate!r}",
    ]


def run_sweep(
    config_path: Path,
    overrides: list[str],
    rates_text: str,
    out_dir: Path | None,
    progress: Progress | None = None,
) -> StudyResult:
    """Run the workload at every rate through the same code as `llmbench run`; sweep.json after each."""
    rates = parse_rates(rates_text)
    command = ["llmbench", "sweep", str(config_path), "--rates", rates_text]
    command += [arg for item in overrides for arg in ("--set", item)]
    base = load_config(config_path, overrides)
    out_dir = Path(out_dir or default_run_dir(f"{base.name}-sweep"))
    sweep = Sweep(command=shlex.join(command), complete=False)
    result = StudyResult(out_dir, sweep)
    for i, rate in enumerate(rates):
        label = rate_label(rate)
        config = load_config(config_path, [*overrides, *rate_overrides(rate, base)])
        config.name = f"{base.name} @ {label} req/s"
        logger.info("rate %s req/s", label)
        directory = f"{i:02d}-rate-{label}"
        run = run_point(config, config_path, out_dir / directory, progress, SweepError)
        # JSON has no inf: null is all at once
        at = None if math.isinf(rate) else rate
        sweep.points.append(
            Point(
                rate=at, label=label, run_dir=directory, metrics=run.summary.metrics, steps=run.summary.steps
            )
        )
        msgspec.structs.replace(run.summary, name=base.name).save(out_dir / "summary.json")
        sweep.save(out_dir / "sweep.json")
        if run.interrupted:
            result.interrupted = True
            return result
    sweep.complete = True
    sweep.save(out_dir / "sweep.json")
    return result


SWEEP_COLUMNS = (
    ("request_throughput", "req/s done", "{:.2f}"),
    ("output_throughput", "output tok/s", "{:,.1f}"),
    ("median_ttft_ms", "TTFT p50 ms", "{:.2f}"),
    ("p99_ttft_ms", "TTFT p99 ms", "{:.2f}"),
    ("median_tpot_ms", "TPOT p50 ms", "{:.2f}"),
    ("p99_tpot_ms", "TPOT p99 ms", "{:.2f}"),
    ("request_goodput", "goodput req/s", "{:.2f}"),
)


def sweep_table(sweep: Sweep) -> Table:
    """One row per offered rate: what was served and how long it took."""
    table = Table(title="sweep: offered request rate")
    table.add_column("offered req/s")
    for _, header, _ in SWEEP_COLUMNS:
        table.add_column(header, justify="right")
    for point in sweep.points:
        cells = []
        for key, _, fmt in SWEEP_COLUMNS:
            value = point.metrics.value(key) if point.metrics else None
            cells.append("-" if value is None else fmt.format(value))
        table.add_row(point.label, *cells)
    return table
