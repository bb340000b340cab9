"""The clients benchmarks/client_fidelity.py measures, each run as its own process against the mock at
`url`, and what each recorded, read back from its own result files into one shape (ClientTimes).

Every client gets the same load: `streams` requests in flight until `requests` are done, prompts of
about 128 tokens, 128 output tokens asked for, one chunk a token. GuideLLM and AIPerf generate text
prompts with a tokenizer: make_tokenizer writes a small one, since the machine may be offline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PROMPT_TOKENS = 128
TIMEOUT_S = 900


@dataclass
class ClientTimes:
    """What a client measured: per request its TTFT, its gaps between chunks (pooled), its tokens;
    `span_s` from its first submit to its last chunk, by its own clock."""

    ttft_s: list[float]
    itl_sum_s: float
    itl_count: int
    tokens: int
    chunks: int
    span_s: float


@dataclass
class Client:
    kind: str  # reference, llmbench, guidellm or aiperf
    executable: str | None  # None: absent, skipped
    extra: tuple[str, ...] = ()  # llmbench: --set values
    label: str = ""  # its name in the results (default: the kind)

    @property
    def name(self) -> str:
        return self.label or self.kind

    def run(self, url: str, streams: int, requests: int, tokens: int, work: Path) -> ClientTimes:
        work.mkdir(parents=True, exist_ok=True)
        args = (url.rstrip("/"), streams, requests, tokens, work, self.extra)
        command = getattr(self, f"_{self.kind}")(*args)
        log = work / "client.log"
        with open(log, "w") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=TIMEOUT_S, cwd=work)
        if done.returncode != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"{self.name} exited with {done.returncode}: {' | '.join(tail)}")
        return getattr(self, f"_read_{self.kind}")(work)

    # reference: benchmarks/reference_client.py
    def _reference(self, url, streams, requests, tokens, work, extra):
        script = str(HERE / "reference_client.py")
        return [self.executable, script, "--url", url, "--streams", str(streams), "--requests", str(requests),
                "--output-tokens", str(tokens), "--out", str(work / "reference.json")]  # fmt: skip

    def _read_reference(self, work: Path) -> ClientTimes:
        rows = json.loads((work / "reference.json").read_text())["requests"]
        return _from_stamps([(row["submit"], row["chunks"]) for row in rows])

    # llmbench: `llmbench run` with backend.type openai
    def _llmbench(self, url, streams, requests, tokens, work, extra):
        config = {
            "name": "client-fidelity",
            "model": {"preset": "tiny"},
            "backend": {"type": "openai", "url": url, "model": "mock"},
            "workload": {
                "num_requests": requests,
                "max_concurrency": streams,
                "input": {"mean": PROMPT_TOKENS},
                "output": {"mean": tokens},
            },
            "output": {"report": False},
        }
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        sets = [item for value in extra for item in ("--set", value)]
        return [*self.executable.split(), "run", str(work / "config.yaml"), "--out", str(work / "run"),
                "--force", "--no-report", *sets]  # fmt: skip

    def _read_llmbench(self, work: Path) -> ClientTimes:
        lines = (work / "run" / "requests.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        return _from_stamps([(row["submit_time"], row["token_times"]) for row in rows if row["token_times"]])

    # GuideLLM (0.8): concurrent profile, synthetic text
    def _guidellm(self, url, streams, requests, tokens, work, extra):
        root = url.removesuffix("/v1")
        return [self.executable, "run",
                "--backend", f"kind=openai_http,target={root},model=mock,request_format=/v1/completions",
                "--profile", f"kind=concurrent,streams={streams}",
                "--constraint", f"kind=max_requests,count={requests}",
                "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={tokens}",
                "--tokenizer", f"kind=hf_auto,model={make_tokenizer(work.parent)}",
                "--output", f"kind=json,path={work / 'guidellm.json'}",
                "--disable-console-interactive"]  # fmt: skip

    def _read_guidellm(self, work: Path) -> ClientTimes:
        (benchmark,) = json.loads((work / "guidellm.json").read_text())["benchmarks"]
        ttft, itl_sum, itl_count, tokens, chunks, starts, ends = [], 0.0, 0, 0, 0, [], []
        for request in benchmark["requests"]["successful"]:
            t = request["info"]["timings"]
            n = t["token_iterations"]
            ttft.append(t["first_token_iteration"] - t["request_start"])
            itl_sum += t["last_token_iteration"] - t["first_token_iteration"]
            itl_count += n - 1
            chunks += n
            tokens += request["output_metrics"]["text_tokens"] or n
            starts.append(t["request_start"])
            ends.append(t["last_token_iteration"])
        return ClientTimes(ttft, itl_sum, itl_count, tokens, chunks, max(ends) - min(starts))

    # AIPerf: completions, streaming, server token counts
    def _aiperf(self, url, streams, requests, tokens, work, extra):
        root = url.removesuffix("/v1")
        return [self.executable, "profile", "-m", "mock", "--url", root, "--endpoint-type", "completions",
                "--streaming", "--concurrency", str(streams), "--request-count", str(requests),
                "--synthetic-input-tokens-mean", str(PROMPT_TOKENS), "--output-tokens-mean", str(tokens),
                "--tokenizer", str(make_tokenizer(work.parent)), "--use-server-token-count",
                "--artifact-dir", str(work / "aiperf"), "--ui-type", "none"]  # fmt: skip

    def _read_aiperf(self, work: Path) -> ClientTimes:
        ttft, itl_sum, itl_count, tokens, chunks, starts, ends = [], 0.0, 0, 0, 0, [], []
        for line in (work / "aiperf" / "profile_export.jsonl").read_text().splitlines():
            row = json.loads(line)
            metrics = row["metrics"]
            if "time_to_first_token" not in metrics:
                continue  # a failed request
            gaps = metrics.get("inter_chunk_latency", {}).get("value", [])
            ttft.append(metrics["time_to_first_token"]["value"] / 1000)
            itl_sum += sum(gaps) / 1000
            itl_count += len(gaps)
            chunks += len(gaps) + 1
            tokens += metrics["output_token_count"]["value"]
            starts.append(row["metadata"]["request_start_ns"] / 1e9)
            ends.append(row["metadata"]["request_end_ns"] / 1e9)
        return ClientTimes(ttft, itl_sum, itl_count, tokens, chunks, max(ends) - min(starts))


def _from_stamps(requests: list[tuple[float, list[float]]]) -> ClientTimes:
    """From each request's submit time and its chunks' arrival times (one clock)."""
    ttft = [chunks[0] - submit for submit, chunks in requests]
    itl_sum = sum(chunks[-1] - chunks[0] for _, chunks in requests)
    itl_count = sum(len(chunks) - 1 for _, chunks in requests)
    n = sum(len(chunks) for _, chunks in requests)
    span = max(chunks[-1] for _, chunks in requests) - min(submit for submit, _ in requests)
    return ClientTimes(ttft, itl_sum, itl_count, n, n, span)


def make_clients(
    guidellm: str | None, aiperf: str | None, llmbench: str | None, workers: list[str]
) -> list[Client]:
    """The clients: llmbench once per backend.workers value (none: its default); a peer whose
    executable is absent is returned with executable None."""

    def found(path: str | None) -> str | None:
        return path if path and (Path(path).exists() or shutil.which(path)) else None

    command = llmbench or f"{sys.executable} -m llmbench"
    ours = [
        Client("llmbench", command, (f"backend.workers={w}",), f"llmbench-w{w}")
        if w
        else Client("llmbench", command)
        for w in workers or [""]
    ]
    return [
        Client("reference", sys.executable),
        *ours,
        Client("guidellm", found(guidellm)),
        Client("aiperf", found(aiperf)),
    ]


def make_tokenizer(directory: Path) -> Path:
    """A byte-level BPE saved as a Hugging Face tokenizer folder (tokenizer.json and its config)."""
    folder = directory / "tokenizer"
    if (folder / "tokenizer.json").exists():
        return folder
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    text = "the quick brown fox jumps over the lazy dog while a benchmark client streams its tokens " * 64
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<unk>", "<eos>"], initial_alphabet=alphabet, show_progress=False
    )
    tokenizer.train_from_iterator([text] * 8, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192}
    (folder / "tokenizer_config.json").write_text(
        json.dumps(config | {"eos_token": "<eos>", "unk_token": "<unk>"})
    )
    return folder
