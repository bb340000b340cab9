"""The runner's per-poll bookkeeping: one output's tokens stamped on arrival, finished rows handed back."""

import time

import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams

from llmbench.results.records import RequestRecord
from llmbench.run.recorder import DeferredOutputs, record_outputs


def output(request_id, tokens, finished=False, t_emit=0.0):
    reason = FinishReason.LENGTH if finished else None
    return RequestOutput(request_id, tokens, finished, reason, None, t_emit, None, 4, 0, [])


def test_tokens_get_the_poll_time_and_finished_requests_leave_live():
    live = {
        key: RequestRecord(id=key, trial=0, warmup=False, prompt_len=4, output_token_ids=[])
        for key in ("a", "b")
    }
    assert record_outputs(live, [output("a", [7]), output("b", [8, 9])], 10.5, 10.0, False, True) == []
    done = record_outputs(
        live, [output("a", [6]), output("b", [5], finished=True), output("x", [1])], 11.0, 10.0, False, True
    )
    a = live["a"]
    assert (a.first_token_time, a.token_times, a.output_len, a.output_token_ids) == (
        0.5,
        [0.5, 1.0],
        2,
        [7, 6],
    )
    assert [r.id for r in done] == ["b"] and "b" not in live
    b = done[0]
    assert (b.token_times, b.output_len, b.output_token_ids) == ([0.5, 0.5, 1.0], 3, [8, 9, 5])
    assert (b.finish_reason, b.finish_time) == ("length", 1.0)


def test_deferred_outputs_are_recorded_as_at_once_and_a_finishing_request_s_at_once():
    """Outputs of requests that go on wait for record() (the next poll's wait), keeping their poll's
    arrival; every output of a request that finishes in a poll is recorded right away, in order, after
    the kept ones; the rows end as recording each poll at once leaves them."""
    polls = [
        ([output("a", [7]), output("b", [8])], 10.5),
        ([output("a", [6]), output("b", [5]), output("b", [4], finished=True)], 11.0),
        ([output("a", [3], finished=True)], 11.5),
    ]

    def rows(deferring: bool) -> dict:
        live = {
            k: RequestRecord(id=k, trial=0, warmup=False, prompt_len=4, output_token_ids=[]) for k in "ab"
        }
        deferred = DeferredOutputs(live, 10.0, stamped=False, save_tokens=True)
        done = {}
        for outputs, arrival in polls:
            if deferring:
                finished = deferred.add(outputs, arrival)
            else:
                finished = record_outputs(live, outputs, arrival, 10.0, False, True)
            done.update(
                (r.id, (r.token_times, r.output_len, r.output_token_ids, r.finish_time)) for r in finished
            )
            if deferring:
                deferred.record()  # as the next poll's backend does while it waits
        return done

    assert (
        rows(deferring=True)
        == rows(deferring=False)
        == {
            "b": ([0.5, 1.0, 1.0], 3, [8, 5, 4], 1.0),
            "a": ([0.5, 1.0, 1.5], 3, [7, 6, 3], 1.5),
        }
    )


def test_kept_outputs_wait_for_the_next_poll():
    live = {"a": RequestRecord(id="a", trial=0, warmup=False, prompt_len=4)}
    deferred = DeferredOutputs(live, 10.0, stamped=False, save_tokens=False)
    assert deferred.add([output("a", [7])], 10.5) == []
    assert live["a"].output_len == 0  # not yet: the client's bookkeeping waits
    deferred.record()
    assert (live["a"].first_token_time, live["a"].token_times) == (0.5, [0.5])
    deferred.add([output("a", [8])], 11.0)
    deferred.add([output("a", [9])], 11.5)  # a backend that ran nothing while waiting: recorded first
    assert live["a"].token_times == [0.5, 1.0]


def test_a_backend_that_stamps_outputs_is_timed_by_their_emit_times():
    live = {"a": RequestRecord(id="a", trial=0, warmup=False, prompt_len=4)}
    record_outputs(live, [output("a", [7], t_emit=12.25)], 20.0, 12.0, True, False)
    record_outputs(live, [output("a", [8], t_emit=12.5)], 20.0, 12.0, True, False)
    assert live["a"].token_times == [0.25, 0.5] and live["a"].output_token_ids is None


def test_rows_that_finish_together_are_on_disk_whole_and_read_back(tmp_path):
    from llmbench.results.records import load_requests
    from llmbench.run.result_files import ResultWriter

    writer = ResultWriter(tmp_path / "run", {"name": "rows"}, run_start=0.0, save_tokens=True)
    rows = [
        RequestRecord(
            id=str(i),
            trial=0,
            warmup=False,
            prompt_len=2,
            output_len=2,
            token_times=[0.1 * i, 0.30000000000000004],
        )
        for i in range(3)
    ]
    rows[1].prompt = "naïve ☕ prompt"  # a dataset prompt's text: UTF-8, whatever the locale
    writer.add_requests(rows[:2])
    # flushed by the call: a reader (or a SIGKILL now) sees both rows whole
    assert (tmp_path / "run" / "requests.jsonl").read_bytes().count(b"\n") == 2
    writer.add_requests(rows[2:])
    writer.close()
    assert load_requests(tmp_path / "run") == rows  # floats round-trip exactly


@pytest.mark.parametrize("stamped", [False, True])
@pytest.mark.parametrize("save_tokens", [False, True])
def test_an_engine_step_s_plain_decodes_are_recorded_as_its_outputs(stamped, save_tokens):
    """A step's StepOutputs, its plain decodes as two lists, leave the rows that recording every one
    of its outputs as a RequestOutput leaves."""
    engine = LLMEngine(EngineConfig(model=ModelConfig(preset="tiny", executor="null"), num_gpu_blocks=64))
    lengths = {"a": 5, "b": 9, "c": 1}
    for request_id, max_tokens in lengths.items():
        engine.add_request(request_id, [1, 2, 3], SamplingParams(max_tokens=max_tokens, ignore_eos=True))

    def new_live() -> dict:
        return {
            k: RequestRecord(
                id=k, trial=0, warmup=False, prompt_len=3, output_token_ids=[] if save_tokens else None
            )
            for k in lengths
        }

    live_deferred, live_at_once = new_live(), new_live()
    deferred = DeferredOutputs(live_deferred, 10.0, stamped, save_tokens)
    done_deferred, done_at_once = [], []
    num_plain = 0
    while engine.has_unfinished():
        step = engine.step()
        num_plain += len(step.decode_request_ids)
        arrival = time.perf_counter()
        done_deferred += deferred.add(step, arrival)
        done_at_once += record_outputs(live_at_once, list(step), arrival, 10.0, stamped, save_tokens)
        deferred.record()
    assert num_plain == sum(lengths.values()) - 2 * len(lengths) + 1  # all but first and last (c: one)
    assert not live_deferred and not live_at_once
    assert sorted(done_deferred, key=str) == sorted(done_at_once, key=str)
    assert {r.id: r.output_len for r in done_deferred} == lengths
