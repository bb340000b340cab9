"""A few of a run's completions as text, for the report: the first SAMPLE_REQUESTS timed requests of
the first trial, their prompt and what the model wrote, shortened. Only where the model has a tokenizer
of its own (model.tokenizer, a model directory's, a GGUF's): a random-weight preset's synthetic BPE
would only spell noise.

The tokens come from each request's finished output (the engine hands over a request's whole output
there), so the per-token path of the client is untouched; a backend whose finished output carries no
token ids (an HTTP stream's) gives no samples."""

from __future__ import annotations

from collections.abc import Iterable

from llmbench.config.schema import RunConfig
from llmbench.engine.request import RequestOutput, StepOutputs
from llmbench.results.summary import Sample

SAMPLE_REQUESTS = 3
PROMPT_HEAD, PROMPT_TAIL, COMPLETION_CHARS = 160, 160, 400


class SampleCatcher:
    """Notes the sample requests as they are submitted and their tokens as they finish."""

    def __init__(self) -> None:
        self._prompts: dict[str, tuple[list[int], str | None]] = {}  # backend id -> prompt ids, text
        self._outputs: dict[str, list[int]] = {}

    @property
    def waiting(self) -> bool:
        return len(self._outputs) < len(self._prompts)

    def want(self, backend_id: str, prompt_token_ids: list[int], prompt: str | None) -> None:
        """Take this request as a sample if there is room."""
        if len(self._prompts) < SAMPLE_REQUESTS:
            self._prompts[backend_id] = (list(prompt_token_ids), prompt)

    def look(self, outputs: Iterable[RequestOutput]) -> None:
        """One poll's outputs: a finished sample's tokens are kept (plain decodes never finish one).
        One finished without tokens (an HTTP stream's, a failure) is kept too, empty, so `waiting` ends
        and the runner stops looking at every later poll's outputs."""
        for output in outputs.outputs if isinstance(outputs, StepOutputs) else outputs:
            if output.finished and output.request_id in self._prompts:
                self._outputs[output.request_id] = list(output.token_ids)

    def texts(self, config: RunConfig) -> list[Sample]:
        """summary.json's `samples`: prompt and completion of each sample, shortened; [] without a
        tokenizer of the model's own or tokens."""
        if not any(self._outputs.values()) or not has_own_tokenizer(config):
            return []
        from llmbench.engine.loading.source import model_shape
        from llmbench.engine.serving.tokenizer import load_tokenizer

        try:
            tokenizer = load_tokenizer(config.model, model_shape(config.model))
        except ValueError:  # weights without a tokenizer beside them
            return []
        samples = []
        for backend_id, (prompt_ids, prompt) in self._prompts.items():
            output = self._outputs.get(backend_id)
            if not output:
                continue
            samples.append(
                Sample(
                    request=backend_id,
                    prompt=shorten_prompt(prompt if prompt is not None else tokenizer.decode(prompt_ids)),
                    completion=shorten(tokenizer.decode(output), COMPLETION_CHARS),
                    prompt_tokens=len(prompt_ids),
                    output_tokens=len(output),
                )
            )
        return samples


def has_own_tokenizer(config: RunConfig) -> bool:
    from llmbench.engine.loading.packaged import weights_path

    return config.model.tokenizer is not None or weights_path(config.model) is not None


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " …"


def shorten_prompt(text: str) -> str:
    """Its start and its end: where a prompt is going shows at its end."""
    if len(text) <= PROMPT_HEAD + PROMPT_TAIL:
        return text
    return f"{text[:PROMPT_HEAD].rstrip()} … {text[-PROMPT_TAIL:].lstrip()}"
