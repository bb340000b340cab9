"""backend.models: each request goes to one of several served models or LoRA adapters, picked by weight,
as a mixed fleet of fine-tunes sees its traffic (vLLM's --lora-modules served together, AIPerf's
--model-selection-strategy, inference-perf's lora_traffic_split).

The pick is a hash of (seed, trial, request id), not a draw in submit order: the same requests go to the
same models whatever order a multi-turn run's turns take, and a session's turns all go to the model its
first turn went to. The hash is salted apart from workload.cancel's, so which requests are cancelled
does not follow which model they went to."""

from __future__ import annotations

import bisect
import itertools
import zlib

from llmbench.config.schema import ServedModel


class ModelMix:
    def __init__(self, models: list[ServedModel], seed: int, trial: int):
        total = sum(m.weight for m in models)
        self._names = [m.name for m in models]
        self._bounds = list(itertools.accumulate(m.weight / total for m in models))
        self._key = f"model:{seed}:{trial}:"

    def pick(self, request_id: str, session: int | None = None) -> str:
        """The model of a request; a session's turns share the pick of their session."""
        unit = request_id if session is None else f"session {session}"
        draw = zlib.crc32((self._key + unit).encode()) / 2**32
        return self._names[min(bisect.bisect_right(self._bounds, draw), len(self._names) - 1)]
