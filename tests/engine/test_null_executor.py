"""The null executor builds every step's model inputs and sampling parameters with the model runner's
code, so its CPU figures include that host work: a step it runs without it would make them read low."""

import pytest

from engine.config import EngineConfig, ModelConfig
from engine.input_batch import InputBuffers
from engine.llm_engine import LLMEngine
from engine.request import SamplingParams
from engine.sampler import Sampler


@pytest.mark.parametrize("num_steps", [1, 4])
def test_every_null_step_prepares_the_model_inputs(monkeypatch, num_steps):
    prepared = []
    prepare = InputBuffers.prepare

    def recording_prepare(self, batch):
        inputs = prepare(self, batch)
        # the batch as it ran: the scheduler refills its entries for later steps
        facts = [(s.seq_id, s.num_computed, s.num_new, s.seq_len, s.sample) for s in batch.seqs]
        prepared.append((facts, batch.num_steps, inputs.positions.tolist(), inputs.attn.seq_lens.tolist()))
        return inputs

    monkeypatch.setattr(InputBuffers, "prepare", recording_prepare)
    sampling = []
    prepare_sampling = Sampler.prepare

    def recording_sampling(self, seqs, num_steps=1):
        sampling.append(([s.seq_id for s in seqs], num_steps))
        return prepare_sampling(self, seqs, num_steps)

    monkeypatch.setattr(Sampler, "prepare", recording_sampling)
    engine = LLMEngine(
        EngineConfig(
            model=ModelConfig(preset="tiny", executor="null"),
            num_gpu_blocks=64,
            max_num_batched_tokens=16,  # the 20-token prompt takes two chunks
            num_scheduler_steps=num_steps,
        )
    )
    prompts = [list(range(3, 23)), list(range(5, 10))]
    engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
    steps = engine.drain_step_records()
    assert len(prepared) == len(steps) > 3
    for (facts, ran, positions, seq_lens), (sampled_ids, window) in zip(prepared, sampling, strict=True):
        _, num_computed, num_new, seq_len, _ = facts[0]
        assert positions[:num_new] == list(range(num_computed, seq_len))
        assert seq_lens[: len(facts)] == [seq_len for _, _, _, seq_len, _ in facts]
        assert sampled_ids == [seq_id for seq_id, *_, sample in facts if sample] and window == ran
