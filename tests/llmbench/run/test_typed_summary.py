import json
from pathlib import Path

import msgspec

from llmbench.device.machine import Environment
from llmbench.metrics.requests import compute_metrics
from llmbench.results.records import RequestRecord
from llmbench.results.steps import Steps
from llmbench.results.summary import RunSummary
from llmbench.run.summary import build_summary

WRITTEN = Path(__file__).parents[3] / "docs/measurements/h200/field/capacity/summary.json"


def test_every_key_the_runner_writes_has_a_field():
    summary = json.loads(WRITTEN.read_text()) | {"schema_version": 2}
    assert RunSummary.from_dict(summary).to_dict() == summary


def _trial(output_len: int, trial: int) -> RequestRecord:
    times = [1.0 + 0.01 * i for i in range(output_len)]
    return RequestRecord(
        id=f"r{trial}",
        trial=trial,
        warmup=False,
        prompt_len=10,
        output_len=output_len,
        submit_time=0.0,
        first_token_time=times[0],
        token_times=times,
        finish_reason="length",
        finish_time=times[-1],
    )


def _summary(trials):
    return build_summary(
        name="t",
        complete=True,
        started_at="2026-01-01T00:00:00Z",
        config={},
        environment=Environment(),
        trials=trials,
        steps=Steps(num_steps=0),
    )


def test_one_trial_is_the_metrics_and_several_their_median():
    trials = [compute_metrics([_trial(n, k)], [50]) for k, n in enumerate((3, 5, 9))]
    assert _summary(trials[:1]).metrics == trials[0]
    assert _summary(trials[:1]).trials is msgspec.UNSET
    assert _summary(trials).metrics.total_output_tokens == 5
    assert _summary(trials).trials == trials
    assert _summary([]).to_dict()["metrics"] == {}
