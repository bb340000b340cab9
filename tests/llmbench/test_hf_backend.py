import pytest

from llmbench.config import parse_config
from llmbench.results import load_requests
from llmbench.runner import run_benchmark

pytest.importorskip("transformers")

RUN = {
    "name": "peer",
    "model": {"preset": "tiny", "device": "cpu", "dtype": "float32"},
    "engine": {"max_num_seqs": 4},
    "workload": {
        "num_requests": 6,
        "input": {"dist": "uniform", "min": 3, "max": 20},
        "output": {"dist": "uniform", "min": 1, "max": 10},
    },
    "output": {"save_tokens": True, "report": False},
}


def run(tmp_path, backend_type):
    config = parse_config(RUN, [f"backend.type={backend_type}"])
    run_benchmark(config, tmp_path / backend_type)
    return {r.id: r for r in load_requests(tmp_path / backend_type)}


def test_hf_peer_runs_the_same_model_and_stamps_each_step(tmp_path):
    bundled, hf = run(tmp_path, "bundled"), run(tmp_path, "hf")
    assert {k: r.output_token_ids for k, r in hf.items()} == {
        k: r.output_token_ids for k, r in bundled.items()
    }
    for record in hf.values():
        assert record.finish_reason == "length"
        assert len(record.token_times) == record.output_len == len(set(record.token_times))
    # static batches of max_num_seqs: the first four start together and share their first-token time
    first = sorted(hf.values(), key=lambda r: int(r.id))[:4]
    assert len({r.first_token_time for r in first}) == 1
