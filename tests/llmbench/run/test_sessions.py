"""Multi-turn sessions: each turn's prompt is the history (earlier turns and their answers) and hits
the prefix cache, a turn goes when the previous answer finished plus the think time, sessions start on
the arrival process, and the summary holds metrics per turn."""

import json

import numpy as np
import pytest
from llmbench.engine.config import ConfigError

from llmbench.backends.base import ModelInfo
from llmbench.backends.bundled import BundledBackend
from llmbench.config.load import parse_config
from llmbench.results.records import RequestRecord
from llmbench.run.plan import build_workload
from llmbench.run.runner import run_benchmark
from llmbench.run.session_plan import plan_sessions
from llmbench.run.sessions import Session, Sessions, Turn
from llmbench.run.workload import WorkloadError, arrival_times
from tests.llmbench.null_run import NULL_RUN

INFO = ModelInfo(vocab_size=512, eos_token_id=2, max_model_len=2048, special_token_ids=(1, 2))


def session_config(engine=None, output=None, **workload):
    workload = {"num_requests": 1, "input": {"mean": 40}, "output": {"mean": 8}, **workload}
    return parse_config(
        {
            **NULL_RUN,
            "engine": {**NULL_RUN["engine"], **(engine or {})},
            "output": {"report": False, **(output or {})},
            "workload": workload,
        }
    )


class CacheSpy(BundledBackend):
    """The bundled engine, noting how many prompt tokens each finished request found in the cache."""

    def __init__(self):
        self.cached: dict[str, int] = {}

    def poll(self, while_waiting=None):
        outputs = list(super().poll(while_waiting))
        self.cached |= {o.request_id: o.num_cached_tokens for o in outputs if o.finished}
        return outputs


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_the_second_prompt_is_the_first_turn_and_its_answer_and_hits_the_prefix_cache(
    tmp_path, prefix_caching
):
    config = session_config(
        engine={"prefix_caching": prefix_caching, "block_size": 16},
        output={"save_tokens": True},
        session={"turns": 2},
    )
    backend = CacheSpy()
    backend.start(config)
    run_benchmark(config, tmp_path / "run", backend=backend)
    first, second = rows(tmp_path / "run")
    assert (first["turn"], second["turn"], first["session"], second["session"]) == (1, 2, 0, 0)
    history = first["prompt_token_ids"] + first["output_token_ids"]
    assert len(history) == 48 and second["prompt_len"] == 88  # 40 + 8 answer + 40 new
    assert second["prompt_token_ids"][:48] == history
    # turn 1 computed its 40 prompt tokens and 7 of its 8 answer tokens (the last is sampled, never fed):
    # two full 16-token blocks, which turn 2 finds in the cache
    assert backend.cached == {"0:0.1": 0, "0:0.2": 32 if prefix_caching else 0}


def test_a_turn_goes_when_the_answer_finished_plus_the_think_time_and_sessions_start_on_arrivals(tmp_path):
    config = session_config(
        num_requests=3,
        session={"turns": 3, "think_time_s": 0.02},
        arrival={"process": "constant", "rate": 40},
    )
    result = run_benchmark(config, tmp_path / "run")
    by_id = {row["id"]: row for row in rows(tmp_path / "run")}
    assert sorted(by_id) == [f"{s}.{t}" for s in range(3) for t in (1, 2, 3)]
    for s in range(3):
        for t in (2, 3):
            before, turn = by_id[f"{s}.{t - 1}"], by_id[f"{s}.{t}"]
            assert turn["submit_time"] == pytest.approx(before["finish_time"] + 0.02, abs=1e-9)
            assert turn["prompt_len"] == before["prompt_len"] + before["output_len"] + 40
    starts = [by_id[f"{s}.1"]["submit_time"] for s in range(3)]
    expected = arrival_times(config.workload.arrival, 3, None)
    assert np.array(starts) - starts[0] == pytest.approx(expected, abs=1e-9)
    turns = result.summary.to_dict()["turns"]
    assert sorted(turns) == ["1", "2", "3"] and all(turns[t]["completed"] == 3 for t in turns)
    assert [turns[t]["mean_prompt_len"] for t in "123"] == [40, 88, 136]
    assert turns["2"]["mean_ttft_ms"] is not None
    assert result.summary.to_dict()["metrics"]["completed"] == 9


def records(*specs):
    return [
        RequestRecord(
            request_id, 0, False, 0, output_len=len(ids), finish_reason=reason, output_token_ids=ids
        )
        for request_id, reason, ids in specs
    ]


