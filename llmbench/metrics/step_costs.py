"""What a step must move and compute: bytes read and FLOPs of one steps.csv row, from the model shape
(engine.models.shape.LlamaShape) and the step's batch, and what those give against a peak: MBU and
MFU over the step's GPU time, or the least GPU time the step could take (its roofline bound)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from llmbench.engine.config import ModelConfig
from llmbench.engine.loading.source import model_shape
from llmbench.engine.models.shape import LlamaShape
from llmbench.results.steps import Steps

DEFAULT_PEAK_BANDWIDTH = 4.2e12  # bytes/s, H200 default (HBM3e, measured-copy scale)
DEFAULT_PEAK_FLOPS = 7.84e14  # FLOP/s, H200 default (dense bf16)


@dataclass(frozen=True)
class StepCosts:
    """Turns a step's batch shape into bytes moved and FLOPs done, and those into utilizations."""

    shape: LlamaShape
    dtype_bytes: int
    peak_bandwidth: float  # bytes/s
    peak_flops: float  # FLOP/s
    peaks_source: str  # "config", "default (H200)" or "measured"

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> StepCosts | None:
        """From a resolved run config (summary.json's `config`); None for the null executor and when
        the model's shape cannot be read (e.g. a model path that no longer exists)."""
        model = config.get("model") or {}
        if model.get("executor") == "null":
            return None  # no model runs: the device times it has are a simulated device's (null_forward_ms)
        try:
            shape = model_shape(ModelConfig(preset=model.get("preset"), path=model.get("path")))
        except ValueError:
            return None
        hardware = config.get("hardware") or {}
        bandwidth_gb_s, tflops = hardware.get("peak_bandwidth_gb_s"), hardware.get("peak_tflops")
        return cls(
            shape=shape,
            # auto means bfloat16 wherever GPU timing exists
            dtype_bytes=4 if model.get("dtype") == "float32" else 2,
            peak_bandwidth=bandwidth_gb_s * 1e9 if bandwidth_gb_s else DEFAULT_PEAK_BANDWIDTH,
            peak_flops=tflops * 1e12 if tflops else DEFAULT_PEAK_FLOPS,
            peaks_source="config" if bandwidth_gb_s or tflops else "default (H200)",
        )

    def step_parts(self, row: dict[str, Any]) -> tuple[float, float, float, float] | None:
        """(matmul bytes, attention bytes, matmul FLOPs, attention FLOPs) of a step. Matmuls read the
        weights once per forward and do the FLOPs of every new token; attention reads the KV cache each
        scheduled sequence holds and does QK^T and PV over the causal query-key pairs (rows written
        before steps.csv had `num_attention_pairs` count each sequence's newest token only, so their
        prefill attention reads low)."""
        kv_tokens = _kv_tokens_read(row)
        if kv_tokens is None:
            return None
        forwards = row["num_steps"]
        tokens_per_forward = row["num_prefill_tokens"] + row["num_decode_seqs"]
        matmul_flops = self.shape.forward_flops(tokens_per_forward, 0, num_logits=row["num_decode_seqs"])
        attention_flops = 4 * self.shape.num_layers * self.shape.q_size * (kv_tokens + _prompt_pairs(row))
        return (
            forwards * self.shape.param_bytes(self.dtype_bytes),
            kv_tokens * self.shape.kv_bytes_per_token(self.dtype_bytes),
            forwards * matmul_flops,
            attention_flops,
        )

    def step_bytes(self, row: dict[str, Any]) -> float | None:
        parts = self.step_parts(row)
        return None if parts is None else parts[0] + parts[1]

    def step_flops(self, row: dict[str, Any]) -> float | None:
        parts = self.step_parts(row)
        return None if parts is None else parts[2] + parts[3]

    def utilization(self, row: dict[str, Any]) -> tuple[float, float]:
        """(MBU, MFU) of one step; NaN without GPU time or batch context."""
        gpu_s = gpu_seconds(row)
        if gpu_s is None:  # CPU runs: every step, so skip the byte and FLOP counts
            return math.nan, math.nan
        parts = self.step_parts(row)
        if parts is None:
            return math.nan, math.nan
        nbytes, flops = parts[0] + parts[1], parts[2] + parts[3]
        return nbytes / gpu_s / self.peak_bandwidth, flops / gpu_s / self.peak_flops

    def bound_s(self, row: dict[str, Any]) -> float | None:
        """The least time the step's work takes at the peaks: its FLOPs at the peak FLOP rate or its
        bytes at the peak bandwidth, whichever is longer. A step that ran no token has none."""
        bounds = self.bounds_s(row)
        return None if bounds is None else bounds[0]

    def serial_bound_s(self, row: dict[str, Any]) -> float | None:
        """The least time when matmuls and attention run one after the other, as a forward's kernels
        do (each layer's attention needs its QKV projection, and its output projection needs it):
        each at its own roofline, summed. Never below bound_s, which lets attention's KV reads hide
        under the matmuls' FLOPs."""
        bounds = self.bounds_s(row)
        return None if bounds is None else bounds[1]

    def bounds_s(self, row: dict[str, Any]) -> tuple[float, float] | None:
        """(bound_s, serial_bound_s) of a step from one count of its bytes and FLOPs."""
        if not ran_forward(row):
            return 0.0, 0.0
        parts = self.step_parts(row)
        if parts is None:
            return None
        matmul_bytes, attention_bytes, matmul_flops, attention_flops = parts
        bw, peak = self.peak_bandwidth, self.peak_flops
        roofline = max((matmul_flops + attention_flops) / peak, (matmul_bytes + attention_bytes) / bw)
        matmuls = max(matmul_flops / peak, matmul_bytes / bw)
        return roofline, matmuls + max(attention_flops / peak, attention_bytes / bw)


