"""The `llmbench` command: it parses arguments and delegates to the toolkit (app.py holds the commands)."""

from llmbench.cli.app import app

__all__ = ["app"]
