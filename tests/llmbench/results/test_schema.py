"""The summary's JSON Schema against the page that documents the file."""

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.results.schema import json_schema

PAGE = Path(__file__).parents[3] / "docs" / "reference" / "result-files.md"


def page_section() -> str:
    text = PAGE.read_text()
    return text[text.index("### Every key of `summary.json`") : text.index("## `ablation.json`")]


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


def test_llmbench_schema_prints_it_and_refuses_an_unknown_name():
    result = CliRunner().invoke(app, ["schema", "summary"])
    assert result.exit_code == 0 and json.loads(result.output) == json_schema("summary")
    result = CliRunner().invoke(app, ["schema", "nope"])
    assert result.exit_code == 2 and "expected one of summary" in result.output
