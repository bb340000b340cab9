"""Multi-turn sessions (workload.session.turns > 1): each conversation's next turn is sent when the
previous answer has finished plus a think time, with the whole history as its prompt: every earlier
user turn and answer, then the new user turn. A prefix cache then serves the history, as in chat
serving. Sessions start on the arrival process, one a `num_requests`; a session whose turn fails ends
there, as a user would give up on a broken conversation.

The answer in the history is what the backend generated when it returns token ids (the bundled
engine, our server); otherwise the planned answer (the dataset's, or synthetic tokens) cut to the
length that came back. The history carries no chat template: turns are plain token runs."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from llmbench.results.records import RequestRecord
from llmbench.run.workload import WorkloadRequest


@dataclass(frozen=True)
class Turn:
    user_tokens: list[int]  # what this turn adds to the history before the answer
    output_len: int
    answer_tokens: list[int]  # stands in for the answer when the backend returns no token ids
    think_s: float = 0.0  # the pause between the previous answer and this turn (the first: 0)


@dataclass(frozen=True)
class Session:
    start: float  # the first turn's arrival, seconds after the phase starts
    turns: list[Turn]


class Sessions:
    """One phase's planned conversations. len() counts their turns; queue() hands the runner its
    requests as they come due."""

    def __init__(self, sessions: list[Session], id_prefix: str, vocab_size: int):
        self.sessions, self.id_prefix, self.vocab_size = sessions, id_prefix, vocab_size

    def __len__(self) -> int:
        return sum(len(session.turns) for session in self.sessions)

    def queue(self) -> SessionQueue:
        return SessionQueue(self)


class SessionQueue:
    """The requests due next, earliest first, read as the runner reads a deque of single-turn requests
    (`queue[0]`, `popleft()`, `len()`); finished() puts each finished turn's successor in it."""

    def __init__(self, plan: Sessions):
        self.plan = plan
        self._heap: list[tuple[float, int, WorkloadRequest]] = []
        self._order = itertools.count()  # equal times leave in the order they were queued
        self._sent: dict[str, tuple[int, int, list[int]]] = {}  # request id -> (session, turn, prompt)
        for index, session in enumerate(plan.sessions):
            self._push(index, 0, session.turns[0].user_tokens, session.start)

    def __len__(self) -> int:
        return len(self._heap)

    def __getitem__(self, index: int) -> WorkloadRequest:
        if index != 0:
            raise IndexError("only the next request is known")
        return self._heap[0][2]

    def popleft(self) -> WorkloadRequest:
        return heapq.heappop(self._heap)[2]

    def finished(self, records: Iterable[RequestRecord], now: float, release: bool) -> None:
        """Queue the next turn of each session whose turn ended well; `now` is seconds into the phase.
        `release`: drop each record's answer tokens once the history holds them (rows keep none)."""
        for record in records:
            sent = self._sent.pop(record.id, None)
            if sent is None:
                continue
            index, turn, prompt = sent
            turns = self.plan.sessions[index].turns
            if record.succeeded and turn + 1 < len(turns):
                following = turns[turn + 1]
                history = prompt + self._answer(record, turns[turn]) + following.user_tokens
                self._push(index, turn + 1, history, now + following.think_s)
            if release:
                record.output_token_ids = None

    def _answer(self, record: RequestRecord, turn: Turn) -> list[int]:
        ids = record.output_token_ids
        if ids and len(ids) == record.output_len and all(0 <= t < self.plan.vocab_size for t in ids):
            return list(ids)
        return turn.answer_tokens[: record.output_len]

    def _push(self, index: int, turn: int, prompt: list[int], at: float) -> None:
        request_id = f"{self.plan.id_prefix}{index}.{turn + 1}"
        output_len = self.plan.sessions[index].turns[turn].output_len
        request = WorkloadRequest(request_id, at, prompt, output_len, session=index, turn=turn + 1)
        self._sent[request_id] = (index, turn, prompt)
        heapq.heappush(self._heap, (at, next(self._order), request))
