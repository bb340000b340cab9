"""The HTTP request bodies, as OpenAI's API and vLLM's extensions define them (the fields this server
implements). Unknown fields are ignored, as vLLM does (OpenAI itself answers 400): clients written for
other servers send extras. Everything else that does not fit is a 400 with the field named."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

# msgpack carries 64-bit integers: anything wider would fail between the server and its engine core
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
TokenId = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
Number = Annotated[float, Field(allow_inf_nan=False)]


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(OpenAIModel):
    include_usage: bool = False  # a last chunk with `usage` and no choices


class SamplingRequest(OpenAIModel):
    """What completions and chat completions share."""

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[Number, Field(ge=0)] = 1.0
    top_p: Annotated[Number, Field(gt=0, le=1)] = 1.0
    top_k: Annotated[Int64, Field(ge=-1)] = -1  # vLLM: -1 (or 0) keeps every token
    seed: Int64 | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] = []
    ignore_eos: bool = False
    min_tokens: Annotated[int, Field(ge=0)] = 0
    n: Annotated[int, Field(ge=1)] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False  # vLLM: each choice lists its token ids
    user: str | None = None


class CompletionRequest(SamplingRequest):
    # text, token ids, or a list of either: one choice per prompt
    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]
    echo: bool = False
    logprobs: Annotated[int, Field(ge=0)] | None = None
    best_of: Annotated[int, Field(ge=1)] | None = None
    suffix: str | None = None


class TextPart(OpenAIModel):
    type: Literal["text"]
    text: str


class ChatMessage(OpenAIModel):
    role: str
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(SamplingRequest):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None  # OpenAI's newer name
    logprobs: bool = False


class TokenizeRequest(OpenAIModel):
    """vLLM's /tokenize: a prompt, or chat messages rendered with the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(OpenAIModel):
    model: str | None = None
    tokens: list[TokenId]
