"""One forward's attention split by kind of sequence, planned on the host once per forward
(plan_attention_split) and serving every layer.

Decodes in a mixed step. A step of chunked prefill carries the running decodes too; the paged prefill
kernel gives each of them a whole block of query rows per query head (one row used) and reads its K/V
once per query head, where the decode kernel serves every query head of a KV head from one read and
splits long contexts. So decodes go to the decode kernel, in one launch, and the chunks to the prefill
kernel.

SDPA for fresh prompts (EngineConfig.prefill_attention: sdpa). A sequence whose chunk starts at
position 0 (no cached prefix, no earlier chunk) attends to that chunk's own K/V alone, so torch's
scaled_dot_product_attention can compute it from the freshly projected k and v, contiguous and unpaged:
cuDNN's kernel on Hopper, 1.7-1.9x our paged kernel on the prefill shapes of `llmbench kernels`.

FlashAttention-4 for every chunk (prefill_attention: flash, kernels/flash_attention.py). Fresh prompts
of any mix of lengths in one launch on their own K/V, every other chunk in one more on the paged cache.

Otherwise every other sequence (chunks after a cached prefix or an earlier chunk) goes to the op
backend's paged prefill kernel in one launch. Every token's K/V is still written to the paged cache,
where later chunks and decodes read it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F
from llmbench.kernels import flash_attention
from torch.nn.attention import SDPBackend, sdpa_kernel

# cuDNN first (the fastest on Hopper); flash and memory-efficient take shapes cuDNN refuses; math is
# the CPU's and the last resort. All four take grouped KV heads (enable_gqa; cuDNN since torch 2.8)
SDPA_BACKENDS = [
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]
# One SDPA call serves the no-prefix sequences of one length (a batch of equal-length prompts is one
# call). A length whose sequences hold fewer tokens than this stays on the paged kernel: its share of the
# step's attention is small, and a call of its own (gathers, SDPA, scatter: 3-5 launches a layer) would
# cost more than the faster kernel saves on it.
SDPA_MIN_TOKENS = 64
# At most this many SDPA calls a layer, for the lengths with the most attention work (count x length^2):
# a step of many prompts of distinct lengths must not turn into hundreds of small launches; the rest
# stay in the paged kernel's single launch, which serves any mix of lengths at once.
SDPA_MAX_GROUPS = 4

# Fewer decodes than this in a mixed step stay in the prefill kernel's launch: the decode launch and its
# gathers (a few per layer) would cost more than the prefill kernel wastes on them.
DECODE_MIN_SEQS = 8


def sdpa_backends() -> AbstractContextManager:
    """SDPA_BACKENDS in their order of priority, for a whole forward: entering costs about 17 us of
    host time (2-core CPU), too much to pay in each of 32 layers."""
    return sdpa_kernel(SDPA_BACKENDS, set_priority=True)


Rows = slice | torch.Tensor  # a run of consecutive rows is a slice: a view, no gather


@dataclass
class SdpaGroup:
    length: int  # new tokens of each sequence, all at positions 0 .. length - 1
    count: int
    rows: Rows  # the group's token rows, sequence after sequence


# A part's block tables and lengths are its sequences' rows of the step's, gathered once per forward
# (not once per layer: an eager forward is launch-bound, and 32 layers share them).


@dataclass
class FreshPart:  # prefill_attention flash: every fresh prompt, one varlen call on its own K/V
    rows: Rows
    query_start: torch.Tensor  # [n + 1] int32 row offsets within `rows`
    max_len: int


@dataclass
class DecodePart:
    rows: Rows  # the one token row of each decode
    block_tables: torch.Tensor
    seq_lens: torch.Tensor


@dataclass
class PagedPart:
    rows: Rows  # token rows
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    query_start: torch.Tensor  # [n + 1] int32 row offsets within `rows`
    max_query_len: int


@dataclass
class AttentionSplit:
    groups: list[SdpaGroup]
    decodes: DecodePart | None  # None: the decodes (if any) ride in the paged part
    paged: PagedPart | None  # None when the other parts hold every sequence of the step
    fresh: FreshPart | None = None
    flash: bool = False  # the paged part by FlashAttention-4, not the op backend's kernel

    @property
    def needs_own_kv(self) -> bool:
        """A part reads the step's rotated k and v, not only the cache."""
        return bool(self.groups) or self.fresh is not None


