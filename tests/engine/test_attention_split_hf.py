"""The attention split token-exact against transformers' greedy generate (the checkpoint and the
expected tokens of test_engine_hf): fresh prompts through SDPA (prefill_attention sdpa), and the decodes
of mixed steps through the decode kernel."""

import pytest
from llmbench.engine.execution import model_runner
from llmbench.kernels import attention_split

from tests.engine.helpers import count_sdpa_calls
from tests.engine.hf_reference import GREEDY, engine_for, make_prompts, run


@pytest.mark.parametrize("prefix_caching", [True, False], ids=["prefix", "no-prefix"])
@pytest.mark.parametrize("budget", [32, 256])
def test_sdpa_prefill_matches_hf(checkpoint, monkeypatch, budget, prefix_caching):
    """prefill_attention sdpa: prompts with no cached prefix go through SDPA on their own K/V, the rest
    (decodes, later chunks, prompts hitting the prefix cache) through the paged kernel, token-exact.
    With a 32-token budget every first chunk is short, so the minimum group size is lowered to 1; at
    256 the 56- and 77-token prompts pass the real minimum (64 tokens a length)."""
    path, expected = checkpoint
    if budget == 32:
        monkeypatch.setattr(attention_split, "SDPA_MIN_TOKENS", 1)
    calls = count_sdpa_calls(monkeypatch)
    engine = engine_for(
        path,
        block_size=4,
        prefix_caching=prefix_caching,
        max_num_batched_tokens=budget,
        prefill_attention="sdpa",
    )
    tokens, cached, _ = run(engine, make_prompts(), GREEDY)
    assert tokens == expected
    assert calls and (budget == 32 or min(calls) >= attention_split.SDPA_MIN_TOKENS)
    assert (sum(cached) > 0) == prefix_caching


def test_sdpa_prefill_matches_hf_under_preemption(checkpoint, monkeypatch):
    """A preempted sequence's recompute starts at position 0 again: SDPA serves it."""
    path, expected = checkpoint
    monkeypatch.setattr(attention_split, "SDPA_MIN_TOKENS", 1)
    calls = count_sdpa_calls(monkeypatch)
    engine = engine_for(path, block_size=4, num_gpu_blocks=30, prefill_attention="sdpa")
    tokens, _, preempted = run(engine, make_prompts(), GREEDY)
    assert preempted > 0 and calls
    assert tokens == expected


@pytest.mark.parametrize("overlap", ["async_output", "async_scheduling"])
def test_sdpa_prefill_matches_hf_with_overlapped_multi_step(checkpoint, monkeypatch, overlap):
    """Overlapped steps and 4-step decode windows around SDPA prefills: the split is planned for the
    step being launched, from its own lengths, while the step before is still in flight."""
    path, expected = checkpoint
    monkeypatch.setattr(attention_split, "SDPA_MIN_TOKENS", 1)
    calls = count_sdpa_calls(monkeypatch)
    engine = engine_for(
        path, block_size=4, max_num_batched_tokens=32, num_scheduler_steps=4, prefill_attention="sdpa",
        **{overlap: True},
    )  # fmt: skip
    tokens, _, _ = run(engine, make_prompts(), GREEDY)
    assert calls
    assert tokens == expected


@pytest.mark.slow
@pytest.mark.triton_interpreter
def test_sdpa_prefill_with_triton_backend_matches_hf(checkpoint, monkeypatch):
    """SDPA beside the Triton paged kernels (interpreted): chunked prompts, decodes, a cached prefix."""
    path, expected = checkpoint
    monkeypatch.setattr(attention_split, "SDPA_MIN_TOKENS", 1)
    calls = count_sdpa_calls(monkeypatch)
    pick = [0, 2, 4, 8]
    engine = engine_for(path, "triton", block_size=4, max_num_batched_tokens=32, prefill_attention="sdpa")
    tokens, cached, _ = run(engine, [make_prompts()[i] for i in pick], GREEDY)
    assert tokens == [expected[i] for i in pick]
    assert sum(cached) > 0 and calls


def count_decode_splits(monkeypatch) -> list[int]:
    """The decode count of every forward whose decodes the model runner splits off."""
    splits, real = [], model_runner.plan_attention_split

    def counted(*args):
        split = real(*args)
        if split is not None and split.decodes is not None:
            splits.append(len(split.decodes.seq_lens))
        return split

    monkeypatch.setattr(model_runner, "plan_attention_split", counted)
    return splits


@pytest.mark.parametrize(
    "backend", ["torch", pytest.param("triton", marks=[pytest.mark.triton_interpreter, pytest.mark.slow])]
)
def test_decodes_split_from_mixed_steps_match_hf(checkpoint, monkeypatch, backend):
    """Chunked prefill with decodes riding along: the decodes go to the decode kernel, the chunks to
    the paged prefill kernel, token-exact (the minimum decode count lowered so that these small
    batches split)."""
    path, expected = checkpoint
    monkeypatch.setattr(attention_split, "DECODE_MIN_SEQS", 1)
    splits = count_decode_splits(monkeypatch)
    pick = [0, 2, 4, 8] if backend == "triton" else list(range(len(expected)))
    engine = engine_for(path, backend, block_size=4, max_num_batched_tokens=32)
    tokens, _, _ = run(engine, [make_prompts()[i] for i in pick], GREEDY)
    assert tokens == [expected[i] for i in pick]
    assert splits and max(splits) > 1
