import math

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.execution.sampler import Sampler
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.batch import ScheduledSeq

EOS = 2
CPU = torch.device("cpu")


def seq(num_outputs: int = 0, **params) -> ScheduledSeq:
    return ScheduledSeq(0, [1], 0, 1, [0], SamplingParams(**params), sample=True, num_outputs=num_outputs)


def random_logits(rows: int, vocab: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def sample(sampler: Sampler, logits: torch.Tensor, seqs: list[ScheduledSeq], step: int = 0) -> torch.Tensor:
    """One forward's tokens: `step` forwards into a window prepared for these sequences."""
    sampler.prepare(seqs, num_steps=step + 1)
    return sampler(logits, step)


def make(seed: int = 0, vocab: int = 64, device: torch.device = CPU, **kwargs) -> Sampler:
    return Sampler(EOS, vocab, device, seed, **kwargs)


def test_greedy_is_argmax():
    logits = random_logits(8)
    tokens = sample(make(), logits, [seq() for _ in range(8)])
    assert tokens.dtype == torch.int64
    assert torch.equal(tokens, logits.argmax(dim=-1))


def test_top_k_1_equals_greedy():
    logits = random_logits(16, seed=1)
    tokens = sample(make(), logits, [seq(temperature=1.5, top_k=1) for _ in range(16)])
    assert torch.equal(tokens, logits.argmax(dim=-1))


def test_greedy_rows_stay_greedy_in_a_mixed_batch():
    logits = random_logits(6, seed=2)
    seqs = [seq(), seq(temperature=1.0), seq(), seq(temperature=2.0, top_p=0.9), seq(), seq(temperature=1.0)]
    tokens = sample(make(), logits, seqs)
    greedy = logits.argmax(dim=-1)
    assert [tokens[i].item() for i in (0, 2, 4)] == [greedy[i].item() for i in (0, 2, 4)]


def test_seeded_sampling_is_reproducible_and_preemption_safe():
    """A seeded request's n-th token depends only on (seed, n) and its logits, not on the batch or on
    how many draws the engine made before: recomputing after preemption samples the same tokens."""
    logits = torch.zeros(1, 64)  # uniform: every draw is pure generator output
    draws = [sample(make(0), logits, [seq(n, temperature=1.0, seed=42)]).item() for n in range(20)]
    other_engine = make(99)
    sample(other_engine, torch.zeros(5, 64), [seq(temperature=1.0) for _ in range(5)])  # advance its stream
    batch_logits = torch.zeros(3, 64)
    again = [
        sample(other_engine, batch_logits, [seq(temperature=1.0), seq(n, temperature=1.0, seed=42), seq()])[
            1
        ].item()
        for n in range(20)
    ]
    assert draws == again
    assert len(set(draws)) > 10  # successive tokens are different draws, not one repeated value
    other_seed = [sample(make(), logits, [seq(n, temperature=1.0, seed=43)]).item() for n in range(20)]
    assert other_seed != draws


def test_unseeded_sampling_follows_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(4000, 4)
    tokens = sample(make(3, vocab=4), logits, [seq(temperature=1.0) for _ in range(4000)])
    freq = torch.bincount(tokens, minlength=4).float() / 4000
    assert torch.allclose(freq, probs, atol=0.03)


def test_temperature_sharpens():
    logits = torch.tensor([[1.0, 0.0]]).expand(4000, 2)
    cold = sample(make(1, vocab=2), logits, [seq(temperature=0.25) for _ in range(4000)])
    share_first = (cold == 0).float().mean().item()
    assert math.isclose(share_first, 1 / (1 + math.exp(-4)), abs_tol=0.02)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(2000, 4)
    tokens = sample(make(4, vocab=4), logits, [seq(temperature=1.0, top_p=0.7) for _ in range(2000)])
    assert set(tokens.tolist()) == {0, 1}
    assert abs((tokens == 0).float().mean().item() - 0.5 / 0.8) < 0.04


def test_top_k_limits_the_candidates():
    logits = random_logits(1, seed=5).expand(500, 64)
    tokens = sample(make(5), logits, [seq(temperature=5.0, top_k=3) for _ in range(500)])
    assert set(tokens.tolist()) == set(logits[0].topk(3).indices.tolist())


def test_min_tokens_masks_eos_and_stop_tokens():
    logits = torch.full((1, 16), -5.0)
    logits[0, EOS], logits[0, 7], logits[0, 9] = 10.0, 9.0, 8.0
    sampler = make(vocab=16)
    params = dict(min_tokens=3, stop_token_ids=(7, 99))  # 99 is outside the vocabulary: ignored
    assert sample(sampler, logits.clone(), [seq(0, **params)]).item() == 9
    assert sample(sampler, logits.clone(), [seq(2, **params)]).item() == 9
    assert sample(sampler, logits.clone(), [seq(3, **params)]).item() == EOS
    # multi-step: the step offset counts toward the outputs already generated
    assert sample(sampler, logits.clone(), [seq(1, **params)], step=2).item() == EOS
    assert sample(sampler, logits.clone(), [seq(0, min_tokens=3, ignore_eos=True)]).item() == 7


def test_a_forward_s_own_argmax_serves_greedy_rows_unless_they_are_masked():
    """A CUDA graph hands its argmax over: an all-greedy window returns it as is, a mixed one fills
    its random rows in, and a masked row (min_tokens) has it recomputed from the masked logits.
    Switching the batch between these keeps no stale window."""
    logits = torch.full((2, 16), -5.0)
    logits[:, EOS], logits[:, 9] = 10.0, 8.0
    own = torch.tensor([11, 12])  # not the argmax: shows which rows took it
    sampler = make(vocab=16)
    plain = [seq(1), seq(1)]
    sampler.prepare(plain)
    assert sampler(logits.clone(), 0, own.clone()).tolist() == [11, 12]
    assert sampler(logits.clone(), 0).tolist() == [EOS, EOS]
    sampler.prepare([seq(1), seq(1, temperature=1.0, top_k=1)])  # as many rows, one random now
    assert sampler(logits.clone(), 0, own.clone()).tolist() == [11, EOS]
    sampler.prepare([seq(1), seq(1, min_tokens=3)])
    assert sampler(logits.clone(), 0, own.clone()).tolist() == [EOS, 9]
    sampler.prepare(plain, num_steps=2)  # plain again, a window of two
    assert [sampler(logits.clone(), k, own.clone()).tolist() for k in range(2)] == [[11, 12]] * 2


def test_no_sampled_rows():
    assert sample(make(vocab=16), torch.zeros(0, 16), []).shape == (0,)


def test_triton_backend_sampler_matches_reference():
    from llmbench.kernels import triton_ops

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # where the kernels run
    logits = random_logits(5, vocab=300, seed=3).to(device)
    seqs = [seq(), seq(temperature=1.0, seed=4), seq(0, min_tokens=2), seq(), seq(temperature=0.7, seed=9)]
    logits[2, EOS] = 100.0  # masked for the min_tokens row: the kernel must see the masked copy
    want = sample(make(vocab=300, device=device), logits.clone(), seqs)
    got = sample(make(vocab=300, device=device, ops=triton_ops), logits.clone(), seqs)
    assert torch.equal(got, want) and got[2] != EOS
    greedy_only = [seq() for _ in range(5)]
    triton_greedy = sample(make(vocab=300, device=device, ops=triton_ops), logits, greedy_only)
    assert torch.equal(triton_greedy, logits.argmax(dim=-1))


# Token-exact pins: these tokens were drawn by the sampler before it kept its parameters in device
# buffers (torch.tensor per call, list indexing); the same inputs must keep drawing them.

WINDOWS = {
    "mixed": (
        11,
        [
            seq(),
            seq(temperature=1.0),
            seq(temperature=0.7, top_k=5),
            seq(temperature=1.3, top_p=0.9),
            seq(3, temperature=0.8, top_p=0.95, seed=7),
            seq(1, min_tokens=4, stop_token_ids=(5, 999)),
            seq(0, temperature=0.9, min_tokens=2, stop_token_ids=(6,)),
        ],
        [
            [31, 33, 38, 11, 34, 17, 31],
            [3, 22, 16, 18, 32, 61, 1],
            [30, 38, 54, 8, 39, 46, 13],
            [62, 39, 16, 22, 11, 18, 42],
        ],
    ),
    "all_seeded": (
        3,
        [seq(0, temperature=1.0, seed=1), seq(5, temperature=0.5, seed=2), seq(2, temperature=2.0, seed=3)]
        + [seq(9, temperature=0.8, seed=4)],
        [[44, 25, 46, 29], [3, 22, 13, 18], [54, 55, 6, 25]],
    ),
    "all_random": (
        5,
        [seq(temperature=0.8, top_p=0.95), seq(temperature=1.0, top_k=3), seq(temperature=1.2)]
        + [seq(temperature=0.6, top_k=10, top_p=0.8)],
        [[31, 61, 46, 29], [28, 14, 34, 27], [54, 55, 54, 8]],
    ),
}


def run_window(name: str) -> list[list[int]]:
    """A multi-step window: prepared once, then one forward's logits per step."""
    sampler_seed, seqs, pinned = WINDOWS[name]
    sampler = make(sampler_seed)
    sampler.prepare(seqs, num_steps=len(pinned))
    return [sampler(random_logits(len(seqs), seed=100 + step), step).tolist() for step in range(len(pinned))]


@pytest.mark.parametrize("name", sorted(WINDOWS))
def test_windows_draw_the_pinned_tokens(name):
    assert run_window(name) == WINDOWS[name][2]


class NoHostBuiltIndex:
    """Fails any tensor built from a Python list or indexed by one: on CUDA both are a blocking
    host-to-device copy (what the sampler must not do once a window is prepared)."""

    def __init__(self, monkeypatch):
        def refuse(*args, **kwargs):
            raise AssertionError("a tensor built from host values while sampling")

        def guard(original):
            def indexed(self, index, *rest):
                parts = index if isinstance(index, tuple) else (index,)
                assert not any(isinstance(p, list) for p in parts), "a tensor indexed by a Python list"
                return original(self, index, *rest)

            return indexed

        monkeypatch.setattr(torch, "tensor", refuse)
        monkeypatch.setattr(torch, "as_tensor", refuse)
        monkeypatch.setattr(torch.Tensor, "__getitem__", guard(torch.Tensor.__getitem__))
        monkeypatch.setattr(torch.Tensor, "__setitem__", guard(torch.Tensor.__setitem__))


def test_sampling_a_prepared_window_builds_nothing_from_host_lists(monkeypatch):
    sampler_seed, seqs, pinned = WINDOWS["mixed"]
    sampler = make(sampler_seed)
    sampler.prepare(seqs, num_steps=len(pinned))
    logits = [random_logits(len(seqs), seed=100 + step) for step in range(len(pinned))]
    NoHostBuiltIndex(monkeypatch)
    assert [sampler(logits[step], step).tolist() for step in range(len(pinned))] == pinned


@pytest.mark.gpu
def test_cuda_sampling_never_synchronizes():
    device = torch.device("cuda")
    sampler_seed, seqs, pinned = WINDOWS["mixed"]
    sampler = make(sampler_seed, device=device)
    logits = random_logits(len(seqs), seed=100).to(device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):  # later windows reuse the host buffers
            sampler.prepare(seqs, num_steps=len(pinned))
            tokens = [sampler(logits.clone(), step) for step in range(len(pinned))]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(t.shape == (len(seqs),) for t in tokens)


ENGINE_PROMPTS = [[(7 * i + j) % 500 + 3 for j in range(4 + 5 * i)] for i in range(5)]
ENGINE_PARAMS = [
    SamplingParams(max_tokens=12, temperature=0.8, top_p=0.95, seed=1),
    SamplingParams(max_tokens=12, temperature=1.0, top_k=20, seed=2),
    SamplingParams(max_tokens=12, min_tokens=12, stop_token_ids=(7,)),
    SamplingParams(max_tokens=12, temperature=0.7, seed=3, min_tokens=3),
    SamplingParams(max_tokens=12),
]
ENGINE_TOKENS = [
    [378, 246, 147, 418, 13, 212, 474, 156, 311, 499, 190, 259],
    [343, 356, 13, 386, 307, 510, 314, 364, 9, 85, 54, 483],
    [267, 23, 469, 49, 472, 280, 181, 71, 247, 12, 128, 120],
    [233, 460, 388, 13, 280, 331, 391, 21, 370, 216, 8, 391],
    [286, 202, 27, 122, 488, 122, 488, 122, 488, 122, 488, 122],
]


@pytest.mark.parametrize("toggles", [{}, {"num_scheduler_steps": 4, "async_output": True}])
def test_tiny_model_samples_the_pinned_tokens(toggles):
    """Seeded sampling (temperature, top-p, top-k, min_tokens) and greedy on the real tiny model, one
    step or 4-step windows with async output: the same tokens as before."""
    model = ModelConfig(preset="tiny", device="cpu", dtype="float32")
    engine = LLMEngine(EngineConfig(model=model, max_num_seqs=8, **toggles))
    assert engine.generate(ENGINE_PROMPTS, ENGINE_PARAMS) == ENGINE_TOKENS
