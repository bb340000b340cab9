"""`llmbench ablate`: one workload run with every optimization off, then with toggles switched on one
at a time in a stated order (the last of those is all on), and optionally with each one switched off
from all on. A preset names an order and settings every variant shares (cpu-overhead: CUDA graphs on,
as in vLLM 0.5.3, and the CPU-overhead toggles added in the order vLLM added them). Every variant is
an ordinary `llmbench run` in a sub-directory; ablation.json collects their metrics and step
summaries, and the directory's summary.json is the all-on run's, so `report` and `compare` can take
the ablation directory itself. The table is drawn by llmbench/studies/ablation_table.py."""

from __future__ import annotations

import logging
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from llmbench.config.load import load_config
from llmbench.config.schema import RunConfig
from llmbench.metrics.requests import median_over_trials
from llmbench.metrics.steps import median_steps
from llmbench.metrics.trial_stats import bootstrap_median_ci, bootstrap_ratio_ci, ratio
from llmbench.results.ablation import Ablation, Effect, Intervals, Toggles, Trial
from llmbench.results.ablation import Variant as Measured
from llmbench.results.metrics import Metrics, file_metrics, type_metrics
from llmbench.results.summary import RunSummary
from llmbench.run.result_files import default_run_dir
from llmbench.studies.study import StudyResult, run_point

if TYPE_CHECKING:
    from llmbench.run.progress import Progress

logger = logging.getLogger(__name__)

# engine toggle -> (off, on)
TOGGLES: dict[str, tuple[Any, Any]] = {
    "process_split": (False, True),
    "async_output": (False, True),
    "num_scheduler_steps": (1, 8),
    "async_scheduling": (False, True),
    "cuda_graphs": (False, True),
    "chunked_prefill": (False, True),
    "prefix_caching": (False, True),
    "dependent_launch": (False, True),
    "prefill_attention": ("paged", "sdpa"),
}
# dependent_launch only by name: the default ablation is the CPU-overhead story, and on a GPU without it
# (before Hopper) the variant would repeat the one before; prefill_attention only by name too, a kernel
# choice on trial (`--order prefill_attention`: paged against sdpa). async_scheduling after
# async_output, which it extends (no wait for step n before step n+1 is launched), so all on overlaps
# everything
DEFAULT_ORDER = ["process_split", "async_output", "num_scheduler_steps", "async_scheduling", "cuda_graphs"]
DEFAULT_ORDER += ["chunked_prefill", "prefix_caching"]


@dataclass(frozen=True)
class Preset:
    order: list[str]
    fixed: Toggles  # engine settings of every variant, the all-off one included


PRESETS = {
    "all": Preset(DEFAULT_ORDER, {}),
    # vLLM 0.5.3's shape (graphs on, nothing hiding CPU overhead), then 0.6.0's and V1's answers
    "cpu-overhead": Preset(
        ["process_split", "async_output", "num_scheduler_steps", "async_scheduling"], {"cuda_graphs": True}
    ),
}
# toggles with nothing to act on without a GPU forward
GPU_TOGGLES = ("cuda_graphs", "dependent_launch")
DEFAULT_REPEAT = 3
MAX_REPEAT = 100


class AblationError(ValueError):
    """Unusable ablate arguments (exit code 2)."""


@dataclass(frozen=True)
class Variant:
    name: str  # as shown: "all off", "+async_output", "-cuda_graphs"
    directory: str  # sub-directory of the ablation directory
    toggles: Toggles


