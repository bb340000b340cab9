"""A step's time in parts, from summary.json's `steps`: the host's phases per step and, with GPU timing,
the GPU's work and idle time per step. Shared by the breakdown section and its PNG."""

from __future__ import annotations

from llmbench.results.steps import Steps
from llmbench.results.summary import RunSummary

HOST = (  # (steps key, label, colour): CPU phases in blues, the wait in grey
    ("mean_schedule_ms", "schedule", "#0072B2"),
    ("mean_prepare_ms", "prepare (inputs + launch)", "#56B4E9"),
    ("mean_output_ms", "output", "#009E73"),
    ("mean_ipc_ms", "IPC", "#CC79A7"),
    ("mean_wait_ms", "readback wait", "#999999"),
)
OTHER = ("other", "rest of the step", "#DDDDDD")
# on the CPU a forward runs as it is launched, synchronously, so the prepare phase holds it whole
PREPARE_WITH_FORWARD = ("mean_prepare_ms", "prepare + forward (CPU)", "#56B4E9")
IN_STEP = ("mean_schedule_ms", "mean_prepare_ms", "mean_output_ms", "mean_wait_ms")
GPU = (("gpu_work", "GPU work", "#E69F00"), ("gpu_idle", "GPU idle", "#D55E00"))


def segments(steps: Steps) -> dict[str, float] | None:
    """ms per step of each part; None without a step log. `other` is step time in no timed phase."""
    if not steps.num_steps or steps.mean_step_ms is None:
        return None
    parts = {key: float(steps.value(key) or 0.0) for key, _, _ in HOST}
    parts["other"] = max(0.0, steps.mean_step_ms - sum(parts[k] for k in IN_STEP))
    if steps.mean_gpu_ms is not None:
        parts["gpu_work"] = float(steps.mean_gpu_ms)
        parts["gpu_idle"] = float(steps.value("gpu_idle_ms") or 0.0) / steps.num_steps
    return parts


def forward_in_prepare(summary: RunSummary) -> bool:
    """Whether a run's model forwards ran on the CPU, inside its prepare phase (its readback wait is then
    near zero): a model executor on device cpu, or on auto where the machine had no GPU."""
    model = summary.config.get("model") or {}
    device = model.get("device")
    on_cpu = device == "cpu" or (device == "auto" and not summary.environment.gpu)
    return model.get("executor", "model") == "model" and on_cpu


def host_phases(summaries: list[RunSummary]) -> tuple[tuple[str, str, str], ...]:
    """HOST, its prepare named for the forward it holds where any of these runs ran one on the CPU."""
    if not any(forward_in_prepare(s) for s in summaries):
        return HOST
    return tuple(PREPARE_WITH_FORWARD if part[0] == PREPARE_WITH_FORWARD[0] else part for part in HOST)
