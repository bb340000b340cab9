"""What a run tells whoever shows its progress. The run and the studies are handed such an object and
never import a display: the command line's bar (cli/console.py's RunProgress) is one."""

from __future__ import annotations

from typing import Protocol

from llmbench.results.records import RequestRecord


class Progress(Protocol):
    def phase(self, label: str, total: int) -> None:
        """A phase of `total` requests begins: the warm-up or a timed trial."""

    def request_done(self, record: RequestRecord) -> None:
        """A request of the phase ended, served or failed."""
