import json
import os

import pytest
import yaml

from tests.llmbench.null_run import NULL_RUN


@pytest.fixture(autouse=True, scope="session")
def _own_client_capacity(tmp_path_factory):
    """backend.workers auto sizes by this host's calibrated figure: the tests see none unless they write
    one (in a cache of their own: client_cache), and never replace the host's."""
    before = os.environ.get("LLMBENCH_CACHE")
    os.environ["LLMBENCH_CACHE"] = str(shared_tokenizers(tmp_path_factory.mktemp("llmbench-cache")))
    yield
    if before is None:
        del os.environ["LLMBENCH_CACHE"]
    else:
        os.environ["LLMBENCH_CACHE"] = before


@pytest.fixture
def client_cache(tmp_path, monkeypatch):
    """A cache of the test's own, for a test that calibrates: the figure it keeps is a tiny ladder's, which
    would size every later test's workers."""
    cache = shared_tokenizers(tmp_path / "llmbench-cache")
    monkeypatch.setenv("LLMBENCH_CACHE", str(cache))
    return cache


def shared_tokenizers(cache):
    """`cache` with the host's synthetic tokenizers in it: one for a large vocabulary takes tens of seconds
    to train."""
    from llmbench.engine.serving.synthetic_bpe import CACHE_DIR

    cache.mkdir(parents=True, exist_ok=True)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    (cache / "tokenizers").symlink_to(CACHE_DIR)
    return cache


@pytest.fixture
def null_config_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(NULL_RUN))
    return path


@pytest.fixture
def sharegpt(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    sentences = [
        "what is the capital of france",
        "the capital of france is paris",
        "tell me a story about a cat",
        "once upon a time a cat sat on a mat and slept",
        "how many legs does a spider have",
        "a spider has eight legs",
    ]
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        sentences, trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>"])
    )
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    conversations = [
        {
            "conversations": [
                {"from": "human", "value": sentences[i]},
                {"from": "gpt", "value": sentences[i + 1]},
            ]
        }
        for i in (0, 2, 4)
    ]
    conversations.append({"conversations": [{"from": "gpt", "value": "no human turn first"}]})
    (tmp_path / "sharegpt.json").write_text(json.dumps(conversations))
    return tmp_path, tokenizer
