import json

import pytest
import yaml

from tests.llmbench.null_run import NULL_RUN


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
