"""The table `llmbench ablate` prints from ablation.json: each variant's medians over its trials, their
intervals, each toggle's effect, and which preset ran with which settings fixed."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from llmbench.metrics.steps import step_value


def ablation_table(ablation: dict[str, Any]) -> Table:
    """Per variant, the median over its trials of throughput (with its interval and the effect of the
    variant's toggle), latency, GPU busy, CPU overhead (with its interval) and readback wait, and the
    speedup over all off."""
    repeat = ablation.get("repeat", 1)
    title = f"ablation, preset {ablation.get('preset', 'all')}{fixed_text(ablation)}: "
    title += " -> ".join(ablation["order"]) + f" (median of {repeat} interleaved trials)"
    table = Table(title=title)
    table.add_column("variant")
    columns = ("output tok/s", "95% CI", "toggle's effect", "mean TPOT ms", "mean TTFT ms")
    columns += ("GPU busy (step spans)", "CPU ms/step", "95% CI", "wait ms/step", "vs all off")
    for column in columns:
        table.add_column(column, justify="right")
    baseline = ablation["variants"][0]["metrics"].get("output_throughput") if ablation["variants"] else None
    for variant in ablation["variants"]:
        metrics, steps = variant["metrics"], variant["steps"] or {}
        intervals = variant.get("intervals") or {}
        throughput = metrics.get("output_throughput")
        busy = step_value(steps, "gpu_busy_step_spans")
        table.add_row(
            variant["name"],
            _fmt(throughput, "{:,.1f}"),
            _range(intervals.get("output_throughput"), "{:,.0f}"),
            _effect_text(variant.get("vs_previous")),
            _fmt(metrics.get("mean_tpot_ms"), "{:.2f}"),
            _fmt(metrics.get("mean_ttft_ms"), "{:.2f}"),
            _fmt(busy * 100 if busy is not None else None, "{:.1f}%"),
            _fmt(steps.get("mean_cpu_ms_per_step"), "{:.3f}"),
            _range(intervals.get("mean_cpu_ms_per_step"), "{:.3f}"),
            _fmt(steps.get("mean_wait_ms"), "{:.3f}"),
            _fmt(throughput / baseline if throughput and baseline else None, "{:.2f}x"),
        )
    return table


def fixed_text(ablation: dict[str, Any]) -> str:
    """The settings every variant shared, as the table and waterfall titles give them."""
    fixed = ablation.get("fixed") or {}
    return f" ({', '.join(f'{k}={v}' for k, v in fixed.items())} throughout)" if fixed else ""


def _effect_text(effect: dict[str, Any] | None) -> str:
    if effect is None:
        return "-"
    change = f"{effect['ratio'] - 1:+.0%}"
    if effect["within_noise"] is None:
        return change
    return f"{change} (noise)" if effect["within_noise"] else change


def _range(interval: list[float] | None, fmt: str) -> str:
    return "-" if interval is None else f"{fmt.format(interval[0])}-{fmt.format(interval[1])}"


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
