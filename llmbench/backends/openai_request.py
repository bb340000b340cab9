"""The body of a streamed completion request as the run's settings shape it: the one form the load and the
preflight's test request share."""

from __future__ import annotations

import os
from dataclasses import dataclass

from llmbench.engine.request import SamplingParams


@dataclass(frozen=True)
class RequestForm:
    model: str
    chat: bool  # backend.endpoint chat: messages, not a prompt
    ignore_eos: bool
    include_usage: bool = True  # ask for the usage chunk (stream_options), which gives the output tokens
    token_ids: bool = False  # ask for each chunk's token ids (return_token_ids: ours and recent vLLM take it)

    @property
    def path(self) -> str:
        return "/chat/completions" if self.chat else "/completions"

    def body(self, prompt: list[int] | str, params: SamplingParams, model: str | None = None) -> dict:
        """`prompt`: token ids, or text (the chat endpoint takes only text); `model`: another served
        model than the form's (one of backend.models)."""
        body = {
            "model": model or self.model,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stream": True,
        }
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos:  # vLLM's and SGLang's extension; OpenAI itself has no such parameter
            body["ignore_eos"] = True
            # llama.cpp's server ignores ignore_eos but stops no earlier than min_tokens (vLLM takes it too):
            # every server then produces the lengths the workload asked for
            body["min_tokens"] = params.max_tokens
        if params.top_k:  # the same servers' extension
            body["top_k"] = params.top_k
        if self.token_ids:
            body["return_token_ids"] = True
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body


def auth_headers(api_key_env: str | None) -> dict[str, str]:
    """The Authorization header with the key from the environment variable backend.api_key_env names."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise ValueError(f"backend.api_key_env: no environment variable {api_key_env} set")
    return {"Authorization": f"Bearer {key}"}
