"""The report's "Profile" section, rendered from profile.json as a self-contained HTML fragment."""

from __future__ import annotations

from html import escape

NAME_WIDTH = 90  # kernel names run to hundreds of characters of template arguments


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _timed_rows(rows: list[dict]) -> list[list[str]]:
    return [
        [
            f'<span title="{escape(row["name"])}">{escape(_short(row["name"]))}</span>',
            f"{row['total_ms']:.3f}",
            str(row["count"]),
            f"{row['total_ms'] / row['count'] * 1e3:.1f}" if row["count"] else "-",
            f"{row['share'] * 100:.1f}%",
        ]
        for row in rows
    ]


def _nsys(profile: dict) -> str:
    steps = profile["steps"]
    parts = [
        f"<p>{steps['count']} steps, {steps['total_ms']:.2f} ms in total, "
        f"{steps['avg_ms']:.3f} ms per step (host wall time of the NVTX step ranges).</p>",
        "<h4>Time per engine phase</h4>",
        "<p>Host time inside each NVTX phase range; share is of the steps' total.</p>",
        _table(["phase", "total ms", "count", "avg µs", "share of steps"], _timed_rows(profile["phases"])),
    ]
    busy = profile.get("kernel_busy_fraction")
    if busy is not None:
        parts.append(
            f"<p>Kernel busy (nsys): {busy * 100:.1f}% of the GPU timeline from the first captured kernel to "
            f"the last, overlapping kernels counted once (<code>kernel_busy_fraction</code>).</p>"
        )
    idle = profile.get("gpu_idle")
    if idle is not None:
        per_step = f", {idle['per_step_ms']:.3f} ms per step" if idle["per_step_ms"] is not None else ""
        parts.append(
            f"<p>GPU idle: {idle['total_ms']:.2f} ms{per_step}, {idle['share'] * 100:.1f}% of that timeline "
            f"(no kernel running).</p>"
        )
    kernels, api = profile["kernels"], profile["cuda_api"]
    parts += [
        "<h4>Top kernels</h4>",
        f"<p>{kernels['count']} kernel launches, {kernels['total_ms']:.2f} ms of GPU time.</p>",
        _table(["kernel", "total ms", "count", "avg µs", "share of GPU"], _timed_rows(kernels["top"])),
    ]
    if "kinds" in kernels:  # profiles written before kernel kinds were counted have none
        rows = [
            [escape(row["kind"]), f"{row['total_ms']:.3f}", str(row["count"]), f"{row['share'] * 100:.1f}%"]
            for row in kernels["kinds"]
        ]
        parts += [
            "<h4>Kernel time by kind</h4>",
            _table(["kind", "total ms", "count", "share of kernel time"], rows),
        ]
    parts += [
        f"<h4>CUDA API</h4><p>{api['count']} calls, {api['total_ms']:.2f} ms.</p>",
        _table(["call", "total ms", "count", "avg µs", "share"], _timed_rows(api["top"])),
    ]
    return "".join(parts)


def _torch(profile: dict) -> str:
    device = "device" if profile["cuda"] else "CPU"
    rows = [
        [
            f'<span title="{escape(op["name"])}">{escape(_short(op["name"]))}</span>',
            str(op["count"]),
            f"{op['self_cpu_ms']:.3f}",
            f"{op['cpu_total_ms']:.3f}",
            f"{op['self_device_ms']:.3f}",
        ]
        for op in profile["top_ops"]
    ]
    return (
        f"<p>torch.profiler, operators by self {device} time. Chrome trace: <code>{escape(profile['trace'])}"
        f"</code>; full table: <code>{escape(profile['table'])}</code>.</p>"
        + _table(["operator", "count", "self CPU ms", "CPU total ms", "self device ms"], rows)
    )


def profile_section_html(profile: dict) -> str:
    """The section for one run's profile.json."""
    body = _nsys(profile) if profile["tool"] == "nsys" else _torch(profile)
    title = f"Profile ({escape(profile['tool'])}, steps {escape(profile['step_range'])})"
    return f"<section><h3>{title}</h3>{body}</section>"
