import json
from pathlib import Path

import pytest

from llmbench.run.summary import typed_summary

WRITTEN = Path(__file__).parents[3] / "docs/measurements/h200/field/capacity/summary.json"


def test_every_key_the_runner_writes_has_a_field():
    summary = json.loads(WRITTEN.read_text()) | {"schema_version": 2}
    assert typed_summary(summary).to_dict() == summary


def test_a_key_with_no_field_fails_rather_than_vanish_from_the_file():
    summary = json.loads(WRITTEN.read_text()) | {"schema_version": 2}
    summary["steps"]["mean_new_phase_ms"] = 1.0
    with pytest.raises(AssertionError, match=r"\['steps.mean_new_phase_ms'\]"):
        typed_summary(summary)
