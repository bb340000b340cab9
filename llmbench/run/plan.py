"""A trial's workload, whichever kind the config asks for: single requests on an arrival process
(workload.py), a replayed trace (trace_workload.py) or multi-turn sessions (session_plan.py). Trial k is
seeded with workload.seed + k, so trials are independent samples of the same workload."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import TRACE_DATASETS, RunConfig
from llmbench.run.session_plan import session_workload
from llmbench.run.sessions import Sessions
from llmbench.run.trace_workload import trace_workload
from llmbench.run.workload import Requests, single_requests


@dataclass(frozen=True)
class Workload:
    # single requests, or multi-turn sessions whose later turns exist only once earlier ones finished
    warmup: Requests | Sessions
    requests: Requests | Sessions


def build_workload(config: RunConfig, info: ModelInfo, trial: int = 0) -> Workload:
    """The warm-up and timed requests (or sessions) of trial `trial`; the same config, model and trial
    give the same workload."""
    seeded = dataclasses.replace(config.workload, seed=config.workload.seed + trial)
    config = dataclasses.replace(config, workload=seeded)
    if seeded.dataset.type in TRACE_DATASETS:
        return Workload(*trace_workload(config, info))
    if seeded.session.turns > 1:
        return Workload(*session_workload(config, info))
    return Workload(*single_requests(config, info))