def _kv_tokens_read(row: dict[str, Any]) -> float | None:
    """KV positions read over the step's forwards: the batch context once per forward, and in a
    multi-step decode each forward reads one more position per sequence than the one before."""
    context = row.get("num_context_tokens")
    if context is None or is_missing(context):
        return None
    n = row["num_steps"]
    return n * context + row["num_decode_seqs"] * n * (n - 1) / 2


def _prompt_pairs(row: dict[str, Any]) -> float:
    """Query-key pairs beyond one per context position: the earlier tokens of each prompt chunk,
    which attend to the cached prefix and to each other (0 in a decode-only step, and for rows
    without the count)."""
    pairs = row.get("num_attention_pairs")
    if pairs is None or is_missing(pairs) or not pairs:
        return 0.0
    return pairs - row["num_context_tokens"]


def is_missing(value: Any) -> bool:
    """None, NaN, or an empty steps.csv cell."""
    return not isinstance(value, numbers.Real) or math.isnan(value)


def ran_forward(row: dict[str, Any]) -> bool:
    """Whether a step ran any sequence through the model; a trial's last step may only hand back the
    outputs of the one before, with no GPU work and no bound of its own."""
    return bool(row["num_prefill_tokens"] or row["num_decode_seqs"])


def gpu_seconds(row: dict[str, Any]) -> float | None:
    gpu_ms = row.get("gpu_ms")
    return None if is_missing(gpu_ms) or gpu_ms <= 0 else gpu_ms / 1e3


def with_utilization(steps: Steps, rows: Sequence[dict[str, Any]], costs: StepCosts | None) -> Steps:
    """`steps` with time-weighted MBU and MFU: all bytes (FLOPs) over all GPU time of the steps that
    have both, and the peaks they are taken against."""
    nbytes = flops = gpu_s = 0.0
    if costs is not None:
        for r in rows:
            seconds, parts = gpu_seconds(r), costs.step_parts(r)
            if seconds is not None and parts is not None:
                nbytes, flops = nbytes + parts[0] + parts[1], flops + parts[2] + parts[3]
                gpu_s += seconds
    if not gpu_s:
        return msgspec.structs.replace(steps, mbu=None, mfu=None)
    return msgspec.structs.replace(
        steps,
        mbu=nbytes / gpu_s / costs.peak_bandwidth,
        mfu=flops / gpu_s / costs.peak_flops,
        peak_bandwidth_bytes_per_s=costs.peak_bandwidth,
        peak_flops_per_s=costs.peak_flops,
        peaks_source=costs.peaks_source,
    )