def _selection(indices: np.ndarray) -> slice | np.ndarray:
    if len(indices) and indices[-1] - indices[0] == len(indices) - 1:
        return slice(int(indices[0]), int(indices[-1]) + 1)
    return indices


def _token_rows(query_start: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """The rows of the given sequences' new tokens, in order, without a Python loop over tokens."""
    lens = query_start[seqs + 1] - query_start[seqs]
    offsets = np.cumsum(lens) - lens
    return np.arange(lens.sum()) + np.repeat(query_start[seqs] - offsets, lens)


def _sdpa_groups(q_lens: np.ndarray, seq_lens: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(length, sequences) of the fresh-prompt lengths SDPA serves, in increasing length."""
    fresh = seq_lens == q_lens  # the chunk starts at position 0
    lengths, counts = np.unique(q_lens[fresh], return_counts=True)
    work = counts * lengths.astype(np.int64) ** 2
    largest = np.argsort(-work, kind="stable")[:SDPA_MAX_GROUPS]
    picked = sorted(i for i in largest if lengths[i] * counts[i] >= SDPA_MIN_TOKENS)
    return [(int(lengths[i]), np.flatnonzero(fresh & (q_lens == lengths[i]))) for i in picked]


def plan_attention_split(
    query_start: np.ndarray,
    seq_lens: np.ndarray,
    block_tables: torch.Tensor,
    device_seq_lens: torch.Tensor,
    prefill_attention: str,
    block_size: int,
) -> AttentionSplit | None:
    """The split of one forward (not decode-only) from its host-side row offsets [B + 1] and lengths
    [B], with each part's rows of the step's block tables and lengths (on the device), for
    EngineConfig.prefill_attention. None when nothing qualifies (the op backend's paged prefill kernel
    then serves the whole step; never with flash, whose kernels serve every chunk).
    The paged part's tables are cut to its own longest sequence: the prefill kernel chooses its launch
    by their width, which a long decode sent to the decode kernel must not set. Index tensors travel
    to the device in one non-blocking copy."""
    q_lens = np.diff(query_start)
    served = np.zeros(len(q_lens), dtype=bool)
    specs, selections = [], []
    for length, seqs in _sdpa_groups(q_lens, seq_lens) if prefill_attention == "sdpa" else []:
        served[seqs] = True
        specs.append((length, len(seqs)))
        selections.append(_selection(_token_rows(query_start, seqs)))
    flash = prefill_attention == "flash"
    fresh_seqs = np.flatnonzero(seq_lens == q_lens) if flash else np.array([], dtype=np.int64)
    if len(fresh_seqs):
        served[fresh_seqs] = True
        selections += [_selection(_token_rows(query_start, fresh_seqs)), _offsets(q_lens[fresh_seqs])]
    decode_seqs = np.flatnonzero((q_lens == 1) & ~served)
    split_decodes = len(decode_seqs) >= DECODE_MIN_SEQS
    if split_decodes:
        served[decode_seqs] = True
        # an index even when consecutive: a slice of the block tables or lengths at an odd row would
        # be a pointer Triton has not compiled the kernels for (16-byte alignment), a new variant
        # mid-run; the gathered copies are a few hundred integers
        selections += [_selection(query_start[decode_seqs]), decode_seqs]
    if not specs and not split_decodes and not flash:
        return None
    paged_seqs = np.flatnonzero(~served)
    if len(paged_seqs):
        selections.append(_selection(_token_rows(query_start, paged_seqs)))
        selections += [paged_seqs, _offsets(q_lens[paged_seqs])]
    on_device = iter(_send(selections, block_tables.device))

    def rows_of(seqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return block_tables.index_select(0, seqs), device_seq_lens.index_select(0, seqs)

    groups = [SdpaGroup(length, count, next(on_device)) for length, count in specs]
    fresh = None
    if len(fresh_seqs):
        fresh = FreshPart(next(on_device), next(on_device), int(q_lens[fresh_seqs].max()))
    decodes = DecodePart(next(on_device), *rows_of(next(on_device))) if split_decodes else None
    if len(paged_seqs):
        rows, seqs, starts = on_device
        tables, lens = rows_of(seqs)
        width = -(-int(seq_lens[paged_seqs].max()) // block_size)
        paged = PagedPart(rows, tables[:, :width], lens, starts, int(q_lens[paged_seqs].max()))
    else:
        paged = None
    return AttentionSplit(groups, decodes, paged, fresh, flash)


def _offsets(lens: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(lens)))


def _send(selections: list[slice | np.ndarray], device: torch.device) -> list[Rows]:
    """Slices stay slices; the index arrays go to the device together, as int32 views of one tensor,
    each starting on a 16-byte boundary (the paged kernel takes one as its row offsets)."""
    arrays = [s for s in selections if isinstance(s, np.ndarray)]
    if not arrays:
        return selections
    starts = np.cumsum([0] + [-(-len(a) // 4) * 4 for a in arrays])
    host = np.zeros(starts[-1], dtype=np.int32)
    for start, a in zip(starts, arrays, strict=False):
        host[start : start + len(a)] = a
    flat = torch.from_numpy(host)
    if device.type == "cuda":
        # pinned, so the copy is queued behind the step's kernels instead of waiting for them
        flat = flat.pin_memory().to(device, non_blocking=True)
    views = iter([flat[start : start + len(a)] for start, a in zip(starts, arrays, strict=False)])
    return [next(views) if isinstance(s, np.ndarray) else s for s in selections]


def _take(x: torch.Tensor, rows: Rows) -> torch.Tensor:
    return x[rows] if isinstance(rows, slice) else x.index_select(0, rows)


def _causal_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, count: int, scale: float) -> torch.Tensor:
    """q [count * L, Hq, D], k/v [count * L, Hkv, D]: `count` sequences of L tokens each, each causal
    over itself -> [count * L, Hq, D]. Tokens stay outermost (BSHD), the layout cuDNN takes as is."""

    def heads_first(x: torch.Tensor) -> torch.Tensor:
        return x.view(count, -1, *x.shape[1:]).transpose(1, 2)

    out = F.scaled_dot_product_attention(
        heads_first(q), heads_first(k), heads_first(v), is_causal=True, scale=scale, enable_gqa=True
    )
    return out.transpose(1, 2).reshape(q.shape)


def split_attention(
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    split: AttentionSplit,
    scale: float,
    ops: ModuleType,
) -> torch.Tensor:
    """q [T, Hq, D] and, when the split needs_own_kv, this step's own k, v [T, Hkv, D] (already written
    to the cache) -> [T, Hq, D]: each SDPA group on its own K/V, the fresh part by FlashAttention-4 on
    its own K/V, the decodes by ops.paged_decode_attention and the rest by the paged kernel of the
    split (FlashAttention-4's or ops.paged_prefill_attention), both on the cache. Runs inside
    sdpa_backends() when there are groups; the caller enters it once for the whole forward."""
    if split.paged is None and split.decodes is None and split.fresh is None and len(split.groups) == 1:
        return _causal_sdpa(q, k, v, split.groups[0].count, scale)  # no scatter
    launches = []  # (rows, kernel, args): the parts of one launch each
    if (part := split.fresh) is not None:
        rows = part.rows
        args = (_take(q, rows), _take(k, rows), _take(v, rows), part.query_start, part.max_len, scale)
        launches.append((rows, flash_attention.fresh_prompt_attention, args))
    if (part := split.decodes) is not None:
        args = (_take(q, part.rows), k_cache, v_cache, part.block_tables, part.seq_lens, scale)
        launches.append((part.rows, ops.paged_decode_attention, args))
    if (part := split.paged) is not None:
        kernel = ops.paged_prefill_attention
        if split.flash:
            kernel = partial(flash_attention.paged_prefill_attention, max_query_len=part.max_query_len)
        args = (_take(q, part.rows), k_cache, v_cache, part.block_tables, part.query_start, part.seq_lens)
        launches.append((part.rows, kernel, (*args, scale)))
    if not split.groups and len(launches) == 1:  # one part holds every row: its result is the output
        _, kernel, args = launches[0]
        return kernel(*args)
    out = torch.empty_like(q)
    for group in split.groups:
        rows = group.rows
        out[rows] = _causal_sdpa(_take(q, rows), _take(k, rows), _take(v, rows), group.count, scale)
    for rows, kernel, args in launches:
        _into(out, rows, kernel, args)
    return out


def _into(out: torch.Tensor, rows: Rows, kernel: Callable[..., torch.Tensor], args: tuple) -> None:
    """A part's result into its rows of `out`: written in place when the rows are a run (one
    launch fewer a layer than a scatter), scattered otherwise."""
    if isinstance(rows, slice):
        kernel(*args, out=out[rows])
    else:
        out[rows] = kernel(*args)