def plan(turns=3, think=0.0):
    session = Session(0.5, [Turn([10 + k] * 2, 3, [100 + k] * 3, think) for k in range(turns)])
    return Sessions([session], "", vocab_size=512)


def test_the_history_falls_back_to_the_planned_answer_when_the_backend_returns_no_token_ids():
    queue = plan().queue()
    assert len(queue) == 1 and queue[0].arrival_time == 0.5 and queue[0].prompt_token_ids == [10, 10]
    first = queue.popleft()
    assert (first.request_id, first.session, first.turn) == ("0.1", 0, 1)
    queue.finished(records(("0.1", "length", [-1, -1, -1])), now=2.0, release=True)
    second = queue.popleft()
    assert second.prompt_token_ids == [10, 10, 100, 100, 100, 11, 11] and second.arrival_time == 2.0


def test_a_failed_turn_ends_its_session_and_released_answers_are_dropped():
    queue = plan().queue()
    queue.popleft()
    done = records(("0.1", "length", [7, 8, 9]))
    queue.finished(done, now=1.0, release=True)
    assert done[0].output_token_ids is None
    second = queue.popleft()
    assert second.prompt_token_ids == [10, 10, 7, 8, 9, 11, 11]
    queue.finished(records(("0.2", "error", [])), now=3.0, release=False)
    assert len(queue) == 0


def test_planned_sessions_stop_before_the_history_outgrows_the_model():
    config = session_config(
        num_requests=2, session={"turns": 5, "think_time_s": 1.5, "think_time_dist": "exponential"}
    )
    small = ModelInfo(vocab_size=512, eos_token_id=2, max_model_len=200, special_token_ids=(1, 2))
    sessions = plan_sessions(config, small, np.array([0.0, 1.0]), 0, "", []).sessions
    # 40 + 8 per turn: four turns need 40 + 48 x 3 + 8 = 192 tokens, a fifth 240
    assert [len(s.turns) for s in sessions] == [4, 4]
    thinks = [t.think_s for s in sessions for t in s.turns]
    assert thinks[0] == 0 and all(t > 0 for t in thinks[1:4]) and len(set(thinks)) > 2
    again = plan_sessions(config, small, np.array([0.0, 1.0]), 0, "", []).sessions
    assert [t.think_s for s in again for t in s.turns] == thinks
    tiny = ModelInfo(vocab_size=512, eos_token_id=2, max_model_len=30, special_token_ids=(1, 2))
    with pytest.raises(WorkloadError, match="session 0's first turn needs 48 tokens"):
        plan_sessions(config, tiny, np.array([0.0, 1.0]), 0, "", [])


def test_sharegpt_turns_are_the_conversation_s_human_turns_and_answers(tmp_path, sharegpt):
    root, tokenizer = sharegpt
    talk = [
        {"from": "human", "value": "what is the capital of france"},
        {"from": "gpt", "value": "the capital of france is paris"},
        {"from": "human", "value": "tell me a story about a cat"},
        {"from": "gpt", "value": "once upon a time a cat sat on a mat and slept"},
        {"from": "human", "value": "how many legs does a spider have"},
    ]
    (root / "talks.json").write_text(json.dumps([{"conversations": talk}, {"conversations": talk[:2]}]))
    dataset = {
        "type": "sharegpt",
        "path": str(root / "talks.json"),
        "tokenizer": str(root / "tokenizer.json"),
    }
    config = parse_config({"workload": {"num_requests": 2, "dataset": dataset, "session": {"turns": 4}}})
    plans = sorted(build_workload(config, INFO).requests.sessions, key=lambda s: -len(s.turns))
    assert [len(s.turns) for s in plans] == [2, 1]  # the unanswered last human turn is no turn
    (first, second) = plans[0].turns
    assert first.user_tokens == tokenizer.encode(talk[0]["value"]).ids
    assert second.user_tokens == tokenizer.encode(talk[2]["value"], add_special_tokens=False).ids
    assert second.answer_tokens == tokenizer.encode(talk[3]["value"], add_special_tokens=False).ids
    assert (first.output_len, second.output_len) == (6, 12)
    with pytest.raises(WorkloadError, match="2 usable conversations, need 3 sessions"):
        build_workload(
            parse_config({"workload": {"num_requests": 3, "dataset": dataset, "session": {"turns": 2}}}), INFO
        )


def test_sessions_do_not_replay_traces():
    with pytest.raises(ConfigError, match="workload.session.turns: a trace's rows are single requests"):
        parse_config(
            {"workload": {"dataset": {"type": "mooncake", "path": "t.jsonl"}, "session": {"turns": 2}}}
        )
