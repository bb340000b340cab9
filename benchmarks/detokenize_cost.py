"""Per-token cost of the server's incremental detokenizer: the synthetic byte-level BPE of each preset
against a real tokenizer.json, streaming 256-token outputs one token at a time (the server's hot path
per streamed token). Random ids are what random weights emit; text ids are a real model's kind.

    python benchmarks/detokenize_cost.py --tokenizer /path/to/tokenizer.json --out runs/cpu/detokenize.json

Takes seconds once the presets' tokenizers are cached (the first start of a 128k-vocabulary preset
trains one, about 35 s on 2 cores). Writes --out FILE (without it, prints only); the published one is
docs/measurements/cpu/detokenize.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import time
from pathlib import Path

from llmbench.engine.config import ModelConfig
from llmbench.engine.models.shape import PRESETS, LlamaShape
from llmbench.engine.serving.detokenizer import IncrementalDetokenizer
from llmbench.engine.serving.tokenizer import TextTokenizer, load_tokenizer
from tokenizers import Tokenizer

TEXT = (
    "The quick brown fox jumps over the lazy dog. Benchmarks of inference servers measure time to first "
    "token, the time per output token and throughput under load; a server that streams must turn every "
    "sampled token into text as it comes, and multi-byte characters such as é, ü, 你好 or 🎉 span tokens. "
)


def us_per_token(tokenizer: TextTokenizer, outputs: list[list[int]]) -> float:
    start = time.perf_counter()
    count = 0
    for ids in outputs:
        detokenizer = IncrementalDetokenizer(tokenizer, [1, 100, 200], [])
        for token in ids:
            detokenizer.add([token])
        detokenizer.flush()
        count += len(ids)
    return (time.perf_counter() - start) / count * 1e6


def measure(name: str, tokenizer: TextTokenizer, repeats: int) -> dict:
    rng = random.Random(0)
    vocab = tokenizer.vocab_size
    random_ids = [[rng.randrange(vocab) for _ in range(256)] for _ in range(repeats)]
    text_ids = tokenizer.encode(TEXT * 8, add_special_tokens=False)[:256]
    row = {
        "tokenizer": name,
        "vocab_size": vocab,
        "random_ids_us_per_token": round(us_per_token(tokenizer, random_ids), 2),
        "text_ids_us_per_token": round(us_per_token(tokenizer, [text_ids] * repeats), 2),
        "text_chars_per_token": round(len(TEXT * 8) / len(tokenizer.encode(TEXT * 8)), 2),
    }
    print(json.dumps(row))
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", help="a real tokenizer.json to compare with")
    parser.add_argument("--presets", default="tiny,llama2-7b,llama3-8b")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for preset in args.presets.split(","):
        rows.append(
            measure(
                f"synthetic {preset}",
                load_tokenizer(ModelConfig(preset=preset), PRESETS[preset]),
                args.repeats,
            )
        )
    if args.tokenizer:
        real = Tokenizer.from_file(args.tokenizer)
        shape = LlamaShape(1, 1, 1, 1, 1, 1, real.get_vocab_size())
        rows.append(measure(args.tokenizer, TextTokenizer(real, shape), args.repeats))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"command": shlex.join(["python", *sys.argv]), "rows": rows}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
