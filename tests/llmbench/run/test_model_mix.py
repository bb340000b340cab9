"""backend.models against the mock serving a base model and two adapters: each request goes to one model
by weight, seeded, the mock receives what the rows say, and summary.json counts each model apart."""

from __future__ import annotations

from collections import Counter

import pytest

from llmbench.backends.preflight import PreflightError, preflight
from llmbench.cli.console import metrics_table
from llmbench.config.load import parse_config
from llmbench.config.schema import ConfigError
from llmbench.mock_server import MockServer, MockSettings
from llmbench.report import write_report
from llmbench.results.records import load_requests
from llmbench.results.summary import RunSummary
from llmbench.run.runner import run_benchmark

RUN = {
    "name": "mix",
    "model": {"preset": "tiny"},
    "workload": {"num_requests": 40, "warmup_requests": 2, "input": {"mean": 6}, "output": {"mean": 3}},
    "output": {"report": False},
}
MIX = "backend.models=[{name: mock, weight: 2}, {name: sql-lora, weight: 1}, {name: chat-lora, weight: 1}]"


@pytest.fixture(scope="module")
def mock():
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, lora_modules="sql-lora,chat-lora")) as running:
        yield running


def config(mock: MockServer, *overrides: str):
    return parse_config(RUN, ["backend.type=openai", f"backend.url={mock.url}", *overrides])


def test_each_request_goes_to_a_seeded_model_and_each_model_is_measured_apart(mock, tmp_path):
    mock.records(reset=True)
    run_benchmark(config(mock, MIX), tmp_path / "run", repeat=2)
    rows = [r for r in load_requests(tmp_path / "run") if not r.warmup]
    # the two trials' 80 requests, split about 2:1:1 by their hashes: the same on every machine
    assert Counter(r.model for r in rows) == {"mock": 38, "sql-lora": 21, "chat-lora": 21}
    sent = Counter(r.model for r in mock.records() if r.tokens > 1)  # the preflight's asks for one token
    assert sent == Counter(r.model for r in load_requests(tmp_path / "run"))
    summary = RunSummary.load(tmp_path / "run").to_dict()
    assert list(summary["models"]) == ["mock", "sql-lora", "chat-lora"]
    per_trial = [Counter(r.model for r in rows if r.trial == k) for k in (0, 1)]
    for model, metrics in summary["models"].items():
        # each model's figures are the median of its trials', as the overall ones are
        assert metrics["completed"] == round((per_trial[0][model] + per_trial[1][model]) / 2)
        assert metrics["failed"] == 0 and metrics["mean_ttft_ms"] > 0
    assert "served_model" not in summary
    table = " ".join(str(row) for row in metrics_table(RunSummary.load(tmp_path / "run")).columns[0]._cells)
    assert "model chat-lora: completed, req/s, mean TTFT (ms)" in table
    page = write_report([tmp_path / "run"], tmp_path / "run").read_text()
    assert "Per model" in page and "chat-lora" in page
    # the same seed sends the same requests to the same models
    run_benchmark(config(mock, MIX), tmp_path / "again", repeat=2)
    again = {(r.trial, r.id): r.model for r in load_requests(tmp_path / "again")}
    assert again == {(r.trial, r.id): r.model for r in load_requests(tmp_path / "run")}


def test_a_run_without_a_mix_has_no_models_and_rows_without_a_model(mock, tmp_path):
    run_benchmark(config(mock), tmp_path)
    assert "models" not in RunSummary.load(tmp_path).to_dict()
    assert '"model"' not in (tmp_path / "requests.jsonl").read_text()


def test_an_unserved_adapter_stops_the_preflight_naming_backend_models(mock):
    unknown = "backend.models=[{name: mock}, {name: math-lora}]"
    with pytest.raises(
        PreflightError, match=r"^backend\.models: .* no model named 'math-lora' \(it serves mock, "
    ):
        preflight(config(mock, unknown))


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ("[]", r"^backend\.models: expected a non-empty list"),
        ("[{name: a, weight: 0}]", r"^backend\.models\[0\]\.weight: expected a number > 0"),
        ("[{name: ' '}]", r"^backend\.models\[0\]\.name: expected the name a server serves"),
        ("[{name: a}, {name: b}, {name: a}]", r"^backend\.models: each name once: 'a' given twice"),
    ],
)
def test_a_bad_mix_is_refused_naming_the_setting(models, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(
            RUN, ["backend.type=openai", "backend.url=http://127.0.0.1:1/v1", f"backend.models={models}"]
        )


def test_a_mix_needs_the_openai_backend_and_no_backend_model():
    with pytest.raises(
        ConfigError, match=r"^backend\.models: a mix of served models needs backend\.type openai"
    ):
        parse_config(RUN, ["backend.models=[{name: a}]"])
    with pytest.raises(
        ConfigError, match=r"^backend\.models: set backend\.model or backend\.models, not both"
    ):
        parse_config(
            RUN,
            [
                "backend.type=openai",
                "backend.url=http://h:1/v1",
                "backend.model=a",
                "backend.models=[{name: a}]",
            ],
        )


def test_every_turn_of_a_session_goes_to_its_sessions_model(mock, tmp_path):
    run_benchmark(config(mock, MIX, "workload.session.turns=3", "workload.num_requests=12"), tmp_path)
    rows = [r for r in load_requests(tmp_path) if not r.warmup]
    by_session = {}
    for row in rows:
        by_session.setdefault(row.session, set()).add(row.model)
    assert len(rows) == 36 and all(len(models) == 1 for models in by_session.values())
    assert len(set().union(*by_session.values())) > 1  # yet the sessions spread over the models
