"""Preflight: before any of the load, `GET models` and one small streamed request in the run's own form
(endpoint, prompt format, stream_options), so a setting the server cannot take stops the run at once
instead of failing every request of it.

The base URL is taken with or without its `/v1` (`http://host:8000`, as GuideLLM and `vllm bench
serve --base-url` take it, finds `http://host:8000/v1`). Every refusal stops the run with one line
naming the setting to change (a ValueError: exit code 2 at the CLI): a 404 (backend.url or
backend.endpoint), a model the server does not serve (backend.model, backend.models), vLLM's ignore_eos and
min_tokens refused (workload.ignore_eos), token-id prompts refused (backend.prompt_format),
stream_options refused (backend.include_usage), a key refused (backend.api_key_env), a prefix-cache reset
refused (backend.reset_prefix_cache). Nothing is
switched behind the user's back: text prompts keep their lengths only with the served model's
tokenizer, which only the user can name, and without ignore_eos the model chooses the output lengths.
A refusal is told apart by asking again with that one setting changed: at most four test requests,
each for one token."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from llmbench.backends.cache_reset import reset_prefix_cache, server_root
from llmbench.backends.openai_request import RequestForm, auth_headers
from llmbench.backends.openai_stream import RequestFailed, StreamReader, error_message
from llmbench.config.schema import RunConfig
from llmbench.engine.request import SamplingParams

logger = logging.getLogger(__name__)

PROBE_TOKENS = list(range(100, 108))  # ids every vocabulary has
PROBE_TEXT = "Hello"
PROBE_TIMEOUT_S = 120.0


class PreflightError(ValueError):
    """The server cannot take the run as configured; the message names the setting to change."""


@dataclass(frozen=True)
class Answer:
    status: int  # 0: no HTTP answer (connection refused, timeout)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.message


def preflight(config: RunConfig) -> str:
    """The base URL the run streams to, once the server has taken a test request in the run's form;
    PreflightError (one line naming the setting) when it cannot."""
    import httpx

    backend, workload = config.backend, config.workload
    timeout = workload.request_timeout_s or PROBE_TIMEOUT_S
    url = backend.url.rstrip("/")
    with httpx.Client(headers=auth_headers(backend.api_key_env), timeout=timeout) as client:
        mix = [m.name for m in backend.models or ()]
        base, served = _find_api(client, url, backend.model, mix)
        model = backend.model or (mix[0] if mix else served[0])
        form = RequestForm(model, backend.endpoint == "chat", workload.ignore_eos, backend.include_usage)
        text = backend.endpoint == "chat" or backend.prompt_format == "text"
        prompt = PROBE_TEXT if text else PROBE_TOKENS
        params = SamplingParams(
            max_tokens=1,
            temperature=workload.temperature,
            top_k=workload.top_k,
            top_p=workload.top_p,
            ignore_eos=workload.ignore_eos,
        )
        candidates = [base] if base else [url] if url.endswith("/v1") else [url, url + "/v1"]
        for base in candidates:  # a server that lists no models: the first base that has the endpoint
            answer = _probe(client, base + form.path, form.body(prompt, params))
            if answer.status != 404:
                break
        if answer.ok:
            logger.info("preflight: %s%s streams %s", base, form.path, model)
            if backend.reset_prefix_cache:  # a server that cannot reset stops the run before its load
                reset_prefix_cache(server_root(base), client.headers)
            return base

        def takes(changed: RequestForm, changed_prompt) -> bool:
            return _probe(client, base + form.path, changed.body(changed_prompt, params)).ok

        raise PreflightError(_diagnose(answer, base + form.path, config, served, takes, form, prompt))


def _find_api(client, url: str, model: str | None, mix: list[str]) -> tuple[str | None, list[str]]:
    """The base URL whose GET models lists the served models, and their names; (None, []) when none
    does but backend.model or backend.models names them (a server need not list its models)."""
    import httpx

    candidates = [url] if url.endswith("/v1") else [url, url + "/v1"]
    failures = []
    for base in candidates:
        try:
            response = client.get(base + "/models")
            ids = [card["id"] for card in response.json()["data"]] if response.status_code == 200 else []
        except httpx.InvalidURL as e:
            raise PreflightError(f"backend.url: {e}") from None
        except httpx.TransportError as e:
            raise PreflightError(f"backend.url: cannot connect to {url}: {type(e).__name__}: {e}") from None
        except (ValueError, KeyError, TypeError):
            ids = []
        if ids:
            setting, unserved = "backend.model", [model] if model is not None and model not in ids else []
            if mix:  # each adapter of a mix is listed beside its base model, as vLLM lists --lora-modules
                setting, unserved = "backend.models", [name for name in mix if name not in ids]
            if unserved:
                raise PreflightError(
                    f"{setting}: {base} serves no model named {', '.join(map(repr, unserved))} (it serves "
                    f"{', '.join(ids[:8])})"
                )
            return base, ids
        failures.append(f"GET {base}/models: HTTP {response.status_code}")
    if model is None and not mix:
        raise PreflightError(
            f"backend.url: no model list at {url} ({'; '.join(failures)}): set backend.url to the server's "
            "base URL (the part before /models), or name backend.model if the server lists no models"
        )
    return None, []


def _probe(client, endpoint: str, body: dict) -> Answer:
    """Stream one request to its end: Answer(200) when it is an OpenAI completion stream."""
    import httpx

    try:
        with client.stream("POST", endpoint, json=body) as response:
            if response.status_code >= 400:
                response.read()
                return Answer(response.status_code, error_message(response.text))
            reader = StreamReader("preflight", "messages" in body)
            for line in response.iter_lines():
                data = line[5:].strip() if line.startswith("data:") else None
                if data == "[DONE]":
                    break
                if data:
                    reader.feed(data, 0.0)
            reader.finished(0.0)
    except RequestFailed as e:
        return Answer(200, f"not an OpenAI completion stream: {e}")
    except httpx.TimeoutException:
        return Answer(0, "no answer within the timeout")
    except httpx.TransportError as e:
        return Answer(0, f"{type(e).__name__}: {e}")
    return Answer(response.status_code)


def _diagnose(
    answer: Answer, endpoint: str, config: RunConfig, served: list[str], takes, form, prompt
) -> str:
    """The one line that names the setting to change; `takes(form, prompt)`: whether the server takes
    the test request with that one thing changed."""
    said = f"POST {endpoint} answered HTTP {answer.status}: {answer.message}"
    if answer.status == 0:
        return f"backend.url: POST {endpoint}: {answer.message}"
    if answer.status == 200:
        return f"backend.url: {endpoint} is {answer.message}"
    if answer.status in (401, 403):
        return f"backend.api_key_env: {said}"
    if answer.status == 404:
        if not served and "model" in answer.message.lower():
            return f"backend.model: {said}"
        return f"backend.endpoint: {said}; set backend.url and backend.endpoint to an API the server serves"
    if answer.status < 500:
        # asked again only when the refusal names them (transformers serve's 422 lists the unexpected fields)
        named = "ignore_eos" in answer.message or "min_tokens" in answer.message
        if form.ignore_eos and named and takes(replace(form, ignore_eos=False), prompt):
            return (
                f"workload.ignore_eos: the server refuses vLLM's ignore_eos and min_tokens ({said}); set "
                "workload.ignore_eos: false (output lengths are then the server's choice: a request ends "
                "at the model's end-of-sequence token or at its output length, whichever comes first)"
            )
        if isinstance(prompt, list) and takes(form, PROBE_TEXT):
            return (
                f"backend.prompt_format: the server refuses token-id prompts ({said}); set "
                "backend.prompt_format: text, with model.tokenizer the served model's tokenizer.json"
            )
        if form.include_usage and takes(replace(form, include_usage=False), prompt):
            return (
                f"backend.include_usage: the server refuses stream_options ({said}); set "
                "backend.include_usage: false (output tokens are then counted from the chunks)"
            )
    return f"backend.url: {said}"
