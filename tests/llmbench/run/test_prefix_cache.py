"""Which cached prompt tokens a trial's own earlier prompts explain, and which a warm cache left."""

from llmbench.results.records import RequestRecord
from llmbench.run.prefix_cache import PrefixIndex, uncaused_hits


def record(request_id: str, cached: int, prompt_len: int = 64, **fields) -> RequestRecord:
    return RequestRecord(request_id, 0, False, prompt_len, cached_prompt_tokens=cached, **fields)


def test_shared_prefixes_count_in_whole_blocks_of_earlier_prompts():
    index = PrefixIndex()
    base = list(range(100, 164))
    index.add("a", base)
    index.add("b", base[:40] + [7] * 24)  # shares 40 tokens: two whole blocks
    index.add("c", [9] * 64)
    assert index.shared == {"a": 0, "b": 32, "c": 0}


def test_hits_past_the_trials_own_prefixes_and_the_template_are_a_warm_cache():
    index = PrefixIndex()
    index.add("a", list(range(100, 164)))
    index.add("b", list(range(100, 132)) + [7] * 32)
    records = [
        record("a", 0),
        record("b", 32),  # its 32 shared tokens: the trial's own
        record("c", 32, prompt_len=94, planned_prompt_len=64),  # within its 30 template tokens and a block
        record("d", 48),  # nothing earlier explains it
        record("e", 48, session=0, turn=2),  # a later turn: its history is the trial's own answers
    ]
    index.add("c", [1] * 64)
    index.add("d", [2] * 64)
    assert [r.id for r in uncaused_hits(records, index)] == ["d"]
