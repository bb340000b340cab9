"""prefill_attention flash: the plan that gives fresh prompts one FlashAttention-4 launch and every other
chunk another (on the CPU), the refusal where the kernels cannot run, and, where the package runs
(Hopper or later with flash-attn-4 installed), the split against the torch reference's paged attention."""

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.execution.model_runner import ModelRunner
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.kernels import flash_attention, triton_ops

from tests.kernels.paged_kv import DECODE_STEP, plan_on_cpu, split_and_reference


def test_plan_gives_every_fresh_prompt_one_launch_and_the_other_chunks_another():
    # fresh prompts of two lengths apart in the batch, a decode, a chunk after 16 cached tokens
    split = plan_on_cpu([40, 64, 1, 40, 8], [0, 0, 30, 0, 16], prefill_attention="flash")
    assert split.flash and split.needs_own_kv and split.groups == [] and split.decodes is None
    assert split.fresh.rows.tolist() == [*range(104), *range(105, 145)]
    assert split.fresh.query_start.tolist() == [0, 40, 104, 144] and split.fresh.max_len == 64
    assert split.paged.rows.tolist() == [104, *range(145, 153)]
    assert split.paged.seq_lens.tolist() == [2, 4] and split.paged.query_start.tolist() == [0, 1, 9]
    assert split.paged.max_query_len == 8


def test_plan_splits_every_step_with_a_chunk_and_sends_many_decodes_to_the_decode_kernel():
    split = plan_on_cpu([200, 300], [16, 64], prefill_attention="flash")  # nothing fresh: one paged launch
    assert split.flash and split.fresh is None and not split.needs_own_kv
    assert split.paged.rows == slice(0, 500) and split.paged.max_query_len == 300
    split = plan_on_cpu([6, 6], [0, 0], prefill_attention="flash")
    assert split.paged is None and split.fresh.rows == slice(0, 12) and split.fresh.max_len == 6
    split = plan_on_cpu(*DECODE_STEP, prefill_attention="flash")
    assert split.decodes.rows.tolist() == [*range(10), 24, 25]
    assert split.fresh.rows == slice(10, 19) and split.fresh.max_len == 9
    assert split.paged.rows == slice(19, 24) and split.paged.seq_lens.tolist() == [11]


def test_flash_is_refused_with_the_reason_before_weights_load():
    tiny = ModelConfig(preset="tiny", device="cpu")
    message = "engine.prefill_attention 'flash' needs a CUDA device, the model runs on cpu"
    with pytest.raises(ValueError, match=message):
        config = EngineConfig(model=tiny, prefill_attention="flash")
        ModelRunner(config, resolve_model_facts(config))


@pytest.mark.gpu(capability=9)
def test_flash_names_what_the_model_lacks_on_gpu():
    cuda = torch.device("cuda")
    reason = flash_attention.unavailable_reason(cuda, torch.float32, 128)
    assert reason == "needs bfloat16 or float16, the model runs in float32"
    reason = flash_attention.unavailable_reason(cuda, torch.bfloat16, 100)
    assert reason == "needs a head dimension that is a multiple of 8 up to 256, the model's is 100"


# Llama-3-8B heads in bf16. Fresh prompts apart in the batch (gathered), a chunk after a cached prefix and
# eight decodes (the decode kernel); then the fresh prompt and the chunks each a run of rows (written in
# place), with a chunk longer than one 128-key tile
LLAMA_STEPS = [
    ([512, 1, 300, 512, 57, *[1] * 8], [0, 700, 0, 0, 9, *range(100, 108)]),
    ([300, 40, 200, *[1] * 8], [0, 500, 33, *range(60, 68)]),
]


@pytest.mark.flash
@pytest.mark.parametrize("block_size", [16, 128])
@pytest.mark.parametrize("q_lens,cached", LLAMA_STEPS)
def test_flash_split_matches_reference_on_gpu(q_lens, cached, block_size):
    shape = {"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "block_size": block_size}
    got, want = split_and_reference(triton_ops, q_lens, cached, "flash", dtype=torch.bfloat16, **shape)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