def parse_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise AblationError(f"--preset: unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def parse_order(text: str | None, default: list[str] = DEFAULT_ORDER) -> list[str]:
    """Toggle names from `--order a,b,c` (default: the preset's order)."""
    if text is None:
        return list(default)
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


def check_repeat(repeat: int) -> int:
    """Trials per variant; an absurd count is refused before anything runs."""
    if not 1 <= repeat <= MAX_REPEAT:
        raise AblationError(f"--repeat: expected 1 to {MAX_REPEAT} trials per variant, got {repeat}")
    return repeat


def run_ablation(
    config_path: Path,
    overrides: list[str],
    order_text: str | None,
    leave_one_out: bool,
    out_dir: Path | None,
    progress: Progress | None = None,
    repeat: int = DEFAULT_REPEAT,
    preset_name: str = "all",
) -> StudyResult:
    """Run every variant `repeat` times through the same code as `llmbench run` (with the config's
    backend: through the serving layer when it is `server`), interleaved (trial 1 of every variant,
    then trial 2, ...) so that a machine's drift spreads over all variants alike; ablation.json is
    rewritten after each run. --order replaces the preset's order; its fixed settings stay."""
    check_repeat(repeat)
    preset = parse_preset(preset_name)
    command = ["llmbench", "ablate", str(config_path), *(["--order", order_text] if order_text else [])]
    command += ["--preset", preset_name] if preset_name != "all" else []
    command += ["--leave-one-out"] if leave_one_out else []
    command += ["--repeat", str(repeat), *[arg for item in overrides for arg in ("--set", item)]]
    order = parse_order(order_text, preset.order)
    base = load_config(config_path, overrides)
    order = available(order, base)
    if not order:
        raise AblationError("--order: none of its toggles can be switched on here")
    # a fixed GPU setting has nothing to act on where the GPU toggles are left out
    fixed = {k: v for k, v in preset.fixed.items() if k not in GPU_TOGGLES or available([k], base)}
    out_dir = Path(out_dir or default_run_dir(f"{base.name}-ablation"))
    ablation = Ablation(
        command=shlex.join(command),
        preset=preset_name,
        fixed=fixed,
        backend=base.backend.type,
        order=order,
        repeat=repeat,
        complete=False,
    )
    result = StudyResult(out_dir, ablation)
    variants = plan(order, leave_one_out)
    trials: dict[str, list[Trial]] = {variant.name: [] for variant in variants}
    for trial in range(1, repeat + 1):
        for variant in variants:
            toggles = {**fixed, **variant.toggles}
            settings = [f"engine.{name}={value}" for name, value in toggles.items()]
            config = load_config(config_path, [*overrides, *settings])
            config.name = f"{base.name} {variant.name}"
            logger.info("trial %d/%d, variant %s: %s", trial, repeat, variant.name, ", ".join(settings))
            run_dir = f"{variant.directory}/trial-{trial}"
            run = run_point(config, config_path, out_dir / run_dir, progress, AblationError)
            trials[variant.name].append(Trial(trial, run_dir, run.summary.metrics, run.summary.steps))
            ablation.variants = _entries(variants, trials, order)
            if variant.name == f"+{order[-1]}":
                # the directory's summary is all on's median trial, so report and compare can take it
                median_run = _entry(variant, trials[variant.name]).run_dir
                summary = RunSummary.load(out_dir / median_run)
                msgspec.structs.replace(summary, name=base.name).save(out_dir / "summary.json")
            ablation.save(out_dir / "ablation.json")
            if run.interrupted:
                result.interrupted = True
                return result
    ablation.complete = True
    ablation.save(out_dir / "ablation.json")
    return result


def _entries(variants: list[Variant], trials: dict[str, list[Trial]], order: list[str]) -> list[Measured]:
    """ablation.json's variants measured so far, each with its effect against the variant it changes:
    "+x" against the step before it, "-x" against all on; after the last step, "all on" again."""
    all_on = f"+{order[-1]}"
    entries: dict[str, Measured] = {}
    for i, variant in enumerate(variants):
        if not trials[variant.name]:
            continue
        entry = _entry(variant, trials[variant.name])
        against = all_on if variant.name.startswith("-") else variants[i - 1].name if i else None
        if against in entries:
            entry.vs_previous = _effect(entries[against], entry)
        entries[variant.name] = entry
    listed = []
    for name, entry in entries.items():
        listed.append(entry)
        if name == all_on:
            # a whole bar closing the waterfall
            listed.append(msgspec.structs.replace(entry, name="all on", vs_previous=msgspec.UNSET))
    return listed


def _entry(variant: Variant, done: list[Trial]) -> Measured:
    """A variant's medians over its trials, their 95% intervals, and every trial's own figures."""
    throughputs = [_throughput(t) for t in done]
    median_trial = done[sorted(range(len(done)), key=throughputs.__getitem__)[(len(done) - 1) // 2]]
    return Measured(
        name=variant.name,
        toggles=variant.toggles,
        metrics=_median_metrics(done),
        steps=median_steps([t.steps for t in done]),
        run_dir=median_trial.run_dir,  # the trial at the median throughput
        intervals=Intervals(
            output_throughput=_interval([t.metrics and t.metrics.output_throughput for t in done]),
            mean_cpu_ms_per_step=_interval([t.steps.mean_cpu_ms_per_step for t in done]),
        ),
        trials=list(done),
    )


def _median_metrics(done: list[Trial]) -> Metrics | None:
    """The per-metric median over the trials, as the file has it (a trial with no metrics: `{}`)."""
    flat = median_over_trials([file_metrics(msgspec.to_builtins(t.metrics)) for t in done])
    shaped = type_metrics(flat)
    return None if shaped is None else msgspec.convert(shaped, Metrics)


def _throughput(trial: Trial) -> float:
    return (trial.metrics.output_throughput if trial.metrics else 0.0) or 0.0


def _interval(values: list[float | None]) -> list[float] | None:
    known_values = [v for v in values if v is not None]
    return list(bootstrap_median_ci(known_values)) if len(known_values) == len(values) else None


def _effect(before: Measured, after: Measured) -> Effect:
    """Output throughput after / before, with a bootstrap interval over the trials: inside the noise
    when the interval holds 1 (unknown with a single trial a side)."""
    a = [_throughput(t) for t in before.trials]
    b = [_throughput(t) for t in after.trials]
    effect = Effect(
        against=before.name,
        ratio=ratio(statistics.median(a), statistics.median(b)),
        ci=None,
        within_noise=None,
    )
    if len(a) >= 2 and len(b) >= 2:
        low, high = bootstrap_ratio_ci(a, b)
        effect.ci, effect.within_noise = [low, high], low <= 1 <= high
    return effect
