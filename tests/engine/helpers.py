"""What the engine tests share: engines over the tiny preset (the null executor, and the real model on
the CPU), a workload whose max_tokens cut through multi-step windows, drivers that step an engine to
the end, and checks that a process is gone."""

from __future__ import annotations

import random
import time

from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.models.shape import PRESETS
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams
from llmbench.kernels import attention_split

TINY_SHAPE = PRESETS["tiny"]
TINY_CPU = ModelConfig(preset="tiny", device="cpu", dtype="float32")


def null_engine(**overrides) -> LLMEngine:
    overrides.setdefault("num_gpu_blocks", 256)
    return LLMEngine(EngineConfig(model=ModelConfig(preset="tiny", executor="null"), **overrides))


def model_engine(**overrides) -> LLMEngine:
    """The tiny preset's random weights, run for real on the CPU."""
    overrides.setdefault("num_gpu_blocks", 64)
    return LLMEngine(EngineConfig(model=TINY_CPU, max_model_len=256, attention_backend="torch", **overrides))


def workload(seed: int = 0) -> list[tuple[list[int], SamplingParams]]:
    """Prompts of assorted lengths, two sharing a prefix; max_tokens rarely a multiple of a window."""
    rng = random.Random(seed)
    shared = [rng.randrange(3, TINY_SHAPE.vocab_size) for _ in range(20)]
    requests = []
    for i, (length, max_tokens) in enumerate([(5, 13), (30, 1), (12, 7), (3, 21), (17, 2), (40, 9)]):
        prompt = [rng.randrange(3, TINY_SHAPE.vocab_size) for _ in range(length)]
        if i in (2, 4):
            prompt = shared + prompt
        requests.append((prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
    return requests


def run(
    engine: LLMEngine, requests: list[tuple[list[int], SamplingParams]]
) -> dict[str, list[RequestOutput]]:
    """Every request submitted at once and stepped to the end: each request's outputs, in order."""
    for i, (prompt, params) in enumerate(requests):
        engine.add_request(str(i), prompt, params)
    streams: dict[str, list[RequestOutput]] = {str(i): [] for i in range(len(requests))}
    for _ in range(1000):
        if not engine.has_unfinished():
            break
        for output in engine.step():
            streams[output.request_id].append(output)
    for outputs in streams.values():
        assert [o.finished for o in outputs] == [False] * (len(outputs) - 1) + [True]
        assert outputs[-1].error is None, outputs[-1].error
        # the stream adds up to the final output: nothing after a stop is ever emitted
        assert [t for o in outputs for t in o.new_token_ids] == outputs[-1].token_ids
    return streams


def results(streams: dict[str, list[RequestOutput]]) -> dict[str, tuple[list[int], FinishReason]]:
    return {rid: (outputs[-1].token_ids, outputs[-1].finish_reason) for rid, outputs in streams.items()}


def with_stops(requests, reference, picks: dict[int, int], min_tokens: int = 0):
    """The same requests, request i stopping on the token its reference output has at index picks[i]."""
    stopped = list(requests)
    for i, index in picks.items():
        prompt, params = requests[i]
        stop = reference[str(i)][0][index]
        stopped[i] = (
            prompt,
            SamplingParams(
                max_tokens=params.max_tokens, ignore_eos=True, stop_token_ids=(stop,), min_tokens=min_tokens
            ),
        )
    return stopped


def run_to_completion(engine, prompts, params):
    """Token ids per request id, and the finished outputs, stepping through the public API only (an
    LLMEngine or a split engine's EngineCoreClient)."""
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, params)
    return drain(engine)


def drain(engine):
    """Token ids and finished outputs of whatever the engine holds, stepped to the end."""
    tokens, finished = {}, {}
    deadline = time.monotonic() + 60
    while engine.has_unfinished():
        assert time.monotonic() < deadline, "requests never finished"
        for output in engine.step():
            tokens.setdefault(output.request_id, []).extend(output.new_token_ids)
            if output.finished:
                finished[output.request_id] = output
    return tokens, finished


def count_sdpa_calls(monkeypatch) -> list[int]:
    """The token count of every SDPA call of the split prefill attention, as it happens."""
    calls, real = [], attention_split._causal_sdpa

    def counted(q, *args):
        calls.append(q.shape[0])
        return real(q, *args)

    monkeypatch.setattr(attention_split, "_causal_sdpa", counted)
    return calls


def process_gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet (an orphan's new parent may not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pids: list[int], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not all(process_gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
