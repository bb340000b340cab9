"""ShareGPT's conversations turn by turn, for multi-turn sessions: each conversation's leading
(human, gpt) pairs, up to workload.session.turns of them, tokenized with the dataset's tokenizer.

A conversation is read until its turns stop alternating human, gpt; one whose first pair is empty or
does not fit max_model_len is skipped. The order is seeded, as single-turn ShareGPT's is."""

from __future__ import annotations

import numpy as np

from llmbench.backends.base import ModelInfo
from llmbench.config.schema import RunConfig
from llmbench.run.workload import WorkloadError, load_tokenizer, read_dataset_json

_ORDER = 30  # stream id of the conversations' order

Conversation = list[tuple[list[int], list[int]]]  # (user turn, answer) token ids, in order


def load_conversations(config: RunConfig, info: ModelInfo, count: int) -> list[Conversation]:
    """The first `count` usable conversations in seeded order. Only those are tokenized: tokenizing
    every conversation of the ShareGPT file (about 10,000 with two or more turns) took 45 s on 2 cores
    before a run could start."""
    tokenizer = load_tokenizer(config)
    entries = read_dataset_json(config)
    candidates = [texts for entry in entries if (texts := _pairs(entry, config.workload.session.turns))]
    order = np.random.default_rng([config.workload.seed, 0, _ORDER]).permutation(len(candidates))
    conversations = []
    for i in order:
        if len(conversations) == count:
            break
        conversation = [
            (
                tokenizer.encode(user, add_special_tokens=k == 0).ids,
                tokenizer.encode(answer, add_special_tokens=False).ids,
            )
            for k, (user, answer) in enumerate(candidates[i])
        ]
        first_user, first_answer = conversation[0]
        if first_user and first_answer and len(first_user) + len(first_answer) <= info.max_model_len:
            conversations.append(conversation)
    bad = [
        t for turns in conversations for pair in turns for part in pair for t in part if t >= info.vocab_size
    ]
    if bad:
        raise WorkloadError(
            f"workload.dataset.tokenizer: token id {max(bad)} is outside the model's vocabulary "
            f"({info.vocab_size}); use the model's own tokenizer"
        )
    if len(conversations) < count:
        raise WorkloadError(
            f"workload.dataset.path: {len(conversations)} usable conversations, "
            f"need {count} sessions (num_requests + warmup_requests)"
        )
    return conversations


def _pairs(entry: object, most: int) -> list[tuple[str, str]]:
    """The leading (human, gpt) texts of a ShareGPT entry, at most `most` pairs."""
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    pairs: list[tuple[str, str]] = []
    if not isinstance(turns, list):
        return pairs
    for human, gpt in zip(turns[0::2], turns[1::2], strict=False):
        if len(pairs) == most or not _is_turn(human, "human") or not _is_turn(gpt, "gpt"):
            break
        pairs.append((human["value"], gpt["value"]))
    return pairs


def _is_turn(turn: object, speaker: str) -> bool:
    return isinstance(turn, dict) and turn.get("from") == speaker and isinstance(turn.get("value"), str)
