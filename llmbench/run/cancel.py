"""workload.cancel: the client hangs up on a seeded share of the requests, after a number of output
tokens or seconds, as users close a chat tab (AIPerf's --request-cancellation-rate). Closing the stream
is the abort a server sees; the run counts such requests as `cancelled`, apart from its failures.

Which requests is a hash of (seed, trial, request id), not a draw in submit order: the same requests
are cancelled whatever order a multi-turn run's turns take."""

from __future__ import annotations

import zlib

from llmbench.config.schema import CancelConfig
from llmbench.results.records import RequestRecord


class Cancels:
    def __init__(self, cancel: CancelConfig, seed: int, trial: int):
        self.cancel, self._key = cancel, f"{seed}:{trial}:"

    def chosen(self, request_id: str) -> bool:
        draw = zlib.crc32((self._key + request_id).encode()) / 2**32
        return draw < self.cancel.rate

    def due(self, record: RequestRecord, now: float) -> bool:
        """Whether the client hangs up on it now (`now`: run-relative seconds)."""
        if self.cancel.after_tokens is not None:
            return record.output_len >= self.cancel.after_tokens
        return now - record.submit_time >= self.cancel.after_s
