"""The transformers peer: the same weights run by `LlamaForCausalLM.generate` in static batches.

Requests queue up; a worker thread takes up to batch_size of them, left-pads them into one batch and
generates greedily until the longest is done, as a simple static-batching server would. A streamer
stamps each decode step once for the whole batch; poll() hands over what arrived since last time.
An aborted request leaves the queue, or, already in a running batch, stops streaming: its row still
computes (a static batch cannot shrink), and the batch ends early once every row is finished or aborted."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

import torch

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import RunConfig
from llmbench.engine.loading.loader import hf_tensor_names, load_model
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.models.shape import LlamaShape
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams

logger = logging.getLogger(__name__)

POLL_WAIT_S = 0.005  # how long poll() waits for the worker before handing control back to the runner


class _Stopped(Exception):
    """Raised inside generate() to abandon a batch when the backend closes."""


class _BatchDone(Exception):
    """Raised inside generate() when no row of the batch has anything left to stream."""


class HFBackend:
    profiles_own_steps = False
    keeps_concurrency = False
    hands_ahead_s = 0.0
    served_model = None
    stamps_outputs = True  # generate() runs on its own thread: a poll may collect several of its steps

    def start(self, config: RunConfig) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        facts = resolve_model_facts(config.engine)
        engine_model = load_model(config.model, facts)
        shape = facts.shape
        if shape.attention_bias:
            raise ValueError("backend.type hf: only Llama shapes without attention bias are supported")
        with torch.device("meta"):
            self.model = LlamaForCausalLM(LlamaConfig(**hf_config(shape)))
        # assign=True makes the HF parameters views of the engine's tensors: one copy of the weights
        tied = shape.tie_word_embeddings
        self.model.load_state_dict(hf_state_dict(engine_model, shape), assign=True, strict=not tied)
        if tied:  # the engine holds one embedding; the head is made its view, as transformers ties them
            self.model.tie_weights()
        # the rotary tables are computed, not loaded: build them on the weights' device
        self.model.model.rotary_emb = LlamaRotaryEmbedding(self.model.config).to(self.model.device)
        self.model.eval()
        self.model_info = ModelInfo.from_shape(shape, facts.max_model_len)
        self.batch_size = config.hf_batch_size
        self._queued: deque[tuple[str, list[int], SamplingParams]] = deque()
        self._work = threading.Condition()
        self._outputs: queue.Queue[RequestOutput] = queue.Queue()
        # submitted, neither finished nor aborted (the runner's thread); a reused id is live twice
        self._live: Counter[str] = Counter()
        self._running: set[str] = set()  # the batch generate() is running (under _work)
        self._aborted: set[str] = set()  # rows of that batch to stop streaming (under _work)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._worker = threading.Thread(target=self._serve, name="hf-generate", daemon=True)
        self._worker.start()

    def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        due: float | None = None,
        model: str | None = None,
    ) -> None:
        self._live[request_id] += 1
        problem = self._problem(prompt_token_ids, params)
        if problem is not None:
            reason, message = problem
            self._outputs.put(RequestOutput(request_id, [], True, reason, message, time.perf_counter()))
            return
        with self._work:
            self._queued.append((request_id, list(prompt_token_ids), params))

    def poll(self, while_waiting: Callable[[], object] | None = None) -> list[RequestOutput]:
        # an idle worker starts here, not on each submit, so requests submitted together batch together
        with self._work:
            if self._queued:
                self._work.notify()
        if while_waiting is not None:  # the worker thread generates meanwhile
            while_waiting()
        outputs = []
        try:
            outputs.append(self._outputs.get(timeout=POLL_WAIT_S))
            while True:
                outputs.append(self._outputs.get_nowait())
        except queue.Empty:
            pass
        if self._error is not None:
            raise RuntimeError("hf generate failed") from self._error
        # an aborted request's last tokens may have been queued before the streamer saw the abort
        outputs = [o for o in outputs if self._live[o.request_id] > 0]
        self._live.subtract(o.request_id for o in outputs if o.finished)
        self._live = +self._live  # drop the ids that reached zero
        return outputs

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def abort(self, request_id: str) -> None:
        if self._live[request_id] <= 0:
            return
        del self._live[request_id]
        with self._work:
            queued = [item for item in self._queued if item[0] == request_id]
            if queued:
                self._queued.remove(queued[0])
            elif request_id in self._running:
                self._aborted.add(request_id)

    def check_empty(self) -> None:
        assert not self._queued and not self._live, f"{self._live.total()} requests unfinished"

    def drain_step_records(self) -> list:
        return []  # generate() exposes no per-step breakdown

    def client_usage(self) -> None:
        return None  # no client loop: the runner hands requests to generate() itself

    def close(self) -> None:
        self._stop.set()
        with self._work:
            self._work.notify()
        self._worker.join()

    def _problem(self, prompt: list[int], params: SamplingParams) -> tuple[FinishReason, str] | None:
        problem = params.problem()
        if problem:
            return FinishReason.ERROR, problem
        if not prompt or min(prompt) < 0 or max(prompt) >= self.model_info.vocab_size:
            return FinishReason.ERROR, "empty prompt or token id outside the vocabulary"
        if len(prompt) + params.max_tokens > self.model_info.max_model_len:
            return FinishReason.REJECTED, f"longer than max_model_len {self.model_info.max_model_len}"
        return None

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                with self._work:
                    while not self._queued and not self._stop.is_set():
                        self._work.wait()
                    n = min(self.batch_size, len(self._queued))
                    batch = [self._queued.popleft() for _ in range(n)]
                    self._running = {request_id for request_id, _, _ in batch}
                if batch:
                    self._generate(batch)
        except _Stopped:
            pass
        except BaseException as e:  # surfaced to the runner by the next poll()
            self._error = e
            self._outputs.put(RequestOutput("", [], False))

    @torch.inference_mode()
    def _generate(self, batch: list[tuple[str, list[int], SamplingParams]]) -> None:
        longest = max(len(prompt) for _, prompt, _ in batch)
        pad = 0
        ids = torch.tensor([[pad] * (longest - len(p)) + p for _, p, _ in batch], device=self.model.device)
        mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for _, p, _ in batch], device=ids.device)
        max_new = max(params.max_tokens for _, _, params in batch)
        ignore_eos = all(params.ignore_eos for _, _, params in batch)
        first = batch[0][2]
        sampling: dict = {"do_sample": False}
        if first.temperature > 0:
            # top_k 0 switches off generate()'s default of 50, as in the bundled engine
            sampling = {"do_sample": True, "temperature": first.temperature}
            sampling.update(top_p=first.top_p, top_k=first.top_k)
        streamer = _BatchStreamer(
            batch, self._outputs, self._stop, self.model_info.eos_token_id, self._aborted
        )
        try:
            self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new,
                min_new_tokens=max_new if ignore_eos else 0,
                pad_token_id=pad,
                eos_token_id=None if ignore_eos else self.model_info.eos_token_id,
                streamer=streamer,
                **sampling,
            )
        except _BatchDone:
            pass
        with self._work:
            self._running = set()
            self._aborted.clear()


class _BatchStreamer:
    """Turns generate()'s per-step token tensors into per-request outputs, one timestamp a step."""

    def __init__(
        self, batch: list, outputs: queue.Queue, stop: threading.Event, eos_token_id: int, aborted: set[str]
    ):
        self.batch = batch
        self.outputs = outputs
        self.stop = stop
        self.eos_token_id = eos_token_id
        self.aborted = aborted  # read without the lock: a set membership test sees one state or the other
        self.generated = [[] for _ in batch]
        self.done = [False] * len(batch)
        self.prompt_seen = False

    def put(self, tokens: torch.Tensor) -> None:
        if self.stop.is_set():
            raise _Stopped
        if not self.prompt_seen:  # the first call carries the prompts
            self.prompt_seen = True
            return
        now = time.perf_counter()
        for i, token in enumerate(tokens.view(-1).tolist()):
            request_id, _, params = self.batch[i]
            self.done[i] = self.done[i] or request_id in self.aborted
            if self.done[i]:
                continue
            self.generated[i].append(token)
            stop = (
                not params.ignore_eos
                and token == self.eos_token_id
                and len(self.generated[i]) > params.min_tokens
            )
            length = len(self.generated[i]) >= params.max_tokens
            self.done[i] = stop or length
            reason = (FinishReason.STOP if stop else FinishReason.LENGTH) if self.done[i] else None
            token_ids = list(self.generated[i]) if self.done[i] else []
            self.outputs.put(
                RequestOutput(request_id, [token], self.done[i], reason, t_emit=now, token_ids=token_ids)
            )
        if all(self.done):
            raise _BatchDone

    def end(self) -> None:
        pass


