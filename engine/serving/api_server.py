"""`llmbench serve`: an OpenAI-compatible HTTP server over the bundled engine, on FastAPI + uvicorn (the
stack vLLM's API server runs, with uvloop and httptools as there, so the API-server cost measured here is
representative of it: 10-14 us of server CPU per streamed token, split, on the 2-core CPU:
benchmarks/serving_cpu.py).

POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize, /reset_prefix_cache, /start_profile,
/stop_profile; GET /v1/models, /health (503 once the engine is gone), /metrics (Prometheus text). Every
bad request is a 4xx with OpenAI's error body."""

from __future__ import annotations

import logging
import socket
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from llmbench.engine.config import EngineConfig
from llmbench.engine.core.gc_heap import freeze_heap
from llmbench.engine.loading.source import model_shape, resolve_max_model_len
from llmbench.engine.serving import inputs
from llmbench.engine.serving.engine_loop import EngineDeadError, EngineLoop
from llmbench.engine.serving.generation import ClientGone, Generation, RequestRejected
from llmbench.engine.serving.large_requests import BodyLimit, default_max_body_bytes, off_the_loop
from llmbench.engine.serving.metrics import ServerMetrics
from llmbench.engine.serving.profile_routes import add_profile_routes
from llmbench.engine.serving.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from llmbench.engine.serving.responses import (
    EventStreamResponse,
    Shape,
    error_body,
    event_stream,
    whole_response,
)
from llmbench.engine.serving.tokenizer import TextTokenizer, announce_chat_template, load_tokenizer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

logger = logging.getLogger(__name__)

CLIENT_CLOSED = 499  # nginx's status for a client that left before its response: nobody reads it
PROFILE_DIR = "runs/serve-profiles"  # where POST /stop_profile writes its traces unless told


class ServerState:
    """What the routes share: the engine loop, the tokenizer, the metrics and the served model name."""

    def __init__(
        self, config: EngineConfig, max_body_bytes: int | None = None, profile_dir: str | None = None
    ):
        """max_body_bytes: a larger request body is a 413 (None: room for max_model_len tokens);
        profile_dir: where a profile window's trace goes (None: PROFILE_DIR)."""
        self.metrics = ServerMetrics(served_model_name(config))
        self.engine = EngineLoop(config, self.metrics.observe_steps)
        try:
            self.tokenizer: TextTokenizer = load_tokenizer(config.model, self.engine.executor.shape)
            announce_chat_template(self.tokenizer)
        except BaseException:
            self.engine.shutdown()
            raise
        self.model = self.metrics.model
        self.max_model_len = self.engine.executor.max_model_len
        self.max_body_bytes = max_body_bytes or default_max_body_bytes(self.max_model_len)
        self.profile_dir = Path(profile_dir or PROFILE_DIR)
        self.metrics.num_blocks = self.engine.executor.num_blocks
        self.metrics.count_in_flight(lambda: self.engine.num_in_flight)


def served_model_name(config: EngineConfig) -> str:
    return Path(config.model.path).name if config.model.path else str(config.model.preset)


