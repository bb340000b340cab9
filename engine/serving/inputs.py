"""What a request body becomes for the engine: prompt token ids per choice and SamplingParams, checked
against the model first, so every unusable request is a 400 with the reason instead of an engine error."""

from __future__ import annotations

from llmbench.engine.request import SamplingParams
from llmbench.engine.serving.protocol import ChatMessage, CompletionRequest, SamplingRequest
from llmbench.engine.serving.tokenizer import ChatTemplateError, TextTokenizer

# a text longer than this many characters a token of max_model_len is first tokenized in part
PREFIX_CHARS_PER_TOKEN = 8


class BadRequest(ValueError):
    """The request cannot be served as asked: a 400 with this message."""


def completion_prompts(
    body: CompletionRequest, tokenizer: TextTokenizer, max_model_len: int
) -> list[list[int]]:
    prompt = body.prompt
    texts = [prompt] if isinstance(prompt, str) else [p for p in prompt if isinstance(p, str)]
    if any(not text for text in texts):
        raise BadRequest("prompt: empty prompt")  # not a lone BOS token: an empty prompt is a client bug
    if texts:
        prompts = encode_prompts(texts, tokenizer, max_model_len, "prompt")
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [list(prompt)]
    else:
        prompts = [list(p) for p in prompt]
    if not prompts:
        raise BadRequest("prompt: empty list")
    for i, ids in enumerate(prompts):
        name = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        _check_ids(ids, tokenizer.vocab_size, name, max_model_len)
    return prompts


def chat_prompt(
    messages: list[ChatMessage], tokenizer: TextTokenizer, max_model_len: int | None = None
) -> list[int]:
    """The conversation's prompt ids; max_model_len: refuse early one far past it (None: never)."""
    try:
        text = tokenizer.render_chat([{"role": m.role, "content": m.text()} for m in messages])
    except ChatTemplateError as e:
        raise BadRequest(f"messages: {e}") from None
    if max_model_len is None:
        ids = tokenizer.encode(text, add_special_tokens=False)
    else:  # the template writes its own BOS
        ids = encode_prompts([text], tokenizer, max_model_len, "messages", add_special_tokens=False)[0]
    _check_ids(ids, tokenizer.vocab_size, "messages", max_model_len)
    return ids


def encode_prompts(
    texts: list[str],
    tokenizer: TextTokenizer,
    max_model_len: int,
    where: str,
    add_special_tokens: bool = True,
) -> list[list[int]]:
    """The texts' token ids, tokenized together (without the GIL when they are long); a BadRequest
    for one far past max_model_len after tokenizing only a part of it (a 50 MB prompt took minutes to
    tokenize whole). One just past it is refused with the others' checks (_check_ids)."""
    names = [where] if len(texts) == 1 else [f"{where}[{i}]" for i in range(len(texts))]
    for text, name in zip(texts, names, strict=True):
        _refuse_far_too_long(text, tokenizer, max_model_len, name, add_special_tokens)
    return tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)


def _refuse_far_too_long(
    text: str, tokenizer: TextTokenizer, max_model_len: int, where: str, add_special_tokens: bool
) -> None:
    """A BadRequest when a prefix of the text has more than twice max_model_len tokens: a prefix's
    tokens are the whole text's first tokens but for the word cut at its end. Each try doubles the
    prefix, so a text that passes costs at most one more tokenization of itself."""
    prefix = PREFIX_CHARS_PER_TOKEN * max_model_len
    while len(text) > prefix:
        count = len(tokenizer.encode(text[:prefix], add_special_tokens=add_special_tokens))
        if count > 2 * max_model_len:
            raise BadRequest(
                f"{where}: its first {prefix:,} characters alone are {count:,} tokens, the model's "
                f"maximum context length is {max_model_len}"
            )
        prefix *= 2


def _check_ids(ids: list[int], vocab_size: int, where: str, max_model_len: int | None) -> None:
    """A prompt's ids, as given or tokenized: not empty, in the vocabulary, shorter than the context
    (max_model_len None: any length, for /tokenize)."""
    if not ids:
        raise BadRequest(f"{where}: empty prompt")
    bad = max(ids)
    if bad >= vocab_size:
        raise BadRequest(f"{where}: token id {bad} is outside the vocabulary [0, {vocab_size})")
    if max_model_len is not None and len(ids) >= max_model_len:
        raise BadRequest(_too_long(where, len(ids), max_model_len))


def sampling_params(
    body: SamplingRequest,
    prompts: list[list[int]],
    max_model_len: int,
    vocab_size: int,
    max_tokens: int | None,
) -> SamplingParams:
    """The engine's parameters; max_tokens is the body's (under the endpoint's name), None for the
    endpoint's default: 16 for completions (OpenAI's), the rest of the context for chat (vLLM's)."""
    if body.n != 1:
        raise BadRequest(f"n: only 1 is supported, got {body.n}")
    _unsupported(body)
    longest = max(len(p) for p in prompts)  # each shorter than the context (_check_ids)
    if max_tokens is None:
        max_tokens = 16 if isinstance(body, CompletionRequest) else max_model_len - longest
    if longest + max_tokens > max_model_len:
        raise BadRequest(
            f"max_tokens: this model's maximum context length is {max_model_len} tokens, but {longest} "
            f"prompt tokens + {max_tokens} max_tokens were requested"
        )
    bad_stop = [t for t in body.stop_token_ids if t >= vocab_size]
    if bad_stop:
        raise BadRequest(f"stop_token_ids: {bad_stop[0]} is outside the vocabulary [0, {vocab_size})")
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_k=max(body.top_k, 0),
        top_p=body.top_p,
        seed=body.seed,
        ignore_eos=body.ignore_eos,
        stop_token_ids=tuple(body.stop_token_ids),
        min_tokens=body.min_tokens,
    )
    problem = params.problem()
    if problem is not None:
        raise BadRequest(problem)
    return params


def stop_strings(body: SamplingRequest) -> list[str]:
    return [body.stop] if isinstance(body.stop, str) else list(body.stop or [])


def _unsupported(body: SamplingRequest) -> None:
    if isinstance(body, CompletionRequest):
        if body.echo:
            raise BadRequest("echo: not supported")
        if body.logprobs is not None:
            raise BadRequest("logprobs: not supported")
        if body.best_of not in (None, 1):
            raise BadRequest(f"best_of: only 1 is supported, got {body.best_of}")
        if body.suffix:
            raise BadRequest("suffix: not supported")
    elif body.logprobs:
        raise BadRequest("logprobs: not supported")


def _too_long(where: str, count: int, max_model_len: int) -> str:
    return f"{where}: {count} tokens, the model's maximum context length is {max_model_len}"
