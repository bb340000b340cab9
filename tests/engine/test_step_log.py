"""A step record's batch shape is measured while the next step is on the device, from the batch's
entries, which the scheduler refills in turn: it must still be the shape the step ran, whether the
records are drained at the end or during later steps' waits."""

import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.check import assert_engine_empty


def shapes_at_schedule(engine: LLMEngine) -> list[tuple[int, int, int, int]]:
    """Each step's (prefill tokens, decodes, context tokens, attention pairs), taken as it is scheduled."""
    shapes = []
    schedule = engine.scheduler.schedule

    def schedule_and_measure():
        out = schedule()
        if out.batch.seqs:
            decodes = out.batch.num_decode_seqs
            prefill = out.num_tokens - decodes
            shapes.append((prefill, decodes, *out.batch.context_and_pairs(out.num_tokens, prefill)))
        return out

    engine.scheduler.schedule = schedule_and_measure
    return shapes


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"async_output": True},
        {"async_scheduling": True},
        {"async_scheduling": True, "num_scheduler_steps": 4},
        {"num_scheduler_steps": 4, "stream_multi_step": True},
    ],
)
@pytest.mark.parametrize("drain_while_waiting", [False, True])
def test_records_keep_the_shape_their_step_ran(overrides, drain_while_waiting):
    # few blocks and a small budget: chunked prompts, preemptions and readmissions refill entries often
    config = EngineConfig(
        model=ModelConfig(preset="tiny", executor="null"),
        num_gpu_blocks=24,
        block_size=4,
        max_num_batched_tokens=24,
        max_num_seqs=6,
        **overrides,
    )
    engine = LLMEngine(config)
    expected = shapes_at_schedule(engine)
    for k in range(10):
        prompt = [1 + (k * 7 + i) % 50 for i in range(5 + 3 * k)]
        engine.add_request(str(k), prompt, SamplingParams(max_tokens=4 + k, ignore_eos=True))
    drained = []
    while engine.has_unfinished():
        engine.step((lambda: drained.extend(engine.drain_step_records())) if drain_while_waiting else None)
    drained += engine.drain_step_records()
    assert engine.scheduler.num_preemptions > 0
    launched = [r for r in drained if r.num_prefill_tokens + r.num_decode_seqs]
    shapes = [
        (r.num_prefill_tokens, r.num_decode_seqs, r.num_context_tokens, r.num_attention_pairs)
        for r in launched
    ]
    assert shapes == expected
    assert [r.step for r in drained] == list(range(len(drained)))
    assert_engine_empty(engine)
