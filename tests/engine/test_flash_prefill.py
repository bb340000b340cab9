"""prefill_attention flash in the whole engine, on a GPU where FlashAttention-4 runs: chunked prompts,
prefix-cache hits and decodes riding along in bf16 give the greedy tokens of the same engine on the
paged Triton kernel, with both FlashAttention-4 launches (fresh prompts, later chunks) taken and no
kernel compiled after the engine started."""

import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.kernels import flash_attention

from tests.engine.hf_reference import GREEDY, make_prompts, run


def gpu_engine(path, **engine_kwargs) -> LLMEngine:
    model = ModelConfig(path=str(path), dtype="bfloat16", device="cuda", seed=0)
    toggles = {"block_size": 16, "max_num_batched_tokens": 32, "prefix_caching": True, **engine_kwargs}
    config = EngineConfig(model=model, max_model_len=256, **toggles)
    return LLMEngine(config)


def count_launches(monkeypatch) -> dict[str, int]:
    counts = {"fresh_prompt_attention": 0, "paged_prefill_attention": 0}
    for name in counts:
        real = getattr(flash_attention, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            counts[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(flash_attention, name, counted)
    return counts


@pytest.mark.flash
def test_flash_prefill_gives_the_paged_kernels_tokens(checkpoint, monkeypatch):
    import cutlass.cute as cute  # the DSL the package compiles its kernels with

    path, _ = checkpoint
    paged, _, _ = run(gpu_engine(path), make_prompts(), GREEDY)
    engine = gpu_engine(path, prefill_attention="flash")  # compiles every variant a run can reach
    compiles, compile_kernel = [], cute.compile
    monkeypatch.setattr(
        cute, "compile", lambda *args, **kwargs: compiles.append(1) or compile_kernel(*args, **kwargs)
    )
    launches = count_launches(monkeypatch)
    flash, cached, _ = run(engine, make_prompts(), GREEDY)
    assert sum(cached) > 0 and all(launches.values()), launches
    assert flash == paged
    assert not compiles, f"{len(compiles)} kernels compiled in the middle of the run"
