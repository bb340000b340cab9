"""Backends: the bundled engine in process, Hugging Face transformers, and OpenAI-compatible HTTP
servers (any, or `llmbench serve` started for the run). base.py holds what they share."""
