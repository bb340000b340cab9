"""What add_request refuses before a request enters the engine: a malformed request (an error
output) and one that could never run here (a rejection)."""

from __future__ import annotations

import operator

from llmbench.engine.request import SamplingParams
from llmbench.engine.scheduling.scheduler import Scheduler


def input_problem(prompt_token_ids: list[int], params: SamplingParams, vocab_size: int) -> str | None:
    """Why the request is malformed, or None."""
    if not isinstance(params, SamplingParams):
        return f"params must be SamplingParams, got {type(params).__name__}"
    problem = params.problem()
    if problem is not None:
        return problem
    if not isinstance(prompt_token_ids, (list, tuple)):
        return f"prompt_token_ids must be a list of integers, got {type(prompt_token_ids).__name__}"
    if not prompt_token_ids:
        return "empty prompt"
    try:
        ids = [operator.index(t) for t in prompt_token_ids]
    except TypeError:
        return "prompt token ids must be integers"
    if min(ids) < 0 or max(ids) >= vocab_size:
        return f"prompt token id outside the vocabulary [0, {vocab_size})"
    return None


def rejection(
    num_prompt_tokens: int, params: SamplingParams, max_model_len: int, scheduler: Scheduler
) -> str | None:
    """Why a well-formed request can never run within max_model_len and the KV pool, or None."""
    total = num_prompt_tokens + params.max_tokens
    if total > max_model_len:
        return (
            f"prompt ({num_prompt_tokens} tokens) + max_tokens ({params.max_tokens}) "
            f"exceeds max_model_len {max_model_len}"
        )
    block_manager = scheduler.block_manager
    needed = block_manager.blocks_for(scheduler.kv_tokens_needed(total))
    if needed > block_manager.num_blocks:
        return f"needs {needed} KV blocks, the pool has {block_manager.num_blocks}"
    return None
