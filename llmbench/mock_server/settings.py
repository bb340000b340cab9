"""What the mock serves and how fast: one frozen object, given as command-line flags to its process."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

REASONING_FIELDS = ("reasoning_content", "reasoning")  # the delta keys vLLM has used, old and new


@dataclass(frozen=True)
class MockSettings:
    ttft_ms: float = 50.0  # request received -> first chunk due
    itl_ms: float = 10.0  # per output token: chunks of k tokens are due k x itl_ms apart
    output_tokens: int = 128  # a request's max_tokens, when smaller, wins
    tokens_per_chunk: int = 1
    model: str = "mock"
    # names served beside `model`, comma-separated, as vLLM serves --lora-modules: listed, and taken
    lora_modules: str = ""
    prefix: str = "/v1"  # the API answers under this path only (another path: 404, as a wrong base URL)
    text_only: bool = False  # token-id prompts refused with HTTP 400, as TGI and GuideLLM's mock do
    no_stream_options: bool = False  # a body with stream_options refused with HTTP 400, as older servers do
    # fields OpenAI's API lacks (vLLM's ignore_eos, min_tokens, top_k) refused with HTTP 422, as
    # transformers serve refuses them
    openai_fields_only: bool = False
    max_model_len: int = 4096  # listed in the model card, as vLLM lists it
    # a reasoning model's chat answer: its first reasoning_tokens output tokens stream as reasoning, in
    # the delta field reasoning_field (DeepSeek's reasoning_content, vLLM's until late 2025, or
    # reasoning), the rest as content; usage counts them in completion_tokens_details.reasoning_tokens
    reasoning_tokens: int = 0
    reasoning_field: str = "reasoning_content"
    # speculative decoding: each chunk counts as one draft of spec_draft_tokens proposed tokens whose
    # tokens past the first were accepted, in vLLM's counters at GET /metrics (0: no /metrics, a 404)
    spec_draft_tokens: int = 0

    def __post_init__(self) -> None:
        if self.ttft_ms < 0 or self.itl_ms < 0:
            raise ValueError("ttft_ms and itl_ms: expected numbers >= 0")
        if self.output_tokens < 1 or self.tokens_per_chunk < 1:
            raise ValueError("output_tokens and tokens_per_chunk: expected integers >= 1")
        if self.reasoning_tokens < 0:
            raise ValueError("reasoning_tokens: expected an integer >= 0")
        if self.reasoning_field not in REASONING_FIELDS:
            raise ValueError(f"reasoning_field: expected one of {', '.join(REASONING_FIELDS)}")
        if self.spec_draft_tokens and self.spec_draft_tokens < self.tokens_per_chunk - 1:
            raise ValueError("spec_draft_tokens: a chunk's accepted tokens (tokens_per_chunk - 1) exceed it")
        if not self.prefix.startswith("/") or self.prefix.endswith("/") and self.prefix != "/":
            raise ValueError(f"prefix: expected a path such as /v1, got {self.prefix!r}")

    @property
    def served(self) -> list[str]:
        """Every model name a request may ask for: `model`, then the adapters."""
        return [self.model, *(name.strip() for name in self.lora_modules.split(",") if name.strip())]

    def to_args(self) -> list[str]:
        """The flags that rebuild these settings in the mock's process (from_args)."""
        args = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                args += [flag] if value else []
            else:
                args += [flag, str(value)]
        return args

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            if f.type == "bool":
                parser.add_argument(flag, action="store_true")
            else:
                kind = {"float": float, "int": int}.get(f.type, str)
                parser.add_argument(flag, type=kind, default=f.default)

    @classmethod
    def from_args(cls, namespace: argparse.Namespace) -> MockSettings:
        return cls(**{f.name: getattr(namespace, f.name) for f in fields(cls)})
