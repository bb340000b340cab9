"""Pick the next token of each sampled sequence: greedy, temperature, top-k, top-p, min_tokens. A
request with a seed draws from a generator derived from (seed, tokens generated so far), so a sequence
recomputed after preemption samples exactly the tokens it sampled before."""

from __future__ import annotations

from types import ModuleType

import torch

from engine.batch import ScheduledSeq
from kernels import reference

_SEED_STRIDE = 1_000_003  # spreads (seed, step) pairs so neighbouring seeds do not share streams


def _draw_generator(seed: int, num_outputs: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed((seed * _SEED_STRIDE + num_outputs) % (1 << 63))


class Sampler:
    def __init__(self, eos_token_id: int, device: torch.device, seed: int = 0, ops: ModuleType = reference):
        self.eos_token_id = eos_token_id
        self.device = device
        self.argmax = ops.argmax
        # requests without a seed share this one: runs are repeatable for a given model seed
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, logits: torch.Tensor, seqs: list[ScheduledSeq], step: int = 0) -> torch.Tensor:
        """logits [n, vocab] of the sampled sequences, in order; step = forwards already run this
        schedule (multi-step), added to each sequence's output count. Returns [n] int64 token ids."""
        random_rows = [i for i, s in enumerate(seqs) if s.sampling.temperature > 0]
        if random_rows or any(self._stops_masked(s, step) for s in seqs):
            logits = logits.float()
            self._mask_stop_tokens(logits, seqs, step)
        greedy = self.argmax(logits)
        if not random_rows:
            return greedy
        sampled = self._sample_random(logits[random_rows], [seqs[i] for i in random_rows], step)
        greedy[random_rows] = sampled
        return greedy

    def _mask_stop_tokens(self, logits: torch.Tensor, seqs: list[ScheduledSeq], step: int) -> None:
        """Before min_tokens outputs, EOS and stop tokens cannot be drawn at all."""
        for i, s in enumerate(seqs):
            if self._stops_masked(s, step):
                stop_ids = [self.eos_token_id, *s.sampling.stop_token_ids]
                logits[i, [t for t in stop_ids if 0 <= t < logits.shape[1]]] = float("-inf")

    @staticmethod
    def _stops_masked(seq: ScheduledSeq, step: int) -> bool:
        return seq.num_outputs + step < seq.sampling.min_tokens

    def _sample_random(self, logits: torch.Tensor, seqs: list[ScheduledSeq], step: int) -> torch.Tensor:
        params = [s.sampling for s in seqs]
        temperature = torch.tensor([p.temperature for p in params], device=logits.device)
        logits = logits / temperature[:, None]
        if any(p.top_k > 0 or p.top_p < 1 for p in params):
            top_k = torch.tensor([p.top_k for p in params], device=logits.device)
            top_p = torch.tensor([p.top_p for p in params], device=logits.device)
            logits = _top_k_top_p(logits, top_k, top_p)
        probs = logits.softmax(dim=-1)
        # argmax(p / E) with E ~ Exp(1) draws index i with probability p_i (exponential race), and
        # lets each row use its own generator without a per-row multinomial call
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for i, s in enumerate(seqs):
            if s.sampling.seed is not None:
                noise[i].exponential_(
                    generator=_draw_generator(s.sampling.seed, s.num_outputs + step, probs.device)
                )
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