def hf_config(shape: LlamaShape) -> dict:
    """transformers LlamaConfig arguments for an engine shape."""
    rope = {"rope_type": "default", "rope_theta": shape.rope_theta}
    if shape.rope_scaling:
        rope = {**shape.rope_scaling, "rope_theta": shape.rope_theta}
    return {
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "rms_norm_eps": shape.rms_norm_eps,
        "max_position_embeddings": shape.max_position_embeddings,
        "tie_word_embeddings": shape.tie_word_embeddings,
        "rope_parameters": rope,
        "bos_token_id": shape.bos_token_id,
        "eos_token_id": shape.eos_token_id,
    }


def hf_state_dict(model: torch.nn.Module, shape: LlamaShape) -> dict[str, torch.Tensor]:
    """The engine's parameters under HF names, fused projections split back into their parts."""
    part_sizes = {
        "qkv_proj": [shape.q_size, shape.kv_size, shape.kv_size],
        "gate_up_proj": [shape.intermediate_size, shape.intermediate_size],
    }
    state = {}
    for name, tensor in model.named_parameters():
        targets = hf_tensor_names(name)
        if len(targets) == 1:
            state[targets[0]] = tensor
            continue
        fused = next(key for key in part_sizes if f".{key}." in name)
        state.update(zip(targets, tensor.split(part_sizes[fused]), strict=True))
    return state
