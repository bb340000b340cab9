"""What the mock actually sent, as the latencies a perfect client would have measured: the yardstick a
client's own figures are judged against (TTFT and ITL as vLLM's benchmark defines them)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from llmbench.mock_server.streams import StreamRecord


@dataclass(frozen=True)
class SentLatencies:
    requests: int
    ttft_s: list[float]  # per streamed request: first chunk sent - request received
    itl_s: list[float]  # every gap between consecutive chunks of a request (0 within one write)
    chunks: int  # chunks with tokens, all requests
    tokens: int
    span_s: float  # first request received -> last chunk sent

    @property
    def median_ttft_s(self) -> float:
        return statistics.median(self.ttft_s) if self.ttft_s else float("nan")

    @property
    def mean_itl_s(self) -> float:
        return statistics.fmean(self.itl_s) if self.itl_s else float("nan")

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.span_s if self.span_s > 0 else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.span_s if self.span_s > 0 else float("nan")


def sent_latencies(records: list[StreamRecord]) -> SentLatencies:
    """The latencies of the requests the mock answered with tokens."""
    served = [r for r in records if r.status == 200 and r.sends]
    ttft, itl = [], []
    for record in served:
        ttft.append(record.sends[0] - record.received)
        previous = None
        for sent, events in zip(record.sends, record.events, strict=True):
            if previous is not None:
                itl.append(sent - previous)
            itl.extend([0.0] * (events - 1))  # chunks of one write reach the client together
            previous = sent
    span = max((r.sends[-1] for r in served), default=0.0) - min((r.received for r in served), default=0.0)
    chunks = sum(sum(r.events) for r in served)
    return SentLatencies(len(served), ttft, itl, chunks, sum(r.tokens for r in served), span)
