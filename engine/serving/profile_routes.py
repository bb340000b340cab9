"""POST /start_profile and /stop_profile, the endpoints vLLM's and SGLang's servers take: the engine
profiles its steps in between (engine/observe/profiler.py), in the process that runs them, the split core's
included. Each window's torch trace is a file of its own in the server's profile directory
(`serve.profile_dir`); under nsys the window is the capture range instead."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from llmbench.engine.observe.profiler import ProfileAnswer
from llmbench.engine.serving.engine_loop import EngineDeadError, EngineLoop
from llmbench.engine.serving.responses import error_body


def add_profile_routes(app: FastAPI, engine: EngineLoop, profile_dir: Path) -> None:
    windows = itertools.count(1)

    @app.post("/start_profile")
    async def start_profile() -> JSONResponse:
        """200 once the engine profiles from its next step; 409 when a window is open already."""
        trace = profile_dir.resolve() / f"trace-{time.strftime('%Y%m%dT%H%M%S')}-{next(windows)}.json"
        return await _answer(engine.start_profile(str(trace)))

    @app.post("/stop_profile")
    async def stop_profile() -> JSONResponse:
        """200 with the trace written (`trace`: its path on the server); 409 when none was started."""
        return await _answer(engine.stop_profile())


async def _answer(asked) -> JSONResponse:
    try:
        answer: ProfileAnswer = await asked
    except EngineDeadError as e:
        return JSONResponse(error_body(str(e), 503), status_code=503)
    if answer.status != 200:
        return JSONResponse(error_body(answer.message, answer.status), status_code=answer.status)
    body = {"message": answer.message} | ({"trace": answer.trace} if answer.trace else {})
    return JSONResponse(body)
