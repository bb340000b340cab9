"""`llmbench ablate`: one workload run with every optimization off, then with toggles switched on one
at a time in a stated order (the last of those is all on), and optionally with each one switched off
from all on. Every variant is an ordinary `llmbench run` in a sub-directory; ablation.json collects
their metrics and step summaries, and the directory's summary.json is the all-on run's, so `report`
and `compare` can take the ablation directory itself."""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from llmbench.config import RunConfig, load_config
from llmbench.console import RunProgress
from llmbench.results import default_run_dir
from llmbench.study import StudyResult, run_point, write_json

logger = logging.getLogger(__name__)

# engine toggle -> (off, on)
TOGGLES: dict[str, tuple[Any, Any]] = {
    "process_split": (False, True),
    "async_output": (False, True),
    "num_scheduler_steps": (1, 8),
    "cuda_graphs": (False, True),
    "chunked_prefill": (False, True),
    "prefix_caching": (False, True),
    "dependent_launch": (False, True),
}
# dependent_launch only by name: the default ablation is the CPU-overhead story, and on a GPU without it
# (before Hopper) the variant would repeat the one before
DEFAULT_ORDER = [name for name in TOGGLES if name != "dependent_launch"]
# toggles with nothing to act on without a GPU forward
GPU_TOGGLES = ("cuda_graphs", "dependent_launch")


class AblationError(ValueError):
    """Unusable ablate arguments (exit code 2)."""


@dataclass(frozen=True)
class Variant:
    name: str  # as shown: "all off", "+async_output", "-cuda_graphs"
    directory: str  # sub-directory of the ablation directory
    toggles: dict[str, Any]


def parse_order(text: str | None) -> list[str]:
    """Toggle names from `--order a,b,c` (default: DEFAULT_ORDER)."""
    if text is None:
        return list(DEFAULT_ORDER)
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in TOGGLES:
            raise AblationError(f"--order: unknown toggle {name!r}; toggles: {', '.join(TOGGLES)}")
    if len(set(names)) != len(names):
        raise AblationError(f"--order: a toggle is named twice in {text!r}")
    if not names:
        raise AblationError("--order: give at least one toggle")
    return names


def available(order: list[str], config: RunConfig) -> list[str]:
    """The toggles of `order` this machine and config can switch on; the others are left out, noted."""
    import torch

    reason = None
    if config.model.executor == "null":
        reason = "the null executor runs no kernels"
    elif config.model.device == "cpu" or (config.model.device == "auto" and not torch.cuda.is_available()):
        reason = "no CUDA device"
    if reason is None:
        return list(order)
    for name in GPU_TOGGLES:
        if name in order:
            logger.info("ablation leaves out %s: %s", name, reason)
    return [name for name in order if name not in GPU_TOGGLES]


def plan(order: list[str], leave_one_out: bool) -> list[Variant]:
    """All off, then each toggle of `order` added to the ones before it; then each left out of all on."""
    off = {name: TOGGLES[name][0] for name in order}
    on = {name: TOGGLES[name][1] for name in order}
    variants = [Variant("all off", "00-all-off", off)]
    enabled = dict(off)
    for i, name in enumerate(order, start=1):
        enabled = {**enabled, name: TOGGLES[name][1]}
        variants.append(Variant(f"+{name}", f"{i:02d}-{name}", enabled))
    if leave_one_out:
        variants += [Variant(f"-{name}", f"without-{name}", {**on, name: off[name]}) for name in order]
    return variants


def run_ablation(
    config_path: Path,
    overrides: list[str],
    order_text: str | None,
    leave_one_out: bool,
    out_dir: Path | None,
    progress: RunProgress | None = None,
) -> StudyResult:
    """Run every variant through the same code as `llmbench run`, writing ablation.json after each."""
    command = ["llmbench", "ablate", str(config_path), *(["--order", order_text] if order_text else [])]
    command += ["--leave-one-out"] if leave_one_out else []
    command += [arg for item in overrides for arg in ("--set", item)]
    order = parse_order(order_text)
    base = load_config(config_path, overrides)
    order = available(order, base)
    if not order:
        raise AblationError("--order: none of its toggles can be switched on here")
    out_dir = Path(out_dir or default_run_dir(f"{base.name}-ablation"))
    ablation: dict[str, Any] = {
        "command": shlex.join(command),
        "order": order,
        "complete": False,
        "variants": [],
    }
    result = StudyResult(out_dir, ablation)
    for variant in plan(order, leave_one_out):
        settings = [f"engine.{name}={value}" for name, value in variant.toggles.items()]
        config = load_config(config_path, [*overrides, *settings])
        config.name = f"{base.name} {variant.name}"
        logger.info("variant %s: %s", variant.name, ", ".join(settings))
        run = run_point(config, config_path, out_dir / variant.directory, progress, AblationError)
        ablation["variants"].append(_entry(variant.name, variant.toggles, run.summary, variant.directory))
        if variant.name == f"+{order[-1]}":
            # the last step of the order is everything on: a whole bar closing the waterfall
            ablation["variants"].append(_entry("all on", variant.toggles, run.summary, variant.directory))
            write_json(out_dir / "summary.json", {**run.summary, "name": base.name})
        write_json(out_dir / "ablation.json", ablation)
        if run.interrupted:
            result.interrupted = True
            return result
    ablation["complete"] = True
    write_json(out_dir / "ablation.json", ablation)
    return result


def _entry(name: str, toggles: dict[str, Any], summary: dict[str, Any], run_dir: str) -> dict[str, Any]:
    return {
        "name": name,
        "toggles": toggles,
        "metrics": summary["metrics"],
        "steps": summary["steps"],
        "run_dir": run_dir,
    }


def ablation_table(ablation: dict[str, Any]) -> Table:
    """Throughput, latency, GPU busy, CPU overhead and readback wait per variant, and the speedup
    over all off."""
    table = Table(title="ablation: " + " -> ".join(ablation["order"]))
    columns = ("output tok/s", "mean TPOT ms", "mean TTFT ms", "GPU busy (step spans)", "CPU ms/step")
    table.add_column("variant")
    for column in (*columns, "wait ms/step", "vs all off"):
        table.add_column(column, justify="right")
    baseline = ablation["variants"][0]["metrics"].get("output_throughput") if ablation["variants"] else None
    for variant in ablation["variants"]:
        metrics, steps = variant["metrics"], variant["steps"] or {}
        throughput = metrics.get("output_throughput")
        busy = steps.get("gpu_busy_step_spans", steps.get("gpu_busy_fraction"))  # older files: old name
        table.add_row(
            variant["name"],
            _fmt(throughput, "{:,.1f}"),
            _fmt(metrics.get("mean_tpot_ms"), "{:.2f}"),
            _fmt(metrics.get("mean_ttft_ms"), "{:.2f}"),
            _fmt(busy * 100 if busy is not None else None, "{:.1f}%"),
            _fmt(steps.get("mean_cpu_ms_per_step"), "{:.3f}"),
            _fmt(steps.get("mean_wait_ms"), "{:.3f}"),
            _fmt(throughput / baseline if throughput and baseline else None, "{:.2f}x"),
        )
    return table


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
