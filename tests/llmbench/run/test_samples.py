"""Sample completions: the first timed requests of the first trial, as text, in summary.json and the
report, where the model has a tokenizer of its own."""

import json

import yaml
from llmbench.engine.request import RequestOutput, StepOutputs
from typer.testing import CliRunner

from llmbench.cli.app import app
from llmbench.config.load import parse_config
from llmbench.report import write_report
from llmbench.run.samples import SAMPLE_REQUESTS, SampleCatcher, shorten, shorten_prompt
from tests.llmbench.null_run import NULL_RUN


def test_the_first_requests_are_caught_as_they_finish():
    catcher = SampleCatcher()
    for i in range(SAMPLE_REQUESTS + 2):
        catcher.want(f"0:{i}", [5, 6, 7], None)
    assert catcher.waiting
    catcher.look(
        [RequestOutput("0:0", [9], True, token_ids=[8, 9]), RequestOutput("0:4", [9], True, token_ids=[9])]
    )
    step = StepOutputs([RequestOutput("0:1", [3], True, token_ids=[3])], ["0:2"], [4])
    catcher.look(step)  # a plain decode never finishes a request: 0:2 is still awaited
    assert catcher.waiting
    catcher.look([RequestOutput("0:2", [4], True, token_ids=[4, 4])])
    assert not catcher.waiting
    assert catcher._outputs == {"0:0": [8, 9], "0:1": [3], "0:2": [4, 4]}


def test_samples_finished_without_tokens_end_the_wait_and_give_no_text():
    # an HTTP stream's finished output carries no token ids: once the samples have finished, the
    # runner stops handing every later poll's outputs to look()
    catcher = SampleCatcher()
    for i in range(SAMPLE_REQUESTS):
        catcher.want(f"0:{i}", [5, 6, 7], None)
    catcher.look([RequestOutput(f"0:{i}", [9], True) for i in range(SAMPLE_REQUESTS)])
    assert not catcher.waiting
    config = parse_config(NULL_RUN, ["model.tokenizer=tokenizer.json"])
    assert catcher.texts(config) == []


def test_a_preset_with_random_weights_has_no_samples():
    catcher = SampleCatcher()
    catcher.want("0:0", [5], None)
    catcher.look([RequestOutput("0:0", [9], True, token_ids=[9])])
    assert catcher.texts(parse_config({"model": {"preset": "tiny"}})) == []


def test_long_texts_are_shortened_keeping_a_prompts_end():
    assert shorten("abc", 5) == "abc" and shorten("abcdefgh", 5) == "abcde …"
    prompt = "start " + "x" * 500 + " the question?"
    short = shorten_prompt(prompt)
    assert short.startswith("start ") and short.endswith("the question?") and " … " in short
    assert len(short) < 340


def test_samples_reach_summary_and_report_as_escaped_text(sharegpt, tmp_path):
    root, tokenizer = sharegpt
    hostile = "<b>what</b> is the capital of france"
    turns = [
        [hostile, "the capital of france is paris"],
        ["tell me a story about a cat", "a spider has eight legs"],
    ]
    (root / "chat.json").write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": h}, {"from": "gpt", "value": g}]}
                for h, g in turns
            ]
        )
    )
    config = {
        **NULL_RUN,
        "model": {**NULL_RUN["model"], "tokenizer": str(root / "tokenizer.json")},
        "workload": {"num_requests": 2, "dataset": {"type": "sharegpt", "path": str(root / "chat.json")}},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(tmp_path / "run.yaml"), "--out", str(run_dir)])
    assert result.exit_code == 0, result.output
    samples = json.loads((run_dir / "summary.json").read_text())["samples"]
    assert {s["prompt"] for s in samples} == {hostile, "tell me a story about a cat"}
    for s in samples:
        assert s["output_tokens"] in (6, 5) and s["prompt_tokens"] == len(tokenizer.encode(s["prompt"]).ids)
    html = write_report([run_dir], run_dir).read_text()
    assert "Sample completions" in html
    assert "&lt;b&gt;what&lt;/b&gt; is the capital of france" in html and "<b>what</b>" not in html
