"""Kernel time by kind (GEMM, attention, norm, activation, RoPE and KV write, sampling, embedding and
copies, other): which part of a forward the GPU's time goes to, from the kernel names nsys lists.
The names are the engine's own Triton kernels, cuBLAS's (nvjet, cutlass, sm90_xmma, splitKreduce)
and torch's SDPA backends (cuDNN, flash, memory-efficient)."""

from __future__ import annotations

import re

# first match wins: "_merge_partitions_kernel" is attention's, though it merges like a reduction
KINDS = (
    ("gemm", re.compile(r"nvjet|gemm|gemv|cutlass|xmma|splitKreduce|cublas", re.IGNORECASE)),
    (
        "attention",
        re.compile(r"_decode_kernel|_merge_partitions|_prefill_kernel|fmha|flash|sdpa|cudnn|attention", re.I),
    ),
    ("norm", re.compile(r"rms_norm|layer_norm", re.IGNORECASE)),
    ("activation", re.compile(r"silu|gelu", re.IGNORECASE)),
    ("rope + kv write", re.compile(r"_rope|_write_kv|rotary", re.IGNORECASE)),
    ("sampling", re.compile(r"argmax|_chunk_max|_pick_chunk|_first_max|softmax|topk|sort|multinomial", re.I)),
    ("embedding + copies", re.compile(r"indexSelect|gather|index_elementwise|copy_kernel|CatArray", re.I)),
)
OTHER = "other"


def kernel_kind(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), OTHER)


def kernel_kinds(rows: list[dict]) -> list[dict]:
    """Rows of the kernel summary table ({name, total_ms, count}) summed by kind, largest first, each
    with its share of all kernel time. Under dependent launch a kernel's span starts while the one
    before drains, so shares are of summed kernel time, not of the timeline."""
    totals: dict[str, list[float]] = {}
    for row in rows:
        entry = totals.setdefault(kernel_kind(row["name"]), [0.0, 0])
        entry[0] += row["total_ms"]
        entry[1] += row["count"]
    whole = sum(total for total, _ in totals.values())
    kinds = [
        {"kind": kind, "total_ms": total, "count": count, "share": total / whole if whole > 0 else 0.0}
        for kind, (total, count) in totals.items()
    ]
    return sorted(kinds, key=lambda row: -row["total_ms"])
