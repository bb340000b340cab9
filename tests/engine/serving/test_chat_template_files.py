"""Where the server finds a model's chat template, as transformers does: a file model.chat_template names,
else chat_template.jinja (transformers 5 saves the template there, not in tokenizer_config.json), else
tokenizer_config.json's. With none, the role-tagged fallback is used and said: once in the start-up log,
and in GET /v1/models."""

import json
import logging

import httpx
import pytest
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.models.shape import PRESETS
from llmbench.engine.serving import synthetic_bpe
from llmbench.engine.serving.tokenizer import announce_chat_template, load_tokenizer

from tests.engine.helpers import TINY_CPU
from tests.engine.serving.servers import RunningServer

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tokenizer directory written by transformers' save_pretrained, with its apply_chat_template ids."""
    transformers = pytest.importorskip("transformers")
    directory = tmp_path_factory.mktemp("hf5")
    tokenizer = synthetic_bpe.synthetic_tokenizer(512, 1, 2)
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=tokenizer.id_to_token(1), eos_token=tokenizer.id_to_token(2)
    )
    hf.chat_template = TEMPLATE
    hf.save_pretrained(directory)
    ids = hf.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    return directory, ids


def rendered_ids(model: ModelConfig) -> tuple[list[int], str]:
    tokenizer = load_tokenizer(model, PRESETS["tiny"])
    return tokenizer.encode(
        tokenizer.render_chat(MESSAGES), add_special_tokens=False
    ), tokenizer.chat_template_source


def test_a_directory_saved_by_transformers_5_renders_as_apply_chat_template(saved):
    directory, expected = saved
    assert "chat_template" not in json.loads((directory / "tokenizer_config.json").read_text())
    ids, source = rendered_ids(ModelConfig(path=str(directory)))
    assert ids == expected
    assert source == str(directory / "chat_template.jinja")


def test_the_jinja_file_wins_over_tokenizer_config_and_a_named_file_over_both(saved, tmp_path):
    directory, expected = saved
    for name in ("tokenizer.json", "chat_template.jinja"):
        (tmp_path / name).write_bytes((directory / name).read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 'older' }}"}))
    assert rendered_ids(ModelConfig(path=str(tmp_path)))[0] == expected
    (tmp_path / "mine.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    ids, source = rendered_ids(ModelConfig(path=str(tmp_path), chat_template=str(tmp_path / "mine.jinja")))
    tokenizer = load_tokenizer(ModelConfig(path=str(tmp_path)), PRESETS["tiny"])
    assert ids == tokenizer.encode("Answer briefly.What is the capital of France?", add_special_tokens=False)
    assert source == str(tmp_path / "mine.jinja")
    with pytest.raises(ValueError, match="model.chat_template: cannot read .*absent.jinja"):
        load_tokenizer(
            ModelConfig(path=str(tmp_path), chat_template=str(tmp_path / "absent.jinja")), PRESETS["tiny"]
        )


def test_no_template_is_said_once_at_start_up_and_in_the_model_card(caplog):
    with caplog.at_level(logging.WARNING, logger="llmbench.engine.serving.tokenizer"):
        running = RunningServer(EngineConfig(model=TINY_CPU))
    try:
        card = httpx.get(running.url + "/v1/models", timeout=10).json()["data"][0]
        assert card["chat_template"] == "fallback"
        warnings = [r for r in caplog.records if "no chat template found" in r.getMessage()]
        assert len(warnings) == 1
        assert "set model.chat_template to a template file" in warnings[0].getMessage()
    finally:
        running.stop()


def test_a_template_found_is_named_at_start_up(saved, caplog):
    directory, _ = saved
    tokenizer = load_tokenizer(ModelConfig(path=str(directory)), PRESETS["tiny"])
    with caplog.at_level(logging.INFO, logger="llmbench.engine.serving.tokenizer"):
        announce_chat_template(tokenizer)
    assert caplog.messages == [f"chat template: {directory / 'chat_template.jinja'}"]
