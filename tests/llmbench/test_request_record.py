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


def test_rows_that_finish_together_are_on_disk_whole_and_read_back(tmp_path):
    from llmbench.results import ResultWriter, load_requests

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
