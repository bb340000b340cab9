"""How close each run came to its physical bound (summary.json `steps`, llmbench/metrics/roofline.py): output
throughput beside the bound's and their ratio, with the ceilings the run measured on its device. A
run without a bound says why in its row; where no run has one, one line says why instead of the table."""

from __future__ import annotations

from msgspec import UNSET

from llmbench.report.format import describe, header_cell, number
from llmbench.report.html import esc, note, table
from llmbench.report.page import Page, Point
from llmbench.results.json_file import known

FIGURES = (
    "throughput_of_bound",
    "bound_output_throughput",
    "bound_s",
    "throughput_of_serial_bound",
    "serial_bound_output_throughput",
    "ceiling_gemm_flops_per_s",
    "ceiling_copy_bytes_per_s",
)
EXPLAIN = (
    "Each engine step's least GPU time is its FLOPs at the measured GEMM rate or its bytes (weights "
    "once per forward, the KV its sequences read) at the measured copy bandwidth, whichever is longer; "
    "the bound is their sum over the timed steps, and its throughput the run's output tokens over it. "
    "The ceilings are measured on the run's device at its start. A workload with timed arrivals waits "
    "for its requests, which the bound does not count. The serial bound runs each step's matmuls and "
    "attention one after the other, each at its own roofline, as a forward's dependent kernels run: "
    "what is left to win without running attention beside the matmuls."
)


def _row(point: Point) -> list[str]:
    steps = point.steps
    cells = [number(point.metrics.output_throughput if point.metrics else None)]
    cells += [number(steps.value(key), describe(key).unit) for key in FIGURES]
    where, method = known(steps.ceilings_device), known(steps.ceilings_method)
    cells.append(esc(f"{where}: {method}" if where else known(steps.bound_unavailable) or ""))
    return cells


def render(page: Page) -> str:
    points = [p for p in page.points if p.steps.bound_s is not UNSET]
    if not points:
        return ""
    if all(p.steps.bound_s is None for p in points):
        # a table of n/a rows (an ablation of the null executor, say) would say only this
        reasons = dict.fromkeys(known(p.steps.bound_unavailable) for p in points)
        reasons.pop(None, None)
        return note(f"No physical bound: {'; '.join(reasons)}.") if reasons else ""
    header = ["", header_cell("output_throughput"), *(header_cell(k) for k in FIGURES), "ceilings measured"]
    rows = [[esc(p.label), *_row(p)] for p in points]
    return "\n".join(
        ["<h2>Against the physical bound</h2>", note(EXPLAIN), table(header, rows, (0, len(header) - 1))]
    )
