"""The metrics table `llmbench run` prints at its end."""

from rich.console import Console

from llmbench.cli.console import metrics_table
from llmbench.results.metrics import Latencies, Metrics
from llmbench.results.steps import Steps
from llmbench.results.summary import SCHEMA_VERSION, RunSummary


def test_the_metrics_table_counts_timeouts_and_cancels_beside_the_failures():
    metrics = Metrics(
        completed=5,
        failed=2,
        timed_out=1,
        cancelled=3,
        not_started=0,
        duration_s=1.0,
        total_input_tokens=50,
        total_output_tokens=50,
        request_throughput=5.0,
        output_throughput=50.0,
        total_token_throughput=100.0,
        request_goodput=None,
        latencies=Latencies(),
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
    assert "5 / 2 (1 timed out, 3 cancelled)" in console.export_text()
