"""Read the CSV tables `nsys stats --format csv` writes (nvtx_sum, cuda_gpu_kern_sum, cuda_api_sum,
cuda_gpu_trace) and fold them into the summary kept as profile.json: time per engine phase, top kernels,
kernel time by kind, CUDA API totals, and how busy the kernels kept the GPU, from the kernel timeline."""

from __future__ import annotations

import csv
import io
import logging
import re
from pathlib import Path

from llmbench.engine.observe.nvtx_ranges import DOMAIN
from llmbench.metrics.steps import merge_intervals
from llmbench.profiling.kernel_kinds import kernel_kinds

logger = logging.getLogger(__name__)

REPORTS = ("nvtx_sum", "cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_trace")
TOP_KERNELS = 15
TOP_API_CALLS = 15

_MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
_UNIT = re.compile(r"\((ns|us|ms|s)\)\s*$")
STEP_RANGE = "step"  # one range per engine step, the step number in its payload


def _number(text: str) -> float:
    # the table format groups digits with commas; some versions carry that into CSV
    return float(text.replace(",", "").strip() or "nan")


def _column(header: list[str], prefixes: tuple[str, ...]) -> str | None:
    for name in header:
        if name.strip().startswith(prefixes):
            return name
    return None


def parse_stats_csv(text: str) -> list[dict]:
    """Rows of one nsys stats CSV table as {name, total_ms, count, avg_ms, min_ms, max_ms}.

    Tolerates the lines nsys prints before the table ("Generating SQLite file ...",
    "Processing [...] with [...]...") and any column order; an empty or skipped report
    ("SKIPPED: ... does not contain ...") gives no rows."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Total Time" in line), None)
    if start is None:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = [name.strip() for name in next(reader)]
    total = _column(header, ("Total Time",))
    unit = _UNIT.search(total)
    scale = _MS_PER_UNIT[unit.group(1)] if unit else _MS_PER_UNIT["ns"]
    count = _column(header, ("Instances", "Num Calls", "Count"))
    name = _column(header, ("Range", "Name"))
    times = {
        key: _column(header, (prefix,)) for key, prefix in (("avg", "Avg"), ("min", "Min"), ("max", "Max"))
    }
    if count is None or name is None:
        raise ValueError(f"unrecognised nsys stats table header: {','.join(header)}")

    rows = []
    for fields in reader:
        if len(fields) != len(header):
            break  # a blank line or the next report's banner ends this table
        record = dict(zip(header, fields, strict=True))
        row = {
            "name": record[name],
            "total_ms": _number(record[total]) * scale,
            "count": int(_number(record[count])),
        }
        for key, column in times.items():
            if column is not None:
                row[f"{key}_ms"] = _number(record[column]) * scale
        rows.append(row)
    return rows


def parse_trace_csv(text: str) -> list[tuple[float, float]]:
    """(start_ms, end_ms) of every kernel in an nsys stats `cuda_gpu_trace` CSV. Memory copies and
    sets, which the same table lists as "[CUDA memcpy ...]" / "[CUDA memset]", are left out."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip('"').startswith("Start")), None)
    if start is None:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = [name.strip() for name in next(reader)]
    begin, duration, name = (_column(header, (prefix,)) for prefix in ("Start", "Duration", "Name"))
    if begin is None or duration is None or name is None:
        raise ValueError(f"unrecognised nsys gpu trace header: {','.join(header)}")
    scales = [
        _MS_PER_UNIT[unit.group(1)] if (unit := _UNIT.search(column)) else 1e-6
        for column in (begin, duration)
    ]
    kernels = []
    for fields in reader:
        if len(fields) != len(header):
            break
        record = dict(zip(header, fields, strict=True))
        if record[name].startswith("[CUDA "):
            continue
        first = _number(record[begin]) * scales[0]
        kernels.append((first, first + _number(record[duration]) * scales[1]))
    return kernels


def kernel_timeline(kernels: list[tuple[float, float]]) -> dict | None:
    """How much of the GPU's timeline, from the first captured kernel's start to the last one's end,
    at least one kernel covers. Kernels that overlap (several streams, or a dependent launch starting
    while the kernel before it drains) count once, so the fraction never exceeds 1."""
    if not kernels:
        return None
    merged = merge_intervals(kernels)
    busy_ms = sum(end - begin for begin, end in merged)
    return {"span_ms": merged[-1][1] - merged[0][0], "busy_ms": busy_ms}


