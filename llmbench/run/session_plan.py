"""Planning a phase's sessions: the turns of each conversation, from ShareGPT's conversations or
synthetic lengths, cut where the history would no longer fit the model, and the think times.

Synthetic turns draw each user turn's length from workload.input and each answer's from
workload.output; a shared prefix (workload.prefix) opens a conversation's first turn. The history's
length is planned with full-length answers, so no turn of a kept session can outgrow max_model_len."""

from __future__ import annotations

import dataclasses

import numpy as np

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import RunConfig
from llmbench.run.conversations import Conversation, load_conversations
from llmbench.run.sessions import Session, Sessions, Turn
from llmbench.run.workload import (
    WorkloadError,
    arrival_times,
    check_token_budget,
    sample_lengths,
    shared_prefixes,
    synthetic_tokens,
)

# stream ids of their own, apart from workload.py's and the traces'
_USER_LENGTHS, _ANSWER_LENGTHS, _USER_TOKENS, _ANSWER_TOKENS, _THINK, _STARTS = range(24, 30)


def session_workload(config: RunConfig, info: ModelInfo) -> tuple[Sessions, Sessions]:
    """The warm-up sessions, all starting at once, and the timed ones, starting on the arrival process."""
    wl = config.workload
    conversations = None
    if wl.dataset.type == "sharegpt":
        conversations = load_conversations(config, info, wl.num_requests + wl.warmup_requests)
    n = wl.num_requests
    starts = arrival_times(wl.arrival, n, np.random.default_rng([wl.seed, 0, _STARTS]))
    prefixes = shared_prefixes(config, info)
    timed = plan_sessions(config, info, starts, 0, "", prefixes, conversations and conversations[:n])
    rest = conversations and conversations[n : n + wl.warmup_requests]
    warmup = plan_sessions(config, info, np.zeros(wl.warmup_requests), 1, "warmup-", prefixes, rest)
    return warmup, timed


def plan_sessions(
    config: RunConfig,
    info: ModelInfo,
    starts: np.ndarray,
    phase: int,
    id_prefix: str,
    prefixes: list[list[int]],
    conversations: list[Conversation] | None = None,
) -> Sessions:
    """One session per start time; `conversations` (ShareGPT's) give their turns, else synthetic ones."""
    wl = config.workload
    n, turns = len(starts), wl.session.turns

    def rng(purpose: int) -> np.random.Generator:
        return np.random.default_rng([wl.seed, phase, purpose])

    sampled = sample_lengths(wl.output, n * turns, rng(_ANSWER_LENGTHS))
    if conversations is None:
        users = sample_lengths(wl.input, n * turns, rng(_USER_LENGTHS))
        check_token_budget(sum(users) + sum(sampled))  # the answers are drawn too, as histories
        user_rng, answer_rng = rng(_USER_TOKENS), rng(_ANSWER_TOKENS)
        conversations = [
            [(synthetic_tokens(users[i * turns + k], info, user_rng), []) for k in range(turns)]
            for i in range(n)
        ]
    else:
        answer_rng = rng(_ANSWER_TOKENS)
    from_dataset = wl.dataset.type == "sharegpt" and wl.dataset.output_lengths_from_dataset
    think_rng = rng(_THINK)
    sessions = []
    for i, (start, conversation) in enumerate(zip(starts, conversations, strict=True)):
        planned = []
        for k, (user, answer) in enumerate(conversation):
            output_len = len(answer) if from_dataset else sampled[i * turns + k]
            if len(answer) < output_len:  # a synthetic answer, or a dataset's shorter than asked for
                answer = answer + synthetic_tokens(output_len - len(answer), info, answer_rng)
            think = _think_time(config, think_rng) if k else 0.0
            planned.append(Turn(user, output_len, answer, think))
        if prefixes:
            opening = prefixes[i % len(prefixes)] + planned[0].user_tokens
            planned[0] = dataclasses.replace(planned[0], user_tokens=opening)
        sessions.append(Session(float(start), _fitting(planned, info, i)))
    return Sessions(sessions, id_prefix, info.vocab_size)


def _think_time(config: RunConfig, rng: np.random.Generator) -> float:
    session = config.workload.session
    if session.think_time_dist == "exponential":
        return float(rng.exponential(session.think_time_s))
    return session.think_time_s


def _fitting(turns: list[Turn], info: ModelInfo, index: int) -> list[Turn]:
    """The leading turns whose history, prompt and answer, fits max_model_len."""
    kept, length = [], 0
    for turn in turns:
        length += len(turn.user_tokens)
        if length + turn.output_len > info.max_model_len:
            break
        kept.append(turn)
        length += turn.output_len
    if not kept:
        raise WorkloadError(
            f"workload: session {index}'s first turn needs {length + turns[0].output_len} tokens, more "
            f"than max_model_len={info.max_model_len}; lower the input/output lengths or raise "
            "engine.max_model_len"
        )
    return kept
