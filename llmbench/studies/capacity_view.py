"""How a capacity search is shown: a table of its probes and the answer's interval for the terminal, and
capacity.png, each run's goodput share against its load with the target and the interval marked."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from rich.table import Table

from llmbench.results.capacity import Capacity, CapacityRun
from llmbench.results.json_file import known

UNITS = {"rate": "req/s", "concurrency": "concurrent requests"}


def interval_text(data: Capacity) -> str:
    """'between 6.73 and 7.34 req/s' and the like, for the table's caption and the plot's title."""
    unit = UNITS[data.options.by]
    passing, failing = known(data.passing), known(data.failing)
    if passing is None and failing is None:
        return "not measured"
    if passing is None:
        return f"below {failing:g} {unit} (the lowest probed misses the target)"
    if failing is None:
        return f"at least {passing:g} {unit} (the highest probed meets the target)"
    return f"at least {passing:g} and below {failing:g} {unit}"


def capacity_table(data: Capacity) -> Table:
    """One row per load probed, lowest first: its runs' shares and latencies, and the verdict."""
    options = data.options
    table = Table(
        title=f"capacity: highest {options.by} with >= {options.target:.0%} of requests meeting every SLO",
        caption=f"answer: {interval_text(data)}" + ("" if data.complete else " (search incomplete)"),
    )
    for header in (
        options.by,
        "runs",
        "goodput share",
        "verdict",
        "req/s done",
        "TTFT p99 ms",
        "TPOT p99 ms",
    ):
        table.add_column(header, justify="right")
    by_value: dict[float, list[CapacityRun]] = {}
    for run in data.runs:
        by_value.setdefault(run.value, []).append(run)
    for value in sorted(by_value):
        runs = by_value[value]
        share = sum(r.goodput_share for r in runs) / len(runs)
        metrics = runs[0].metrics
        table.add_row(
            f"{value:g}",
            str(len(runs)),
            ", ".join(f"{r.goodput_share:.1%}" for r in runs),
            "meets" if share >= options.target else "misses",
            _cell(metrics.request_throughput if metrics else None, "{:.2f}"),
            _cell(metrics.value("p99_ttft_ms") if metrics else None, "{:.1f}"),
            _cell(metrics.value("p99_tpot_ms") if metrics else None, "{:.1f}"),
        )
    return table


def capacity_plot(data: Capacity, path: Path) -> Path:
    options = data.options
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    runs = data.runs
    ax.scatter([r.value for r in runs], [r.goodput_share for r in runs], s=18, alpha=0.6, label="run")
    probes = known(data.probes) or []
    ax.plot([p.value for p in probes], [p.goodput_share for p in probes], "o-", label="probe mean")
    ax.axhline(options.target, color="tab:red", linestyle="--", label=f"target {options.target:.0%}")
    passing, failing = known(data.passing), known(data.failing)
    if passing is not None and failing is not None:
        ax.axvspan(passing, failing, color="tab:green", alpha=0.15, label="answer")
    if options.by == "rate":
        ax.set_xscale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")  # 20, not 2 x 10^1
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
    ax.set(
        xlabel=UNITS[options.by],
        ylabel="share of requests meeting every SLO",
        ylim=(-0.02, 1.02),
        title=f"capacity: {interval_text(data)}",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=96)
    return path


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
