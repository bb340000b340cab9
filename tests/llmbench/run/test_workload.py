import numpy as np
import pytest

from llmbench.backends.base import ModelInfo
from llmbench.config.load import parse_config
from llmbench.config.schema import ArrivalConfig, LengthConfig
from llmbench.run.plan import build_workload
from llmbench.run.workload import (
    WorkloadError,
    arrival_times,
    sample_lengths,
    synthetic_tokens,
)

INFO = ModelInfo(vocab_size=512, eos_token_id=2, max_model_len=2048, special_token_ids=(1, 2))


def config(**workload):
    return parse_config({"workload": workload})


def test_poisson_mean_rate_within_5_percent():
    times = arrival_times(ArrivalConfig("poisson", rate=4.0), 5000, np.random.default_rng(0))
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    rate = (len(times) - 1) / times[-1]
    assert rate == pytest.approx(4.0, rel=0.05)
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential gaps: CV 1


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_keeps_the_rate_and_sets_burstiness(burstiness):
    times = arrival_times(
        ArrivalConfig("gamma", rate=10.0, burstiness=burstiness), 8000, np.random.default_rng(1)
    )
    gaps = np.diff(times)
    assert 1 / gaps.mean() == pytest.approx(10.0, rel=0.05)
    # gamma with shape k has coefficient of variation 1/sqrt(k): burstier below 1, smoother above
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.06)


def test_constant_and_inf_arrivals():
    assert arrival_times(ArrivalConfig("constant", rate=4.0), 5, None).tolist() == [0, 0.25, 0.5, 0.75, 1.0]
    assert arrival_times(ArrivalConfig("inf"), 3, None).tolist() == [0, 0, 0]


def test_length_distributions_respect_bounds_and_means():
    rng = np.random.default_rng(0)
    assert sample_lengths(LengthConfig("fixed", mean=7), 3, rng) == [7, 7, 7]
    uniform = sample_lengths(LengthConfig("uniform", min=5, max=9), 2000, rng)
    assert min(uniform) == 5 and max(uniform) == 9
    normal = sample_lengths(LengthConfig("normal", mean=100, std=10, min=95, max=130), 4000, rng)
    assert min(normal) == 95 and max(normal) <= 130
    lognormal = sample_lengths(LengthConfig("lognormal", mean=200, sigma=0.5), 20000, rng)
    assert np.mean(lognormal) == pytest.approx(200, rel=0.03)  # mean of the lengths, not of their log
    clipped = sample_lengths(LengthConfig("lognormal", mean=200, sigma=1.0, min=50, max=300), 2000, rng)
    assert min(clipped) == 50 and max(clipped) == 300


def test_synthetic_tokens_never_draw_special_tokens():
    tiny = ModelInfo(vocab_size=4, eos_token_id=2, max_model_len=100, special_token_ids=(1,))
    tokens = synthetic_tokens(1000, tiny, np.random.default_rng(0))
    assert set(tokens) == {0, 3}


def test_same_seed_same_workload_other_seed_other_workload():
    spec = dict(
        num_requests=20,
        warmup_requests=3,
        input={"dist": "lognormal", "mean": 64, "max": 300},
        output={"dist": "uniform", "min": 1, "max": 50},
        arrival={"process": "gamma", "rate": 5, "burstiness": 0.5},
    )
    a, b = build_workload(config(**spec), INFO), build_workload(config(**spec), INFO)
    assert a == b
    other = build_workload(config(**spec, seed=1), INFO)
    assert [r.prompt_token_ids for r in other.requests] != [r.prompt_token_ids for r in a.requests]
    # the number of warm-up requests never changes the timed ones
    fewer_warmup = build_workload(config(**{**spec, "warmup_requests": 0}), INFO)
    assert fewer_warmup.requests == a.requests and fewer_warmup.warmup == []
    assert [r.request_id for r in a.warmup] == ["warmup-0", "warmup-1", "warmup-2"]
    assert all(r.arrival_time == 0 for r in a.warmup)
    # trials are independent samples
    assert build_workload(config(**spec), INFO, trial=1).requests == other.requests


def test_shared_prefix_groups():
    workload = build_workload(
        config(num_requests=9, prefix={"groups": 3, "prefix_len": 16}, input={"mean": 10}), INFO
    )
    prompts = [r.prompt_token_ids for r in workload.requests]
    assert all(len(p) == 26 for p in prompts)
    assert prompts[0][:16] == prompts[3][:16] == prompts[6][:16]
    assert prompts[0][:16] != prompts[1][:16]
    assert prompts[0][16:] != prompts[3][16:]


def test_requests_longer_than_the_model_are_a_workload_error():
    with pytest.raises(WorkloadError, match="max_model_len=2048"):
        build_workload(config(input={"mean": 2000}, output={"mean": 100}), INFO)


def test_sharegpt_prompts_are_tokenized_and_answers_set_output_lengths(sharegpt):
    root, tokenizer = sharegpt
    dataset = {
        "type": "sharegpt",
        "path": str(root / "sharegpt.json"),
        "tokenizer": str(root / "tokenizer.json"),
    }
    workload = build_workload(config(num_requests=3, dataset=dataset), INFO)
    expected = {
        tuple(tokenizer.encode("what is the capital of france").ids): 6,
        tuple(tokenizer.encode("tell me a story about a cat").ids): 12,
        tuple(tokenizer.encode("how many legs does a spider have").ids): 5,
    }
    assert {tuple(r.prompt_token_ids): r.output_len for r in workload.requests} == expected
    assert {tuple(tokenizer.encode(r.prompt).ids) for r in workload.requests} == set(expected)
    fixed = build_workload(
        config(num_requests=3, dataset={**dataset, "output_lengths_from_dataset": False}), INFO
    )
    assert [r.output_len for r in fixed.requests] == [128] * 3
    with pytest.raises(WorkloadError, match="3 usable conversations, need 4"):
        build_workload(config(num_requests=4, dataset=dataset), INFO)
    with pytest.raises(WorkloadError, match="outside the model's vocabulary"):
        small_vocab = ModelInfo(vocab_size=3, eos_token_id=2, max_model_len=2048)
        build_workload(config(num_requests=3, dataset=dataset), small_vocab)
