"""The bundled engine: in-process, each poll() is one engine step; split (engine.process_split), the
core steps in its own process and poll() hands over what it produced meanwhile."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import RunConfig
from llmbench.engine.core.core_client import EngineCoreClient
from llmbench.engine.core.core_process import make_step_hook
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import RequestOutput, SamplingParams
from llmbench.engine.scheduling.check import assert_engine_empty


class BundledBackend:
    stamps_outputs = False  # a poll is an engine step (in-process) or reads what the core sent
    # the engine opens `llmbench profile`'s window around its own steps: a streamed multi-step window
    # takes several polls for one step
    profiles_own_steps = True
    keeps_concurrency = False
    hands_ahead_s = 0.0
    served_model = None
    step_hook: str | None = None  # also for a subclass with an __init__ of its own

    def __init__(self, step_hook: str | None = None):
        """step_hook: "module:function" making what the engine calls at each step
        (engine/core/core_process.py), as `llmbench profile`'s window: named, not passed, since a split core
        makes it in its own process."""
        self.step_hook = step_hook

    def start(self, config: RunConfig) -> None:
        if config.engine.process_split:
            self.engine = EngineCoreClient(config.engine, self.step_hook)
        else:
            self.engine = LLMEngine(config.engine, make_step_hook(self.step_hook))
        self.model_info = ModelInfo.from_shape(self.engine.executor.shape, self.engine.executor.max_model_len)

    def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        due: float | None = None,
        model: str | None = None,
    ) -> None:
        # the engine's own records time the request from here; the runner's record keeps `due`
        self.engine.add_request(request_id, prompt_token_ids, params)

    def poll(self, while_waiting: Callable[[], object] | None = None) -> Iterable[RequestOutput]:
        if isinstance(self.engine, LLMEngine):
            return self.engine.step(while_waiting)
        if while_waiting is not None:  # split: the core steps in its own process, whatever this one does
            while_waiting()
        return self.engine.step()

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def check_empty(self) -> None:
        if isinstance(self.engine, LLMEngine):
            assert_engine_empty(self.engine)
        else:  # split: the scheduler and the KV pool live in the core's process, so it checks itself
            assert not self.engine.has_unfinished(), "the engine core still holds requests"
            failure = self.engine.check_empty()
            assert failure is None, f"engine core: {failure}"

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished()

    def drain_step_records(self) -> list:
        return self.engine.drain_step_records()

    def client_usage(self) -> None:
        return None  # no client loop: the runner hands requests to the engine itself

    def close(self) -> None:
        self.engine.shutdown()
