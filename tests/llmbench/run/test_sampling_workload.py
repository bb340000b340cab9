"""workload.top_p and workload.top_k reach every request, as workload.temperature does, and a sampled
run on the real tiny model draws other tokens than a greedy one."""

import pytest
from llmbench.engine.config import ConfigError

from llmbench.backends.bundled import BundledBackend
from llmbench.config.load import parse_config
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark
from tests.llmbench.null_run import NULL_RUN

SAMPLED = ["workload.temperature=0.8", "workload.top_p=0.95", "workload.top_k=40"]


class Recording(BundledBackend):
    def __init__(self):
        self.params = []

    def submit(self, request_id, prompt_token_ids, params, due=None, model=None):
        self.params.append(params)
        super().submit(request_id, prompt_token_ids, params, due, model)


def test_sampling_settings_reach_every_request(tmp_path):
    config = parse_config(NULL_RUN, SAMPLED)
    backend = Recording()
    backend.start(config)
    run_benchmark(config, tmp_path, backend=backend)
    assert len(backend.params) == 14  # 2 warm-up + 12 timed
    assert {(p.temperature, p.top_p, p.top_k) for p in backend.params} == {(0.8, 0.95, 40)}


def test_defaults_keep_every_token():
    workload = parse_config(NULL_RUN, []).workload
    assert (workload.top_p, workload.top_k) == (1.0, 0)


@pytest.mark.parametrize(
    ("setting", "key"), [("top_p=0", "top_p"), ("top_p=1.5", "top_p"), ("top_k=-1", "top_k")]
)
def test_out_of_range_settings_name_the_key(setting, key):
    with pytest.raises(ConfigError, match=f"workload.{key}"):
        parse_config(NULL_RUN, [f"workload.{setting}"])


def test_sampled_run_on_the_tiny_model_differs_from_greedy(tmp_path):
    model = ["model.executor=model", "model.dtype=float32", "model.device=cpu", "output.save_tokens=true"]
    outputs = {}
    for name, settings in (("greedy", []), ("sampled", SAMPLED)):
        config = parse_config(NULL_RUN, model + settings + ["workload.num_requests=4"])
        result = run_benchmark(config, tmp_path / name)
        assert result.summary.to_dict()["metrics"]["completed"] == 4
        records = sorted((r for r in load_requests(tmp_path / name) if not r.warmup), key=lambda r: r.id)
        assert all(len(r.output_token_ids) == r.output_len for r in records)
        outputs[name] = [r.output_token_ids for r in records]
    assert outputs["sampled"] != outputs["greedy"]