def _with_shares(rows: list[dict], whole_ms: float) -> list[dict]:
    return [{**row, "share": row["total_ms"] / whole_ms if whole_ms > 0 else 0.0} for row in rows]


def _llmbench_ranges(rows: list[dict]) -> list[dict]:
    """Our domain's ranges with the `llmbench:` prefix dropped; other domains (libraries) left out."""
    prefix = f"{DOMAIN}:"
    return [{**row, "name": row["name"][len(prefix) :]} for row in rows if row["name"].startswith(prefix)]


def _steps(ranges: list[dict]) -> dict:
    step = next((row for row in ranges if row["name"] == STEP_RANGE), {"count": 0})
    return {key: step.get(key, 0.0) for key in ("count", "total_ms", "avg_ms", "min_ms", "max_ms")}


def _phases(ranges: list[dict], step_total_ms: float) -> list[dict]:
    phases = [
        {key: row[key] for key in ("name", "total_ms", "count", "avg_ms") if key in row}
        for row in ranges
        if row["name"] != STEP_RANGE
    ]
    phases.sort(key=lambda row: -row["total_ms"])
    return _with_shares(phases, step_total_ms)


def _top(rows: list[dict], limit: int) -> tuple[float, list[dict]]:
    whole = sum(row["total_ms"] for row in rows)
    ordered = sorted(rows, key=lambda row: -row["total_ms"])[:limit]
    return whole, _with_shares(ordered, whole)


def summarize(
    nvtx: list[dict], kernels: list[dict], cuda_api: list[dict], trace: list[tuple[float, float]]
) -> dict:
    """profile.json's nsys part from the parsed tables (trace: kernel intervals of cuda_gpu_trace)."""
    ranges = _llmbench_ranges(nvtx)
    steps = _steps(ranges)
    kernel_ms, top_kernels = _top(kernels, TOP_KERNELS)
    api_ms, top_api = _top(cuda_api, TOP_API_CALLS)
    summary = {
        "steps": steps,
        "phases": _phases(ranges, steps["total_ms"]),
        "kernels": {
            "total_ms": kernel_ms,
            "count": sum(row["count"] for row in kernels),
            "top": top_kernels,
            "kinds": kernel_kinds(kernels),
        },
        "cuda_api": {"total_ms": api_ms, "count": sum(row["count"] for row in cuda_api), "top": top_api},
        "kernel_busy_fraction": None,
        "gpu_idle": None,
    }
    timeline = kernel_timeline(trace)
    if timeline is not None and timeline["span_ms"] > 0:
        # Over the GPU's own timeline of the window, not the host's: with async output the GPU runs
        # behind the host, and the kernels of the last steps finish after their step ranges close.
        idle = timeline["span_ms"] - timeline["busy_ms"]
        summary["kernel_busy_fraction"] = timeline["busy_ms"] / timeline["span_ms"]
        summary["gpu_idle"] = {
            "total_ms": idle,
            "per_step_ms": idle / steps["count"] if steps["count"] else None,
            "share": idle / timeline["span_ms"],
        }
    return summary


def stats_csv_path(prefix: Path, report: str) -> Path:
    """Where `nsys stats --output PREFIX` writes one report's table."""
    return prefix.parent / f"{prefix.name}_{report}.csv"


def load_stats(prefix: Path) -> dict:
    """Parse the tables written under `prefix` and summarize them; a missing table (nsys skips a
    report without data, e.g. no kernels in the captured steps) counts as empty."""
    tables = {}
    for report in REPORTS:
        path = stats_csv_path(prefix, report)
        if path.exists():
            parse = parse_trace_csv if report == "cuda_gpu_trace" else parse_stats_csv
            tables[report] = parse(path.read_text())
        else:
            logger.warning(
                "nsys stats wrote no %s table (%s): no data of that kind was captured", report, path
            )
            tables[report] = []
    return summarize(
        tables["nvtx_sum"], tables["cuda_gpu_kern_sum"], tables["cuda_api_sum"], tables["cuda_gpu_trace"]
    )
