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
        prepared.append((batch, inputs.positions.tolist(), inputs.attn.seq_lens.tolist()))
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
    for (batch, positions, seq_lens), (sampled_ids, window) in zip(prepared, sampling, strict=True):
        seqs = batch.seqs
        assert positions[: seqs[0].num_new] == list(range(seqs[0].num_computed, seqs[0].seq_len))
        assert seq_lens[: len(seqs)] == [s.seq_len for s in seqs]
        assert sampled_ids == [s.seq_id for s in seqs if s.sample] and window == batch.num_steps
