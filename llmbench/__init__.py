"""llmbench: benchmark and profile LLM inference with a bundled, switchable engine."""

__version__ = "0.1.0"
