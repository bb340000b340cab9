"""The metrics table `llmbench run` prints at its end."""

from rich.console import Console

from llmbench.cli.console import metrics_table
from llmbench.results.metrics import Latencies, Metrics
from llmbench.results.steps import Steps
from llmbench.results.summary import SCHEMA_VERSION, RunSummary


def printed(latencies: Latencies = Latencies(), **counts) -> str:
    """The table of a run of 5 requests with these counts and latencies, as the console shows it."""
    metrics = Metrics(
        completed=counts.pop("completed", 5),
        failed=counts.pop("failed", 0),
        duration_s=1.0,
        total_input_tokens=50,
        total_output_tokens=100,
        request_throughput=5.0,
        output_throughput=100.0,
        total_token_throughput=150.0,
        request_goodput=None,
        latencies=latencies,
        **counts,
    )
    summary = RunSummary(
        schema_version=SCHEMA_VERSION,
        name="t",
        complete=True,
        config={},
        metrics=metrics,
        steps=Steps(num_steps=0),
    )
    console = Console(width=200, record=True)
    console.print(metrics_table(summary))
    return console.export_text()


def test_the_metrics_table_counts_timeouts_and_cancels_beside_the_failures():
    text = printed(failed=2, timed_out=1, cancelled=3, not_started=0)
    assert "5 / 2 (1 timed out, 3 cancelled)" in text


def test_a_reasoning_run_adds_ttfo_each_phases_itl_and_the_token_split():
    latencies = Latencies(mean_ttfo_ms=80.0, median_ttfo_ms=75.0, mean_answer_itl_ms=5.0)
    text = printed(latencies, total_reasoning_tokens=60, total_answer_tokens=40, requests_without_answer=1)
    assert "reasoning / answer tokens" in text and "60 / 40 (1 ended before answering)" in text
    assert "TTFO mean / median (ms)" in text and "80.00 / 75.00" in text
    assert "answer ITL mean / median (ms)" in text
    assert "TTFO" not in printed()  # a run without reasoning: no such rows
