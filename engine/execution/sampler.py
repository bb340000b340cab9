"""Pick the next token of each sampled sequence: greedy, temperature, top-k, top-p, min_tokens. A
request with a seed draws from a generator derived from (seed, tokens generated so far), so a sequence
recomputed after preemption samples exactly the tokens it sampled before.

Sampling never waits on the device: `prepare`, once per launched step, sends the sampling parameters of
its whole window of forwards from persistent host buffers (pinned on CUDA) to persistent device buffers
in one non-blocking copy per dtype, rows are picked with device index tensors, and the host branches only
on what it knows itself. The token readback stays the step's one sync."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from types import ModuleType

import torch
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledSeq
from llmbench.kernels import reference

_SEED_STRIDE = 1_000_003  # spreads (seed, step) pairs so neighbouring seeds do not share streams
_SAMPLING = attrgetter("sampling")


def _draw_generator(seed: int, num_outputs: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed((seed * _SEED_STRIDE + num_outputs) % (1 << 63))


class _DeviceValues:
    """One dtype's persistent host buffer (pinned on CUDA) and device buffer: a window's values are
    written on the host and sent in one non-blocking copy. On CPU the host buffer serves as is. They
    double when a window needs more, rarely from the default size (pinning memory can synchronize)."""

    def __init__(self, dtype: torch.dtype, device: torch.device, capacity: int = 1 << 14):
        self.dtype, self.device = dtype, device
        self._pinned = device.type == "cuda"
        # the host buffer may only be refilled once the last copy has read it; that copy went out
        # before the previous step's first forward, which the device has reached by the time the
        # engine prepares a step (it read the tokens of the step before), so this wait is a formality
        self._copied = torch.cuda.Event() if self._pinned else None
        self._stream = torch.cuda.current_stream(device) if self._pinned else None  # as TokenReadback
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self._host = torch.empty(capacity, dtype=self.dtype, pin_memory=self._pinned)
        self._host_np = self._host.numpy()
        on_device = torch.empty(capacity, dtype=self.dtype, device=self.device) if self._pinned else None
        self._device = self._host if on_device is None else on_device

    def send(self, parts: list[list]) -> list[torch.Tensor]:
        """Each part on the device, as views valid until the next send."""
        sizes = [len(part) for part in parts]
        total = sum(sizes)
        if not total:
            return [self._device[:0] for _ in parts]
        if self._copied is not None and not self._copied.query():
            self._copied.synchronize()
        if total > self._host.numel():
            self._allocate(max(total, 2 * self._host.numel()))
        self._host_np[:total] = [value for part in parts for value in part]
        if self._copied is not None:
            self._device[:total].copy_(self._host[:total], non_blocking=True)
            self._copied.record(self._stream)
        return list(self._device[:total].split(sizes))


@dataclass
class _Window:
    """What one window of forwards samples with: host facts to branch on, device tensors to compute
    with. Empty for a batch that is all greedy without min_tokens."""

    num_rows: int = 0
    random_rows: list[int] = field(default_factory=list)
    random_index: torch.Tensor | None = None  # device index of random_rows, when some rows are greedy
    temperature: torch.Tensor | None = None  # [n_random] float32
    top_k: torch.Tensor | None = None  # [n_random] int64, when a random row filters
    top_p: torch.Tensor | None = None  # [n_random] float32, idem
    seeded: list[tuple[int, int, int]] = field(default_factory=list)  # (random row, seed, num_outputs)
    masked: list[bool] = field(default_factory=list)  # per forward: some row's stop tokens are masked
    stop_cells: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # rows, cols


class Sampler:
    def __init__(
        self,
        eos_token_id: int,
        vocab_size: int,
        device: torch.device,
        seed: int = 0,
        ops: ModuleType = reference,
    ):
        self.eos_token_id = eos_token_id
        self.vocab_size = vocab_size
        self.device = device
        self.argmax = ops.argmax
        # requests without a seed share this one: runs are repeatable for a given model seed
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self._floats = _DeviceValues(torch.float32, device)
        self._ints = _DeviceValues(torch.int64, device)
        self._window = _Window()
        # the sampling params of the last batch prepared, and whether each of its rows is plain greedy
        # (no temperature, no min_tokens): a steady decode batch keeps them, and then builds nothing
        self._samplings: list[SamplingParams] = []
        self._plain = True
        # a device value to mask with: a Python float would reach index_put_ as a host tensor
        self._neg_inf = torch.full((), float("-inf"), device=device)

    def prepare(self, seqs: list[ScheduledSeq], num_steps: int = 1) -> None:
        """Send the parameters of the sampled sequences `seqs` (in row order) for a window of
        num_steps forwards, before the first is launched; each forward adds one to every sequence's
        output count."""
        samplings = list(map(_SAMPLING, seqs))
        if samplings != self._samplings:  # identical objects compare without a call
            self._samplings = samplings
            self._plain = not any(p.temperature > 0 or p.min_tokens > 0 for p in samplings)
        if self._plain:
            window = self._window
            if window.random_rows or window.num_rows != len(seqs) or window.masked != [False] * num_steps:
                self._window = _Window(num_rows=len(seqs), masked=[False] * num_steps)
            return
        random_rows = [i for i, s in enumerate(seqs) if s.sampling.temperature > 0]
        params = [seqs[i].sampling for i in random_rows]
        mixed = 0 < len(random_rows) < len(seqs)
        filtered = any(p.top_k > 0 or p.top_p < 1 for p in params)
        masked, cells = self._stop_cells(seqs, num_steps)
        int_parts = ([random_rows] if mixed else []) + ([[p.top_k for p in params]] if filtered else [])
        int_parts += [part for _, rows, cols in cells for part in (rows, cols)]
        float_parts = [[p.temperature for p in params]] + ([[p.top_p for p in params]] if filtered else [])
        ints, floats = iter(self._ints.send(int_parts)), iter(self._floats.send(float_parts))
        window = _Window(num_rows=len(seqs), random_rows=random_rows, masked=masked)
        # consumed in the order the parts were listed
        window.random_index = next(ints) if mixed else None
        window.top_k = next(ints) if filtered else None
        window.stop_cells = {step: (next(ints), next(ints)) for step, _, _ in cells}
        window.temperature = next(floats)
        window.top_p = next(floats) if filtered else None
        window.seeded = [
            (j, p.seed, seqs[i].num_outputs)
            for j, (i, p) in enumerate(zip(random_rows, params, strict=True))
            if p.seed is not None
        ]
        self._window = window

    def _stop_cells(
        self, seqs: list[ScheduledSeq], num_steps: int
    ) -> tuple[list[bool], list[tuple[int, list[int], list[int]]]]:
        """Before min_tokens outputs, EOS and stop tokens cannot be drawn at all: per forward whether
        any row is masked, and (forward, rows, columns) of the logits to mask where there are some."""
        # (row, forwards still masked, its stop ids in the vocabulary), for the rows masked at all
        pending = [
            (i, s.sampling.min_tokens - s.num_outputs, s.sampling.stop_token_ids)
            for i, s in enumerate(seqs)
            if s.num_outputs < s.sampling.min_tokens
        ]
        if not pending:
            return [False] * num_steps, []
        pending = [
            (i, left, [t for t in (self.eos_token_id, *stops) if 0 <= t < self.vocab_size])
            for i, left, stops in pending
        ]
        masked, cells = [], []
        for step in range(num_steps):
            now = [(i, stop_ids) for i, left, stop_ids in pending if step < left]
            masked.append(bool(now))
            rows = [i for i, stop_ids in now for _ in stop_ids]
            if rows:
                cells.append((step, rows, [t for _, stop_ids in now for t in stop_ids]))
        return masked, cells

    def __call__(
        self, logits: torch.Tensor, step: int = 0, greedy: torch.Tensor | None = None
    ) -> torch.Tensor:
        """logits [n, vocab] of the sequences last prepared, in order; step = forwards already run in
        the window; greedy: the argmax of logits when the forward computed it already (a CUDA graph
        does). Returns [n] int64 token ids."""
        window = self._window
        assert logits.shape[0] == window.num_rows, "sampling rows that were not prepared"
        if window.masked[step]:
            greedy = None  # masked logits may have another argmax
        if window.random_rows or window.masked[step]:
            logits = logits.float()
            if step in window.stop_cells:
                logits.index_put_(window.stop_cells[step], self._neg_inf)
        if not window.random_rows:
            return self.argmax(logits) if greedy is None else greedy
        if window.random_index is None:  # every row samples
            return self._sample_random(logits, step)
        greedy = self.argmax(logits) if greedy is None else greedy
        sampled = self._sample_random(logits.index_select(0, window.random_index), step)
        return greedy.index_copy_(0, window.random_index, sampled)

    def _sample_random(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        window = self._window
        logits = logits / window.temperature[:, None]
        if window.top_k is not None:
            logits = _top_k_top_p(logits, window.top_k, window.top_p)
        probs = logits.softmax(dim=-1)
        # argmax(p / E) with E ~ Exp(1) draws index i with probability p_i (exponential race), and
        # lets each row use its own generator without a per-row multinomial call
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for row, seed, num_outputs in window.seeded:
            noise[row].exponential_(generator=_draw_generator(seed, num_outputs + step, probs.device))
        return (probs / noise).argmax(dim=-1)


def _top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask to -inf every token outside the row's top_k (0 = all) and outside the smallest set whose
    probability reaches top_p (the most likely token always stays)."""
    vocab = logits.shape[-1]
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device)
    k = torch.where(top_k > 0, top_k, vocab)
    sorted_logits = sorted_logits.masked_fill(ranks[None, :] >= k[:, None], float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    outside_p = (mass_before >= top_p[:, None]) & (top_p[:, None] < 1)
    sorted_logits = sorted_logits.masked_fill(outside_p, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
