"""The server's tokenizer: model.tokenizer, the model directory's tokenizer.json, a GGUF's own (built
from its metadata, engine/loading/gguf_tokenizer.py), or for a preset the synthetic byte-level BPE of its
vocabulary (engine/serving/synthetic_bpe.py). Chat prompts are rendered with the model's chat template,
found as transformers finds it: a file model.chat_template names, else chat_template.jinja beside the
tokenizer (transformers 5 saves it there), else tokenizer_config.json's chat_template, else the GGUF's.
With none, a plain role-tagged template is used and the start-up log says so once (GET /v1/models says
it too)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from llmbench.engine.config import ModelConfig
from llmbench.engine.loading.packaged import is_gguf, weights_path
from llmbench.engine.models.shape import LlamaShape
from llmbench.engine.serving.synthetic_bpe import synthetic_tokenizer
from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

GIL_FREE_FROM = 16384  # characters to encode, or token ids to decode (~10 ms of either)
FALLBACK_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


class TextTokenizer:
    """Text <-> token ids for one model, and its chat template."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        shape: LlamaShape,
        chat_template: str | None = None,
        chat_template_source: str | None = None,
    ):
        self.tokenizer = tokenizer
        self.vocab_size = shape.vocab_size
        self.bos_token = tokenizer.id_to_token(shape.bos_token_id) if shape.bos_token_id >= 0 else None
        self.eos_token = tokenizer.id_to_token(shape.eos_token_id) if shape.eos_token_id >= 0 else None
        self.has_chat_template = chat_template is not None
        # where the template came from (a file, a GGUF's metadata), or "fallback" for the role-tagged one
        self.chat_template_source = "fallback" if chat_template is None else chat_template_source or "given"
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise_template_error
        self._chat_template = environment.from_string(chat_template or FALLBACK_CHAT_TEMPLATE)

    # Long inputs go through the batch calls, which release the GIL while in Rust: encode() and decode()
    # hold it: a 2 MB prompt tokenized on a worker thread stalled every other thread for 1.5 s
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.encode_batch([text], add_special_tokens)[0]

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        if sum(len(text) for text in texts) < GIL_FREE_FROM:
            return [self.tokenizer.encode(t, add_special_tokens=add_special_tokens).ids for t in texts]
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
        return [encoding.ids for encoding in encodings]

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        if len(token_ids) < GIL_FREE_FROM:
            return self.tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
        return self.tokenizer.decode_batch([token_ids], skip_special_tokens=skip_special_tokens)[0]

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """The prompt text of a conversation, ending where the assistant's reply starts."""
        try:
            return self._chat_template.render(
                messages=messages,
                add_generation_prompt=True,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
            )
        except TemplateError as e:  # e.g. a template reading a field these messages lack
            raise ChatTemplateError(f"the chat template failed: {e}") from None


class ChatTemplateError(ValueError):
    """The chat template refused the conversation (its raise_exception); a client error."""


def _raise_template_error(message: str) -> None:
    raise ChatTemplateError(message)


def load_tokenizer(model: ModelConfig, shape: LlamaShape) -> TextTokenizer:
    """The tokenizer for a model; ValueError when a model directory or model.tokenizer has none."""
    weights = weights_path(model)
    if model.tokenizer is None and weights is None:
        tokenizer = synthetic_tokenizer(shape.vocab_size, shape.bos_token_id, shape.eos_token_id)
        return TextTokenizer(tokenizer, shape, *_named_template(model))
    if model.tokenizer is None and is_gguf(weights):
        from llmbench.engine.loading.gguf_file import GGUFFile  # numpy and gguf: only for a GGUF
        from llmbench.engine.loading.gguf_tokenizer import gguf_chat_template, gguf_tokenizer

        metadata = GGUFFile(weights).metadata
        template, source = _named_template(model)
        if template is None and gguf_chat_template(metadata) is not None:
            template, source = gguf_chat_template(metadata), f"{weights.name} (GGUF metadata)"
        return TextTokenizer(gguf_tokenizer(metadata), shape, template, source)
    path = Path(model.tokenizer) if model.tokenizer is not None else weights / "tokenizer.json"
    if not path.is_file():
        raise ValueError(f"no tokenizer at {path}: set model.tokenizer to a tokenizer.json")
    template, source = _named_template(model)
    if template is None:
        template, source = _directory_template(path.parent)
    return TextTokenizer(Tokenizer.from_file(str(path)), shape, template, source)


def announce_chat_template(tokenizer: TextTokenizer) -> None:
    """Said once, as the server starts: a model prompted in a format it was not trained on answers
    badly, and nothing else would tell."""
    if tokenizer.has_chat_template:
        logger.info("chat template: %s", tokenizer.chat_template_source)
    else:
        logger.warning(
            "no chat template found for this model: chat requests use a plain <|role|> template; "
            "set model.chat_template to a template file"
        )


def _named_template(model: ModelConfig) -> tuple[str | None, str]:
    if model.chat_template is None:
        return None, "fallback"
    path = Path(model.chat_template).expanduser()
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"model.chat_template: cannot read {path} ({e})") from None


def _directory_template(directory: Path) -> tuple[str | None, str]:
    """The default template of a tokenizer directory, looked up as transformers 5 does."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():  # transformers 5 writes it here, and it wins over tokenizer_config.json's
        return jinja.read_text(encoding="utf-8"), str(jinja)
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return None, "fallback"
    template = json.loads(config.read_text()).get("chat_template")
    if isinstance(template, list):  # several named templates: the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    return (template, str(config)) if template is not None else (None, "fallback")
