"""Each result file's JSON Schema against the page that documents the file."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.results.schema import json_schema

PAGE = Path(__file__).parents[3] / "docs" / "reference" / "result-files.md"


def page_section() -> str:
    text = PAGE.read_text()
    return text[text.index("### Every key of `summary.json`") : text.index("## The study files")]


def schema_keys() -> set[str]:
    return {
        key for definition in json_schema("summary")["$defs"].values() for key in definition["properties"]
    }


def test_every_key_of_the_schema_is_on_the_page_and_every_key_there_in_the_schema():
    named = set(re.findall(r"`([a-z0-9_]+)`", page_section()))
    assert schema_keys() - named == set(), "keys the page does not list"
    # besides keys, the section names the statistics and a config key
    assert named - schema_keys() == {"mean", "median", "std", "min", "p50_ttft_ms"}  # max: a lag's key


def test_the_schema_describes_the_file_metrics_flat_with_percentile_keys():
    metrics = json_schema("summary")["$defs"]["Metrics"]
    assert "latencies" not in metrics["properties"] and "p99_ttft_ms" not in metrics["properties"]
    assert list(metrics["properties"])[10:12] == ["request_goodput", "mean_ttft_ms"]
    (pattern,) = metrics["patternProperties"]
    assert re.match(pattern, "p99.9_itl_ms") and not re.match(pattern, "p99_ttft_s")


STUDIES = ("ablation", "sweep", "capacity", "calibrate")
# a study file's own keys are on its section; the metrics, steps and client block it holds are
# summary.json's, listed there
SHARED = set(json_schema("summary")["$defs"]) - {"RunSummary"}


def study_section(name: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"## `{name}.json`")
    return text[start : text.index("\n## ", start + 1)]


@pytest.mark.parametrize("name", STUDIES)
def test_every_key_of_a_study_files_schema_is_on_its_section_and_no_other(name):
    defs = json_schema(name)["$defs"]
    keys = {key for title, d in defs.items() if title not in SHARED for key in d["properties"]}
    named = set(re.findall(r"`([a-z0-9_]+)`", study_section(name)))
    # schema_version, every study file's, is on the section above them
    assert keys - named == {"schema_version"}, "keys the page does not list"
    # besides keys, a section names a toggle, a setting's value and the variant it speaks of
    assert named - keys <= {"cuda_graphs", "auto", "x"}


@pytest.mark.parametrize("name", ["summary", *STUDIES])
def test_llmbench_schema_prints_each_files(name):
    result = CliRunner().invoke(app, ["schema", name])
    assert result.exit_code == 0 and json.loads(result.output) == json_schema(name)
    assert json.loads(result.output)["$ref"].endswith(json_schema(name)["$ref"].split("/")[-1])


def test_a_study_files_metrics_are_flat_or_empty_as_in_the_file():
    variant = json_schema("ablation")["$defs"]["Variant"]["properties"]
    assert variant["metrics"]["anyOf"][1] == {"type": "object", "maxProperties": 0}
    assert "latencies" not in json_schema("sweep")["$defs"]["Metrics"]["properties"]


def test_llmbench_schema_refuses_an_unknown_name_naming_the_files():
    result = CliRunner().invoke(app, ["schema", "nope"])
    assert result.exit_code == 2
    assert "expected one of summary, ablation, sweep, capacity, calibrate" in result.output
