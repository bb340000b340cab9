"""The runner's per-poll bookkeeping: one output's tokens stamped on arrival, finished rows handed back."""

from engine.request import FinishReason, RequestOutput
from llmbench.request_record import record_outputs
from llmbench.results import RequestRecord


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


def test_a_backend_that_stamps_outputs_is_timed_by_their_emit_times():
    live = {"a": RequestRecord(id="a", trial=0, warmup=False, prompt_len=4)}
    record_outputs(live, [output("a", [7], t_emit=12.25)], 20.0, 12.0, True, False)
    record_outputs(live, [output("a", [8], t_emit=12.5)], 20.0, 12.0, True, False)
    assert live["a"].token_times == [0.25, 0.5] and live["a"].output_token_ids is None