def build_app(state: ServerState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.engine.start()
        yield
        state.engine.shutdown()

    app = FastAPI(title="llmbench serve", lifespan=lifespan)
    app.state.server = state
    app.add_middleware(BodyLimit, max_bytes=state.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        problems = [_validation_problem(err) for err in e.errors()]
        return JSONResponse(error_body("; ".join(problems[:3]), 400), status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(e.detail), e.status_code, "HTTPError"), status_code=e.status_code)

    @app.get("/health")
    async def health() -> Response:
        if state.engine.dead is not None:
            return _error(state.engine.dead, 503)
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": state.model, "object": "model", "created": 0, "owned_by": "llmbench"}
        return {
            "object": "list",
            "data": [
                {
                    **card,
                    "root": state.model,
                    "max_model_len": state.max_model_len,
                    # llmbench's own: which chat template renders chat requests ("fallback": none found)
                    "chat_template": state.tokenizer.chat_template_source,
                }
            ],
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        """vLLM's and SGLang's: forget every cached prefix, so a benchmark trial starts cold."""
        try:
            state.engine.reset_prefix_cache()
        except EngineDeadError as e:
            return _error(str(e), 503)
        return Response(status_code=200)

    add_profile_routes(app, state.engine, state.profile_dir)

    @app.post("/step_records/drain")
    async def drain_step_records() -> Response:
        """llmbench's own: the engine's step records since the last call, as msgpack (`backend.type:
        server` reads them, so a run through HTTP has the in-process run's step figures)."""
        try:
            records = await state.engine.drain_step_records()
        except EngineDeadError as e:
            return _error(str(e), 503)
        return Response(msgspec.msgpack.encode(records), media_type="application/msgpack")

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest, request: Request) -> Response:
        if (body.prompt is None) == (body.messages is None):
            return _error("give either prompt or messages", 400)
        if body.messages is not None:
            try:
                tokens = await off_the_loop(request, inputs.chat_prompt, body.messages, state.tokenizer)
            except inputs.BadRequest as e:
                return _error(str(e), 400)
        else:
            encode = state.tokenizer.encode
            tokens = await off_the_loop(request, encode, body.prompt, body.add_special_tokens)
        return JSONResponse({"tokens": tokens, "count": len(tokens), "max_model_len": state.max_model_len})

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest, request: Request) -> Response:
        bad = [t for t in body.tokens if t >= state.tokenizer.vocab_size]
        if bad:
            return _error(
                f"tokens: {bad[0]} is outside the vocabulary [0, {state.tokenizer.vocab_size})", 400
            )
        return JSONResponse({"prompt": await off_the_loop(request, state.tokenizer.decode, body.tokens)})

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await _generate(state, body, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await _generate(state, body, request, chat=True)

    return app


async def _generate(
    state: ServerState, body: CompletionRequest | ChatCompletionRequest, request: Request, chat: bool
) -> Response:
    if body.model is not None and body.model != state.model:
        return _error(f"the model `{body.model}` does not exist (this server serves `{state.model}`)", 404)
    vocab, tokenizer, max_model_len = state.tokenizer.vocab_size, state.tokenizer, state.max_model_len
    try:
        if chat:
            ids = await off_the_loop(request, inputs.chat_prompt, body.messages, tokenizer, max_model_len)
            prompts = [ids]
            max_tokens = body.max_completion_tokens or body.max_tokens
        else:
            prompts = await off_the_loop(request, inputs.completion_prompts, body, tokenizer, max_model_len)
            max_tokens = body.max_tokens
        params = inputs.sampling_params(body, prompts, max_model_len, vocab, max_tokens)
    except inputs.BadRequest as e:
        return _error(str(e), 400)
    prefix = "chatcmpl" if chat else "cmpl"
    stop = inputs.stop_strings(body)
    generation = Generation(state.engine, state.tokenizer, state.metrics, prompts, params, stop, prefix)
    shape = Shape(chat, state.model, body.return_token_ids)
    deltas = generation.deltas(request)
    streaming = False
    try:
        generation.start()
        if not body.stream:
            return JSONResponse(await whole_response(shape, generation, deltas))
        # the first output before the headers: an engine rejection can still be a 400
        first = await anext(deltas)
        streaming = True
    except RequestRejected as e:
        return _error(str(e), 400)
    except EngineDeadError as e:
        return _error(str(e), 503)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED)
    finally:
        if not streaming:  # whatever is left in the engine has nobody to go to
            generation.abort()
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    return EventStreamResponse(
        event_stream(shape, generation, first, deltas, include_usage), media_type="text/event-stream"
    )


def _validation_problem(error: dict) -> str:
    if error["type"] == "json_invalid":
        return f"invalid JSON at position {error['loc'][-1]}: {error.get('ctx', {}).get('error', '')}"
    return f"{'.'.join(str(p) for p in error['loc'][1:]) or 'body'}: {error['msg']}"


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse(error_body(message, status), status_code=status)


class AddressError(Exception):
    """The address to serve on cannot be bound: another program holds the port, or the host is not
    this machine's."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one); binding first lets a caller learn the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class StreamEndingServer(uvicorn.Server):
    """uvicorn's server, ending every request in flight with an error as it starts shutting down
    (Ctrl-C, SIGTERM): uvicorn waits for open responses to finish, and a stream of 1,500 tokens held
    the exit for as long as it ran."""

    def __init__(self, config: uvicorn.Config, engine: EngineLoop):
        super().__init__(config)
        self.engine = engine

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.engine.stop_streams("the server is shutting down")
        await super().shutdown(sockets)


def make_server(app: FastAPI, log_level: str = "warning") -> uvicorn.Server:
    # no access log: a line per request is CPU the engine's comparison should not pay (vLLM's
    # benchmarks run with it off too)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_keep_alive=30)
    return StreamEndingServer(config, app.state.server.engine)


def serve(
    config: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_body_bytes: int | None = None,
    profile_dir: str | None = None,
) -> None:
    """Check the model's settings, bind the address, load the model, then serve until interrupted.
    ValueError: unusable model settings; AddressError: the address cannot be bound."""
    # what can be checked without the weights goes first: a wrong preset on a taken port is the preset
    resolve_max_model_len(config.max_model_len, model_shape(config.model))
    try:
        sock = bind_socket(host, port)
    except OSError as e:
        raise AddressError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    state = ServerState(config, max_body_bytes, profile_dir)
    # the server's own garbage collection over 512 streams of 256 tokens on the 2-core CPU: 0.8-1.0 s
    # (gen-2 collections of backlogged outputs, 40% of its CPU) -> 0.2 s (benchmarks/serving_cpu.py)
    freeze_heap()
    logger.info("serving %s on http://%s:%d/v1", state.model, host, sock.getsockname()[1])
    make_server(build_app(state), "info").run(sockets=[sock])
