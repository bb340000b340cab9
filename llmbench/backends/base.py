"""What the runner drives: the Backend protocol, the model facts a backend hands the workload, and the
output an HTTP stream yields. Each backend takes requests and streams RequestOutputs back.

In-process backends do their work inside `poll()` (one engine step); others may work in the
background and hand over whatever arrived since the last poll."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from llmbench.engine.request import RequestOutput, SamplingParams

if TYPE_CHECKING:
    from llmbench.config.schema import RunConfig
    from llmbench.engine.models.shape import LlamaShape


@dataclass(frozen=True)
class ModelInfo:
    """What the workload needs to know about the model behind a backend."""

    vocab_size: int
    eos_token_id: int
    max_model_len: int
    special_token_ids: tuple[int, ...] = ()  # never drawn as synthetic prompt tokens

    @classmethod
    def from_shape(cls, shape: LlamaShape, max_model_len: int) -> ModelInfo:
        """The info of a model the engine's loader built; its BOS and EOS, where it has them, are special."""
        specials = tuple(t for t in (shape.bos_token_id, shape.eos_token_id) if t >= 0)
        return cls(shape.vocab_size, shape.eos_token_id, max_model_len, specials)


@dataclass
class ServedOutput(RequestOutput):
    """An output read from an HTTP stream, its t_emit when the client read it (on the runner's clock);
    the finished one carries the engine's own timestamps for the request when the server is ours, and
    the client's HTTP phases (perf_counter seconds)."""

    server_timestamps: dict[str, Any] | None = None
    http_phases: dict[str, float | None] | None = None  # the finished one's: openai_stream.HTTP_PHASES
    submitted: float | None = None  # a stream's first, without tokens: when its loop meant it to start
    # a stream's first, when the backend made the prompt's text (and tokens are saved): the text sent
    # and the ids it encodes to, which differ from the workload's once the text was adjusted
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    prompt_tokens: int | None = None  # the finished one's: the server's usage, where it reports them
    cached_tokens: int | None = None  # the finished one's: of those, the ones its prefix cache held
    # the finished one's, where the stream had reasoning: its reasoning tokens, and the index among the
    # output tokens of the answer's first (None: no answer token came)
    reasoning_tokens: int | None = None
    answer_start: int | None = None
    # a read that completed several SSE events with text: the tokens each brought, in order; each event
    # is an arrival of its own at the read's stamp (None: the output is one event)
    event_tokens: list[int] | None = None


class Backend(Protocol):
    model_info: ModelInfo
    # True when the engine opens the profile window around its own steps (the bundled engine, in
    # process or in its split core; a server's); the runner then opens none around its polls
    profiles_own_steps: bool
    # True when each output's t_emit is when it reached the client, on the runner's clock (an HTTP
    # stream's read, the hf streamer's decode step); the runner records that instead of its poll's time
    stamps_outputs: bool
    # True when the backend keeps workload.max_concurrency itself (an HTTP client's one stream loop):
    # the runner hands it requests ahead of a free slot, each with `due`, when the schedule has it
    # start (perf_counter), and the backend's first output of each says when it started it
    keeps_concurrency: bool
    # how long before its due time the runner hands a request over: a backend whose client starts each
    # request at its `due` itself (an HTTP client's stream loops) takes it ahead; 0 for the rest
    hands_ahead_s: float
    # the model an OpenAI-compatible server named for the run (backend.model, or the first it lists);
    # None where the config's model is the one served
    served_model: str | None

    def start(self, config: RunConfig) -> None: ...

    # due (perf_counter): when the request counts as submitted; an HTTP client's stream reports it back
    # as the request's submit time (None, a direct caller's: now); an in-process engine ignores it.
    # model: the served model it goes to (backend.models, which only the openai backend takes; None:
    # the backend's own)
    def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        due: float | None = None,
        model: str | None = None,
    ) -> None: ...

    # outputs since the last poll (an in-process engine's: its step's StepOutputs); while_waiting, the
    # runner's bookkeeping, runs once while this one waits (in an in-process engine's step, once its
    # work is on the device)
    def poll(self, while_waiting: Callable[[], object] | None = None) -> Iterable[RequestOutput]: ...

    def abort(self, request_id: str) -> None: ...  # the runner has given up on it (timeout)

    def check_empty(self) -> None: ...  # AssertionError if work or resources are left (run --check)

    def has_unfinished(self) -> bool: ...

    def drain_step_records(self) -> list: ...

    # the figures of each stream loop of an HTTP client (backends/loop_monitor.py); None in process
    def client_usage(self) -> list[dict] | None: ...

    def close(self) -> None: ...
