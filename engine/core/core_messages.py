"""Every message between a split engine's frontend (engine/core/core_client.py) and its core
(engine/core/core_process.py), as typed msgspec structs sent as msgpack: decoding checks each field's type,
and unlike pickle a message can only ever build these types, never run code.

frontend -> core: the EngineConfig first, then one list of commands per message (Add, Abort, Drain,
    Check, ResetPrefixCache, StartProfile, StopProfile, Shutdown), so a step's requests and aborts
    travel together.
core -> frontend: Ready once, Outputs after every step that produced any (the step's StepOutputs, its
    plain decodes as two lists), Records answering a Drain, Checked answering a Check, Profiled
    answering a StartProfile or StopProfile, Failed when the core raised."""

from __future__ import annotations

import msgspec
from llmbench.engine.config import EngineConfig
from llmbench.engine.models.shape import LlamaShape
from llmbench.engine.observe.profiler import ProfileAnswer
from llmbench.engine.observe.timing import StepRecord
from llmbench.engine.request import SamplingParams, StepOutputs

# frontend -> core


class Add(msgspec.Struct, tag=True, array_like=True):
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float


class Abort(msgspec.Struct, tag=True, array_like=True):
    request_id: str


class Drain(msgspec.Struct, tag=True, array_like=True):
    """Asks for the step records so far."""


class Check(msgspec.Struct, tag=True, array_like=True):
    """Asks the core to run engine.scheduling.check.assert_engine_empty where the scheduler and KV pool
    live."""


class ResetPrefixCache(msgspec.Struct, tag=True, array_like=True):
    """Forget every cached prefix before the commands after it."""


class StartProfile(msgspec.Struct, tag=True, array_like=True):
    """Profile the core's steps from the next on; a torch trace goes to `trace` at the stop."""

    trace: str


class StopProfile(msgspec.Struct, tag=True, array_like=True):
    pass


class Shutdown(msgspec.Struct, tag=True, array_like=True):
    pass


Command = Add | Abort | Drain | Check | ResetPrefixCache | StartProfile | StopProfile | Shutdown

# core -> frontend


class Ready(msgspec.Struct, tag=True, array_like=True):
    """What the frontend needs of the executor living in the core process."""

    shape: LlamaShape
    max_model_len: int
    num_blocks: int
    device: str


class Outputs(msgspec.Struct, tag=True, array_like=True):
    step: StepOutputs


class Records(msgspec.Struct, tag=True, array_like=True):
    records: list[StepRecord]


class Checked(msgspec.Struct, tag=True, array_like=True):
    failure: str | None  # what assert_engine_empty found wrong, None when the engine is empty


class Profiled(msgspec.Struct, tag=True, array_like=True):
    answer: ProfileAnswer


class Failed(msgspec.Struct, tag=True, array_like=True):
    error_type: str
    message: str
    traceback: str


Reply = Ready | Outputs | Records | Checked | Profiled | Failed

encoder = msgspec.msgpack.Encoder()
config_decoder = msgspec.msgpack.Decoder(EngineConfig)
command_decoder = msgspec.msgpack.Decoder(list[Command])
reply_decoder = msgspec.msgpack.Decoder(Reply)
