"""The command line run in-process, and what every usage error must look like: exit 2, one line on
stderr, no traceback."""

from typer.testing import CliRunner

from llmbench.cli import app


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result, start: str) -> str:
    """The error line, after checking the exit code and that it is the only thing on stderr."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {start}"), result.stderr
    return lines[0]
