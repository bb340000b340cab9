"""prefill_attention sdpa with 2 tensor-parallel ranks on the CPU (gloo, tiny model, float32): each rank
runs SDPA over its share of the heads. Rank 0 plans each step's split from its host-side lengths, the
worker from the step's buffer read back; the tokens equal one rank's with the paged kernel alone."""

import random

from llmbench.engine.config import EngineConfig
from llmbench.engine.core.llm_engine import LLMEngine

from tests.engine.helpers import TINY_CPU, count_sdpa_calls
from tests.engine.hf_reference import GREEDY, run

# 128-token chunks: a 200-token prompt's first chunk goes to SDPA, its second (72 tokens after 128
# cached) must stay on the paged kernel, on both ranks
SETTINGS = dict(block_size=4, max_num_batched_tokens=128, max_num_seqs=8)


def prompts() -> list[list[int]]:
    rng = random.Random(1)
    first, second = ([rng.randrange(3, 512) for _ in range(200)] for _ in range(2))
    return [first, second, [rng.randrange(3, 512) for _ in range(70)], first[:64] + second[:90]]


def test_two_ranks_with_sdpa_prefill_give_one_paged_ranks_tokens(monkeypatch):
    one = LLMEngine(EngineConfig(model=TINY_CPU, **SETTINGS))
    expected, _, _ = run(one, prompts(), GREEDY)
    one.shutdown()
    calls = count_sdpa_calls(monkeypatch)  # rank 0's calls; the worker plans the same split
    two = LLMEngine(
        EngineConfig(model=TINY_CPU, **SETTINGS, prefill_attention="sdpa", tensor_parallel_size=2)
    )
    tokens, cached, _ = run(two, prompts(), GREEDY)
    two.shutdown()
    assert calls and sum(cached) > 0
    assert tokens == expected
