"""The metrics table `llmbench run` prints at its end."""

from rich.console import Console

from llmbench.cli.console import metrics_table


def test_the_metrics_table_counts_timeouts_and_cancels_beside_the_failures():
    metrics = {"completed": 5, "failed": 2, "timed_out": 1, "cancelled": 3, "not_started": 0}
    console = Console(width=200, record=True)
    console.print(metrics_table({"name": "t", "complete": True, "metrics": metrics}))
    assert "5 / 2 (1 timed out, 3 cancelled)" in console.export_text()
