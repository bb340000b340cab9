"""The target server's /metrics during a run: scraped from our own server, its counters' increases
over the timed trial are what the run sent; a server without /metrics costs a warning, never the run."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from llmbench.engine.config import EngineConfig, ModelConfig

from llmbench.config.load import parse_config
from llmbench.report import write_report
from llmbench.run.runner import run_benchmark
from llmbench.run.scrape import MetricsScraper, metrics_url
from tests.engine.serving.servers import RunningServer
from tests.llmbench.null_run import NULL_RUN


@pytest.fixture
def our_server():
    model = ModelConfig(preset="tiny", executor="null")
    server = RunningServer(EngineConfig(model=model, max_num_seqs=8, max_num_batched_tokens=256))
    yield server
    server.stop()


def test_the_server_s_counters_over_the_trial_are_what_the_run_sent(tmp_path, our_server):
    config = parse_config(
        {
            **NULL_RUN,
            "backend": {"type": "openai", "url": f"{our_server.url}/v1"},
            "telemetry": {"scrape_interval_s": 0.05},
        }
    )
    summary = run_benchmark(config, tmp_path / "run").summary
    metrics, server = summary.metrics, summary.server_metrics
    assert server.available and server.url == f"{our_server.url}/metrics"
    # the warm-up's two requests finished before the trial's first scrape: only the trial's count
    assert server.requests_finished == metrics.completed == 12
    assert server.prompt_tokens == metrics.total_input_tokens
    assert server.generation_tokens == metrics.total_output_tokens
    assert server.server_mean_ttft_ms > 0 and server.server_mean_e2el_ms >= server.server_mean_ttft_ms
    assert server.preemptions is None  # our server does not count them
    assert server.max_running >= 0 and server.sources["running"] == "vllm:num_requests_running"
    lines = (tmp_path / "run" / "server_metrics.csv").read_text().splitlines()
    assert lines[0].startswith("time_s,trial,") and "generation_tokens" in lines[0]
    assert len(lines) - 1 == server.scrapes >= 2
    report = write_report([tmp_path / "run"], tmp_path / "run")
    assert (tmp_path / "run" / "server_metrics.png").stat().st_size > 0
    assert "/metrics beside the client" in report.read_text()


def answering(status: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    return Handler


@pytest.mark.parametrize(("status", "level"), [(404, "INFO"), (500, "WARNING")])
def test_a_server_without_metrics_is_one_short_line_and_no_figures(caplog, status, level):
    caplog.set_level("INFO", logger="llmbench.run.scrape")
    http = ThreadingHTTPServer(("127.0.0.1", 0), answering(status))
    threading.Thread(target=http.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{http.server_address[1]}/metrics"
    try:
        scraper = MetricsScraper(url, 0.01, run_start=0.0)
        for _ in range(2):  # two trials
            with scraper:
                pass
    finally:
        http.shutdown()
    summary = scraper.summary()
    assert summary.available is False and f"HTTP {status}" in summary.reason and url in summary.reason
    # no server without /metrics warns each run: a missing one (404) is said at INFO, in one short line
    lines = [r for r in caplog.records if r.name == "llmbench.run.scrape"]
    assert [r.levelname for r in lines] == [level]
    assert "goes on without the server's own figures" in lines[0].getMessage()
    assert "\n" not in lines[0].getMessage() and "http" not in lines[0].getMessage().split(url)[1]


def test_the_report_names_the_served_model_and_says_the_server_gave_no_figures(tmp_path):
    from llmbench.mock_server import MockServer, MockSettings

    run = {
        "name": "mocked",
        "model": {"preset": "tiny"},
        "workload": {"num_requests": 2, "output": {"mean": 3}},
    }
    with MockServer(MockSettings(ttft_ms=0, itl_ms=0, model="served-name")) as mock:
        result = run_benchmark(
            parse_config(run, ["backend.type=openai", f"backend.url={mock.url}"]), tmp_path / "run"
        )
    assert result.summary.to_dict()["served_model"] == "served-name"
    page = write_report([tmp_path / "run"], tmp_path / "run").read_text()
    assert f"served-name at {mock.url}" in page
    assert f"no server-side figures (GET {mock.root}/metrics answered HTTP 404)" in page


def test_text_that_is_not_prometheus_s_is_no_figures_either():
    scraper = MetricsScraper("http://x/metrics", 1.0, 0.0, fetch=lambda url, timeout: "<html>hello</html>")
    scraper.scrape()
    assert scraper.rows == [] and "ExpositionError" in scraper.summary().reason


def test_a_failed_scrape_after_good_ones_is_skipped():
    answers = iter(
        ['vllm:num_requests_running{model_name="m"} 2\n', OSError("reset"), "vllm:num_requests_running 4\n"]
    )

    def fetch(url, timeout):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    scraper = MetricsScraper("http://x/metrics", 1.0, 0.0, fetch=fetch)
    for _ in range(3):
        scraper.scrape()
    assert [values["running"] for _, _, values in scraper.rows] == [2, 4]
    assert scraper.summary().max_running == 4


@pytest.mark.parametrize(
    ("backend", "telemetry", "expected"),
    [
        ({"type": "openai", "url": "http://gpu-box:8000/v1"}, {}, "http://gpu-box:8000/metrics"),
        (
            {"type": "openai", "url": "https://api.example/v1"},
            {"metrics_url": "http://gpu-box:9090/metrics"},
            "http://gpu-box:9090/metrics",
        ),
        ({"type": "openai", "url": "http://gpu-box:8000/v1"}, {"server_metrics": False}, None),
        ({"type": "bundled"}, {}, None),
    ],
)
def test_where_the_metrics_are(backend, telemetry, expected):
    config = parse_config({"backend": backend, "telemetry": telemetry})
    assert metrics_url(config, backend=None) == expected


def test_summary_json_holds_the_server_figures_as_json(tmp_path, our_server):
    config = parse_config({**NULL_RUN, "backend": {"type": "openai", "url": f"{our_server.url}/v1"}})
    run_benchmark(config, tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["server_metrics"]["available"] and saved["server_metrics"]["requests_finished"] == 12
