"""Prefill attention through FlashAttention-4's kernels (the optional `flash-attn-4` package, written in
CuTe DSL and compiled on first use) for EngineConfig.prefill_attention: flash.

The package reads the engine's cache as it is: [blocks, block_size, Hkv, D] pages, a sequence's block
table as its page table, its length as seqused_k, and causal masks aligned to the end of the keys (a
chunk's queries come after its cached prefix). So one launch serves every chunk after a cached prefix
or an earlier chunk, and one more every fresh prompt, on the K/V the step has just projected,
contiguous and any mix of lengths (cuDNN through SDPA needs a call, and an execution plan, per length).

Why a library kernel: on the H200 it beat our paged Triton kernel on chunks after a cached prefix by
1.30-1.33x (B=8 new=512 cached=1536: 249-254 us against 330) and 1.25-1.30x (B=2 new=2048 cached=2048),
and cuDNN by 1.1x on a long fresh prompt (B=1 new=8192: 921-925 us, 595 TFLOP/s, against 1,025-1,043),
while cuDNN stays 1.2-1.6x faster on fresh prompts of 256-512 tokens
(docs/measurements/h200/flash4_prefill.json).
Each kind of call compiles once, ~3 s (compile_variants)."""

from __future__ import annotations

from collections.abc import Callable

import torch

PACKAGE_HINT = "pip install 'llmbench[flash]'"


def unavailable_reason(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why these kernels cannot serve a model on this device and dtype, or None when they can."""
    if device.type != "cuda":
        return f"needs a CUDA device, the model runs on {device.type}"
    if not torch.cuda.is_available():
        return "needs a CUDA device, none is visible to torch"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        name = torch.cuda.get_device_name(device)
        return f"needs a Hopper or later GPU (compute capability 9.0+), {name} is {major}.{minor}"
    if dtype not in (torch.bfloat16, torch.float16):
        return f"needs bfloat16 or float16, the model runs in {str(dtype).removeprefix('torch.')}"
    if head_dim % 8 or head_dim > 256:
        return f"needs a head dimension that is a multiple of 8 up to 256, the model's is {head_dim}"
    try:
        _varlen_function()
    except ImportError as e:
        return f"needs the flash-attn-4 package ({PACKAGE_HINT}): {e}"
    return None


def _varlen_function() -> Callable:
    from flash_attn.cute import flash_attn_varlen_func  # optional: imported on first use only

    return flash_attn_varlen_func


def _finish(result: tuple[torch.Tensor, torch.Tensor | None], out: torch.Tensor | None) -> torch.Tensor:
    attended, _ = result  # (out, lse): lse is None unless asked for
    return attended if out is None else out.copy_(attended)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    max_query_len: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The Triton paged_prefill_attention's contract, plus max_query_len (the longest chunk, which
    sizes the launch's grid on the host): sequence b's queries are rows query_start_loc[b] ..
    query_start_loc[b+1] - 1, at its last positions, each attending causally to all its cached K/V."""
    result = _varlen_function()(
        q,
        k_cache,
        v_cache,
        cu_seqlens_q=query_start_loc,
        seqused_k=seq_lens,
        max_seqlen_q=max_query_len,
        page_table=block_tables,
        softmax_scale=scale,
        causal=True,
    )
    return _finish(result, out)


def fresh_prompt_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_len: int,
    scale: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [T, Hq, D], k/v [T, Hkv, D]: prompts from position 0, sequence b's rows query_start_loc[b] ..
    query_start_loc[b+1] - 1, each causal over its own keys -> [T, Hq, D]."""
    result = _varlen_function()(
        q,
        k,
        v,
        cu_seqlens_q=query_start_loc,
        cu_seqlens_k=query_start_loc,
        max_seqlen_q=max_len,
        max_seqlen_k=max_len,
        softmax_scale=scale,
        causal=True,
    )
    return _finish(result, out)


def compile_variants(k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int, max_num_seqs: int) -> None:
    """Runs both launches once for each kind of step that selects a kernel of its own, on the engine's
    (zeroed) cache, so that none compiles inside a run. The package compiles one kernel per key, and
    part of the key comes from the call: whether the longest chunk fits one tile of query rows, and
    whether more than 256 sequences take part. Each first occurrence costs ~3 s: on the H200 the
    throughput workload's first trial stalled for it, 11.05 s against 2.81 for the next two
    (docs/measurements/h200/throughput_flash_compile_stall.json)."""
    from flash_attn.cute.interface import BIN_BATCH_SEARCH_THRESH  # the package's lookup-aid threshold

    _, block_size, num_kv_heads, head_dim = k_cache.shape
    device, dtype, scale = k_cache.device, k_cache.dtype, head_dim**-0.5
    counts = [1] + ([BIN_BATCH_SEARCH_THRESH + 1] if max_num_seqs > BIN_BATCH_SEARCH_THRESH else [])
    for count in counts:
        for longest in (1, 512):  # one tile of query rows, and several
            q_lens = torch.tensor([longest] + [1] * (count - 1), dtype=torch.int32, device=device)
            starts = torch.nn.functional.pad(q_lens.cumsum(0, dtype=torch.int32), (1, 0))
            # as the model passes them: q and k contiguous, v a view into the fused QKV projection
            qkv = torch.zeros(
                int(q_lens.sum()), num_heads + 2 * num_kv_heads, head_dim, dtype=dtype, device=device
            )
            q, k = qkv[:, :num_heads].contiguous(), qkv[:, num_heads:-num_kv_heads].contiguous()
            fresh_prompt_attention(q, k, qkv[:, -num_kv_heads:], starts, longest, scale)
            tables = torch.zeros(count, -(-longest // block_size), dtype=torch.int32, device=device)
            paged_prefill_attention(q, k_cache, v_cache, tables, starts, q_lens, scale, max_query_len=longest)
    torch.cuda.synchronize(device)
