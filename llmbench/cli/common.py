"""What the `llmbench` commands share: their common options, the mapping from what a command raises to
its exit code (0 success, 1 failure, 2 bad config or usage, 130 interrupted), and how results reach
the terminal and disk."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llmbench.cli.console import console
from llmbench.results.files import write_atomic

logger = logging.getLogger("llmbench")

EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
MAX_MESSAGE = 500

SetOption = Annotated[
    list[str] | None, typer.Option("--set", help="Override a config value: key.path=value (repeatable)")
]
NoReportOption = Annotated[bool, typer.Option("--no-report", help="Skip report.html and the plots")]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging")]


def usage_error(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print a one-line error and return the exit to raise (2 unless told). A message quoting a huge
    value is cut: the value is in the user's file already."""
    message = " ".join(message.split())
    if len(message) > MAX_MESSAGE:
        message = f"{message[:MAX_MESSAGE]}... ({len(message):,} characters)"
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@contextmanager
def exit_codes(
    user_errors: tuple[type[Exception], ...],
    prefix: str = "",
    failure: str | Callable[[], str] | None = None,
    interruptible: bool = False,
    breakdowns: tuple[type[Exception], ...] = (),
) -> Iterator[None]:
    """Turn what the block raises into an exit: a user error is one line (after `prefix`) and exit 2;
    a breakdown (the machine failed, not the input: a rank that died) one line and exit 1; with
    `interruptible`, Ctrl-C exits 130; with `failure` (a message, or a function that words it when the
    failure happens), any other exception is logged with its traceback under that message and exits
    1. Anything else propagates: a bug shows its traceback."""
    try:
        yield
    except user_errors as e:
        raise usage_error(f"{prefix}{e}") from None
    except breakdowns as e:
        raise usage_error(f"{prefix}{e}", EXIT_FAILURE) from None
    except KeyboardInterrupt:
        if not interruptible:
            raise
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception:
        if failure is None:
            raise
        logger.exception(failure() if callable(failure) else failure)
        raise typer.Exit(EXIT_FAILURE) from None


def print_wide(table: Table) -> None:
    """Print a table at its natural width: CI logs report an 80-column console, and folded numbers
    cannot be read."""
    natural = console.measure(table, options=console.options.update_width(1000)).maximum
    Console(width=max(console.width, natural)).print(table)


def save_json(path: Path, data: dict[str, Any]) -> None:
    """Write a command's result with the command line that made it, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["llmbench", *sys.argv[1:]])
    write_atomic(path, json.dumps({"command": command, **data}, indent=2) + "\n")
    console.print(f"results: {path}", highlight=False)


def show_report(run_dir: Path) -> None:
    """Render report.html for a run (or ablation) directory into it and print where it went."""
    from llmbench.report import write_report

    console.print(f"report: {write_report([run_dir], run_dir)}", highlight=False)
