"""ShareGPT as vLLM's benchmark client samples it (llmbench/run/sharegpt.py): a list cut short is read up to
its last complete entry, and the sampling rules hold on a fixture whose token counts are known (one
word, one token)."""

import json
import logging
import random

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from llmbench.run.sharegpt import DatasetError, Rules, read_entries, sample


@pytest.fixture(scope="module")
def encode():
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return lambda texts: [e.ids for e in tokenizer.encode_batch(texts)]


def entry(prompt_len: int, output_len: int, first: str = "human") -> dict:
    second = "gpt" if first == "human" else "human"
    return {
        "id": f"{prompt_len}-{output_len}-{first}",
        "conversations": [
            {"from": first, "value": " ".join(["a"] * prompt_len)},
            {"from": second, "value": " ".join(["b"] * output_len)},
        ],
    }


def test_a_list_cut_short_is_read_to_its_last_complete_entry(tmp_path, caplog):
    entries = [entry(5, 6), {"conversations": [{"from": "human", "value": 'x ] } { [ " y'}]}, entry(7, 8)]
    text = json.dumps(entries + [entry(9, 10)], indent=1)
    cut = text.rindex('"b b b') + 4  # inside the last entry's last string
    (tmp_path / "cut.json").write_text(text[:cut])
    with caplog.at_level(logging.INFO, logger="llmbench.run.sharegpt"):
        assert read_entries(tmp_path / "cut.json") == entries
    assert "ends mid-entry: read the 3 complete entries before the cut" in caplog.text
    # cut right after an entry and its comma: nothing lost
    (tmp_path / "comma.json").write_text(json.dumps(entries)[:-1] + ", ")
    assert read_entries(tmp_path / "comma.json") == entries
    (tmp_path / "whole.json").write_text(json.dumps(entries))
    assert read_entries(tmp_path / "whole.json") == entries


def test_a_closed_list_that_is_not_json_is_an_error(tmp_path):
    (tmp_path / "bad.json").write_text('[{"conversations": [}]')
    with pytest.raises(DatasetError, match=r"workload.dataset.path: .*bad.json is not JSON \(.*, line 1\)"):
        read_entries(tmp_path / "bad.json")


ENTRIES = [
    entry(3, 10),  # prompt under 4
    entry(4, 3),  # output under 4
    entry(4, 4),  # both at the minimum: kept
    entry(1025, 4),  # prompt over 1,024
    entry(1024, 1024),  # the longest prompt and a total of exactly 2,048: kept
    entry(1000, 1049),  # total 2,049
    entry(6, 9, first="gpt"),  # a gpt turn first: vLLM takes turns 0 and 1 whatever their speakers
    {"conversations": [{"from": "human", "value": "a a a a a"}]},  # one turn: never a candidate
    {"conversations": [{"from": "human", "value": 5}, {"from": "gpt", "value": "b b b b"}]},  # malformed
    {"conversations": ["not a turn", {"from": "gpt", "value": "b b b b"}]},  # malformed
    entry(20, 30),
]


def test_vllm_rules_keep_and_skip_by_token_counts(encode):
    sampled = sample(ENTRIES, encode, 100, Rules(), seed=0)
    samples = sampled.samples
    kept = {(len(s.prompt_token_ids), s.output_len) for s in samples}
    assert kept == {(4, 4), (1024, 1024), (6, 9), (20, 30)}
    assert sampled.looked == sampled.candidates == 10  # every entry with two turns was looked at
    assert all(s.prompt == " ".join(["a"] * len(s.prompt_token_ids)) for s in samples)


def test_the_order_is_vllms_seeded_shuffle(encode):
    candidates = [e for e in ENTRIES if len(e["conversations"]) >= 2]
    random.seed(7)  # what vLLM's ShareGPTDataset does with --seed 7
    random.shuffle(candidates)
    kept = [
        e for e in candidates if e.get("id") in ("4-4-human", "1024-1024-human", "6-9-gpt", "20-30-human")
    ]
    samples = sample(ENTRIES, encode, 100, Rules(), seed=7).samples
    assert [(len(s.prompt_token_ids), s.output_len) for s in samples] == [
        tuple(int(n) for n in e["id"].split("-")[:2]) for e in kept
    ]
    first_two = sample(ENTRIES, encode, 2, Rules(), seed=7)
    assert first_two.samples == samples[:2] and first_two.looked == candidates.index(kept[1]) + 1


def test_a_fixed_output_length_lifts_the_output_minimum_and_sets_the_total(encode):
    samples = sample(ENTRIES, encode, 100, Rules(output_len=2), seed=0).samples
    assert {(len(s.prompt_token_ids), s.output_len) for s in samples} == {
        (4, 2),  # 4 + 3 before: the answer's own length no longer counts
        (4, 2),
        (1024, 2),
        (1000, 2),  # its total is 1,002 now
        (6, 2),
        (20, 2),
    }
    assert len(samples) == 6


def test_limits_can_be_changed_and_max_model_len_bounds_the_total(encode):
    loose = Rules(min_len=1, max_prompt_len=None, max_total_len=None)
    samples = sample(ENTRIES, encode, 100, loose, seed=0).samples
    assert len(samples) == 8  # every well-formed pair
    fitting = sample(ENTRIES, encode, 100, Rules(max_model_len=50), seed=0).samples
    assert {(len(s.prompt_token_ids), s.output_len) for s in fitting} == {(4, 4), (6, 9), (20, 30)}
