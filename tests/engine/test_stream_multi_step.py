"""Streamed multi-step windows and async scheduling on the real tiny model (CPU, float32): greedy tokens
equal transformers' under forced preemption and aborts, each forward's tokens leave the engine before
the next forward runs, and a run's token_times inside a window are distinct arrivals."""

import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.core_client import EngineCoreClient
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import FinishReason, SamplingParams
from llmbench.engine.scheduling.check import assert_engine_empty

from llmbench.config.load import parse_config
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark
from tests.engine.helpers import model_engine, run_to_completion
from tests.engine.hf_reference import GREEDY, engine_for, make_prompts
from tests.llmbench.null_run import NULL_RUN

MODES = {
    "async-scheduling": {"async_scheduling": True},
    "streamed": {"num_scheduler_steps": 4},
    "streamed+async-scheduling": {"num_scheduler_steps": 4, "async_scheduling": True},
    "streamed+async-output": {"num_scheduler_steps": 4, "async_output": True},
}
ABORTED = ("1", "6")  # aborted after ABORT_AT step() calls, mid-stream


def run_with_aborts(engine, prompts, abort_at: int) -> tuple[dict, dict]:
    """All prompts at once, stepped to the end, ABORTED aborted after abort_at steps: every request's
    final output, and each one's streamed tokens."""
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, GREEDY)
    finals, streamed = {}, {str(i): [] for i in range(len(prompts))}
    calls = 0
    while engine.has_unfinished():
        if calls == abort_at:
            for request_id in ABORTED:
                engine.abort(request_id)
        for output in engine.step():
            assert output.error is None, output.error
            streamed[output.request_id] += output.new_token_ids
            if output.finished:
                finals[output.request_id] = output
        calls += 1
    assert_engine_empty(engine)
    return finals, streamed


@pytest.mark.parametrize("mode", MODES)
def test_greedy_tokens_match_hf_under_preemption_and_aborts(checkpoint, mode):
    path, expected = checkpoint
    # room for about two of the longest sequences at a time: running ones are preempted and recomputed
    engine = engine_for(path, block_size=4, num_gpu_blocks=30, max_num_batched_tokens=32, **MODES[mode])
    finals, streamed = run_with_aborts(engine, make_prompts(), abort_at=12)
    assert engine.scheduler.num_preemptions > 0
    for request_id, output in finals.items():
        want = expected[int(request_id)]
        assert output.token_ids == streamed[request_id]
        if request_id in ABORTED:
            assert output.finish_reason is FinishReason.ABORT
            assert output.token_ids == want[: len(output.token_ids)] and len(output.token_ids) < len(want)
        else:
            assert output.token_ids == want, request_id
    assert len(finals) == len(make_prompts())


@pytest.mark.parametrize("lag", [{}, {"async_output": True}, {"async_scheduling": True}], ids=str)
def test_each_forward_is_handed_over_before_the_next_runs(lag):
    """Counting forwards as the CPU runs them: a streamed window returns one token a sequence per
    step() call, each stamped when it was processed. Synchronous, each call runs exactly one forward,
    so its tokens are out before the next forward starts; overlapped, the call that launches the next
    window also runs the last forward of the one before (the next window's input), so two. Bursty
    windows run all four forwards in one call and return them as one chunk."""
    calls = _calls(model_engine(num_scheduler_steps=4, **lag))
    assert {forwards for forwards, _ in calls} == ({1} if not lag else {0, 1, 2})
    assert all(len(o.new_token_ids) == 1 for _, outputs in calls for o in outputs)
    times = [o.t_emit for _, outputs in calls for o in outputs if o.request_id == "a"]
    assert len(times) == 25 and len(set(times)) == 25
    bursty = _calls(model_engine(num_scheduler_steps=4, stream_multi_step=False, **lag))
    assert max(forwards for forwards, _ in bursty) == 4
    assert max(len(o.new_token_ids) for _, outputs in bursty for o in outputs) == 4


def _calls(engine) -> list[tuple[int, list]]:
    """Two requests stepped to the end: per step() call, the forwards it ran and its outputs."""
    count = [0]
    logits = engine.executor.logits
    engine.executor.logits = lambda *args: count.__setitem__(0, count[0] + 1) or logits(*args)
    for request_id, prompt in (("a", [5, 6, 7]), ("b", [8, 9])):
        engine.add_request(request_id, prompt, SamplingParams(max_tokens=25, ignore_eos=True))
    calls = []
    while engine.has_unfinished():
        before = count[0]
        outputs = engine.step()
        calls.append((count[0] - before, outputs))
    return calls


def test_a_runs_token_times_inside_a_window_are_distinct_arrivals(tmp_path):
    """Through llmbench's in-process runner on the real tiny model: with 8-step windows streamed, a
    request gets one arrival per token; bursty, its tokens arrive eight at a time."""
    overrides = {"model": {"preset": "tiny", "device": "cpu", "dtype": "float32"}}
    for stream, run_dir in ((True, tmp_path / "streamed"), (False, tmp_path / "bursty")):
        config = parse_config(
            {
                **NULL_RUN,
                **overrides,
                "engine": {**NULL_RUN["engine"], "num_scheduler_steps": 8, "stream_multi_step": stream},
                "workload": {**NULL_RUN["workload"], "output": {"dist": "uniform", "min": 20, "max": 24}},
            }
        )
        run_benchmark(config, run_dir)
        records = load_requests(run_dir)
        assert records and all(len(r.token_times) >= 20 for r in records)
        distinct = [len(set(r.token_times)) for r in records]
        if stream:
            assert distinct == [len(r.token_times) for r in records]
        else:
            assert all(d <= 2 + len(r.token_times) // 8 + 1 for d, r in zip(distinct, records, strict=True))


def test_split_core_streams_windows_with_async_scheduling_token_exact():
    """The process split: the core hands a streamed window over forward by forward with async scheduling
    and a pool that preempts; tokens equal the synchronous in-process engine's, and every record still
    carries its IPC time."""
    model = ModelConfig(preset="tiny", device="cpu", dtype="float32")
    prompts = [[(7 * i + j) % 500 + 3 for j in range(5 + 9 * i)] for i in range(6)]
    tight = {"num_gpu_blocks": 24, "block_size": 4, "num_scheduler_steps": 4, "async_scheduling": True}
    core = EngineCoreClient(EngineConfig(model=model, max_num_seqs=8, process_split=True, **tight))
    try:
        split, _ = run_to_completion(core, prompts, GREEDY)
        records = core.drain_step_records()
    finally:
        core.shutdown()
    local, _ = run_to_completion(LLMEngine(EngineConfig(model=model, max_num_seqs=8)), prompts, GREEDY)
    assert split == local and all(len(tokens) == GREEDY.max_tokens for tokens in split.values())
    assert sum(r.num_preempted for r in records) > 0 and any(r.num_steps == 4 for r in records)
    assert all(r.ipc_ms > 0 for r in records)
