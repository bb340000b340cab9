"""The table `llmbench ablate` prints from ablation.json: each variant's medians over its trials, their
intervals, each toggle's effect, and which preset ran with which settings fixed."""

from __future__ import annotations

from rich.table import Table

from llmbench.results.ablation import Ablation, Effect, Intervals
from llmbench.results.json_file import known


def ablation_table(ablation: Ablation) -> Table:
    """Per variant, the median over its trials of throughput (with its interval and the effect of the
    variant's toggle), latency, GPU busy, CPU overhead (with its interval) and readback wait, and the
    speedup over all off."""
    title = f"ablation, preset {ablation.preset}{fixed_text(ablation)}: "
    title += " -> ".join(ablation.order) + f" (median of {ablation.repeat} interleaved trials)"
    table = Table(title=title)
    table.add_column("variant")
    columns = ("output tok/s", "95% CI", "toggle's effect", "mean TPOT ms", "mean TTFT ms")
    columns += ("GPU busy (step spans)", "CPU ms/step", "95% CI", "wait ms/step", "vs all off")
    for column in columns:
        table.add_column(column, justify="right")
    first = ablation.variants[0].metrics if ablation.variants else None
    baseline = first.output_throughput if first else None
    for variant in ablation.variants:
        metrics, steps = variant.metrics, variant.steps
        intervals = known(variant.intervals) or Intervals(None, None)
        throughput = metrics.output_throughput if metrics else None
        busy = known(steps.gpu_busy_step_spans)
        table.add_row(
            variant.name,
            _fmt(throughput, "{:,.1f}"),
            _range(intervals.output_throughput, "{:,.0f}"),
            _effect_text(known(variant.vs_previous)),
            _fmt(metrics.latencies.mean_tpot_ms if metrics else None, "{:.2f}"),
            _fmt(metrics.latencies.mean_ttft_ms if metrics else None, "{:.2f}"),
            _fmt(busy * 100 if busy is not None else None, "{:.1f}%"),
            _fmt(steps.mean_cpu_ms_per_step, "{:.3f}"),
            _range(intervals.mean_cpu_ms_per_step, "{:.3f}"),
            _fmt(steps.mean_wait_ms, "{:.3f}"),
            _fmt(throughput / baseline if throughput and baseline else None, "{:.2f}x"),
        )
    return table


def fixed_text(ablation: Ablation) -> str:
    """The settings every variant shared, as the table and waterfall titles give them."""
    fixed = ablation.fixed
    return f" ({', '.join(f'{k}={v}' for k, v in fixed.items())} throughout)" if fixed else ""


def _effect_text(effect: Effect | None) -> str:
    if effect is None:
        return "-"
    change = f"{effect.ratio - 1:+.0%}"
    if effect.within_noise is None:
        return change
    return f"{change} (noise)" if effect.within_noise else change


def _range(interval: list[float] | None, fmt: str) -> str:
    return "-" if interval is None else f"{fmt.format(interval[0])}-{fmt.format(interval[1])}"


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
