"""Generation.deltas on the tiny preset's tokenizer, fed by hand: outputs already waiting when the stream
wakes merge into one delta per choice; what came before an engine error still goes out."""

from __future__ import annotations

import asyncio

import pytest
from llmbench.engine.models.shape import PRESETS
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams
from llmbench.engine.serving.engine_loop import EngineDeadError
from llmbench.engine.serving.generation import Generation
from llmbench.engine.serving.metrics import ServerMetrics
from llmbench.engine.serving.tokenizer import load_tokenizer

from tests.engine.helpers import TINY_CPU

TEXT = "Hello there, how are you?"


class _Engine:
    def __init__(self):
        self.aborted: list[str] = []

    def add(self, request_id, prompt, params, stream, index) -> None:
        pass

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


class _Request:
    async def receive(self) -> dict:
        await asyncio.Event().wait()  # the client never leaves


def _generation(tokenizer) -> Generation:
    metrics = ServerMetrics("tiny")
    return Generation(_Engine(), tokenizer, metrics, [[1, 2, 3]], SamplingParams(max_tokens=6), [], "cmpl")


def _output(generation: Generation, tokens: list[int], finished: bool = False) -> RequestOutput:
    reason = FinishReason.LENGTH if finished else None
    return RequestOutput(generation.choices[0].request_id, tokens, finished, reason, t_emit=1.0)


async def _collect(
    generation: Generation, feed: list
) -> tuple[list[tuple[str, list[int]]], Exception | None]:
    """Every item of feed queued before the stream first wakes, then the deltas it yields."""
    for item in feed:
        generation.queue.put_nowait(item)
    deltas, error = [], None
    try:
        async for _, text, token_ids in generation.deltas(_Request()):
            deltas.append((text, token_ids))
    except EngineDeadError as e:
        error = e
    return deltas, error


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY_CPU, PRESETS["tiny"])


@pytest.fixture(scope="module")
def tokens(tokenizer) -> list[int]:
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    assert len(ids) >= 5
    return ids


def test_outputs_waiting_together_merge_into_one_delta(tokenizer, tokens):
    generation = _generation(tokenizer)
    feed = [
        (0, _output(generation, [t], finished=i == len(tokens) - 1), 2.0 + i) for i, t in enumerate(tokens)
    ]
    deltas, error = asyncio.run(_collect(generation, feed))
    choice = generation.choices[0]
    assert error is None
    assert deltas == [(tokenizer.decode(tokens), tokens)]
    assert choice.token_ids == tokens and choice.finish_reason == "length"
    assert choice.t_token_handed == [2.0 + i for i in range(len(tokens))]  # one per output, as before


def test_what_came_before_an_engine_error_still_goes_out(tokenizer, tokens):
    generation = _generation(tokenizer)
    feed = [(0, _output(generation, tokens[:3]), 2.0), (0, _output(generation, tokens[3:4]), 3.0)]
    deltas, error = asyncio.run(_collect(generation, [*feed, EngineDeadError("gone")]))
    assert deltas == [(tokenizer.decode(tokens[:4]), tokens[:4])]
    assert str(error) == "gone"
    assert generation.engine.aborted == [generation.choices[0].request_id]
