"""torch.profiler capture for machines without Nsight Systems: a Chrome trace (open it in
chrome://tracing or ui.perfetto.dev) plus the key_averages table, CPU and, when present, CUDA."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from llmbench.profiling.steps import ProfileError

logger = logging.getLogger(__name__)

TRACE_FILE = "trace.json"
TABLE_FILE = "key_averages.txt"
OPS_FILE = "torch_ops.json"
TOP_OPS = 20
TABLE_ROWS = 50


class TorchCapture:
    """One torch.profiler session, started and stopped around the chosen steps."""

    def __init__(self, out_dir: Path):
        # torch here, not at the top: `llmbench profile` itself only reads what the capture wrote
        import torch

        from llmbench.engine.observe.profiler import torch_profiler

        self.out_dir = out_dir
        self.cuda = torch.cuda.is_available()
        self._profile = torch_profiler()

    def start(self) -> None:
        self._profile.start()

    def stop(self) -> None:
        self._profile.stop()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._profile.export_chrome_trace(str(self.out_dir / TRACE_FILE))
        averages = self._profile.key_averages()
        sort_by = "self_cuda_time_total" if self.cuda else "self_cpu_time_total"
        (self.out_dir / TABLE_FILE).write_text(averages.table(sort_by=sort_by, row_limit=TABLE_ROWS) + "\n")
        ops = {"cuda": self.cuda, "ops": top_ops(averages, TOP_OPS)}
        (self.out_dir / OPS_FILE).write_text(json.dumps(ops, indent=1) + "\n")
        logger.info("torch profile written to %s", self.out_dir / TRACE_FILE)


def top_ops(averages, limit: int) -> list[dict]:
    """The heaviest operators by self time (device time when CUDA was profiled), in milliseconds."""
    rows = [
        {
            "name": event.key,
            "count": event.count,
            "cpu_total_ms": event.cpu_time_total / 1e3,
            "self_cpu_ms": event.self_cpu_time_total / 1e3,
            "device_total_ms": event.device_time_total / 1e3,
            "self_device_ms": event.self_device_time_total / 1e3,
        }
        for event in averages
    ]
    key = "self_device_ms" if any(row["self_device_ms"] > 0 for row in rows) else "self_cpu_ms"
    rows.sort(key=lambda row: -row[key])
    return rows[:limit]


def load_torch_summary(out_dir: Path) -> dict:
    """profile.json's torch part from the files `TorchCapture.stop` wrote."""
    ops_path = out_dir / OPS_FILE
    if not ops_path.exists():
        raise ProfileError(f"no torch profile in {out_dir}: did --steps start beyond the run's last step?")
    ops = json.loads(ops_path.read_text())
    return {"trace": TRACE_FILE, "table": TABLE_FILE, "cuda": ops["cuda"], "top_ops": ops["ops"]}
