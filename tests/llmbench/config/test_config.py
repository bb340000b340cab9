from pathlib import Path

import pytest
import torch
import yaml
from llmbench.engine.config import ConfigError
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.config.load import load_config, parse_config

# (override, key the message must name, text the message must contain)
BAD = [
    (
        "workload.arrival.rate=fast",
        "workload.arrival.rate",
        "expected a number >= 0.001 and <= 1000000, got 'fast'",
    ),
    ("workload.arrival.rate=0", "workload.arrival.rate", "expected a number >= 0.001 and <= 1000000, got 0"),
    ("workload.arrival.process=sometimes", "workload.arrival.process", "expected one of inf, constant"),
    ("engine.blok_size=32", "engine.blok_size", "unknown key (did you mean block_size?)"),
    ("engine.block_size=0", "engine.block_size", "expected an integer >= 1 and <= 1024, got 0"),
    ("engine.chunked_prefill=maybe", "engine.chunked_prefill", "expected true or false"),
    ("engine.max_num_seqs=2.5", "engine.max_num_seqs", "expected an integer"),
    ("engine.gpu_memory_utilization=1.5", "engine.gpu_memory_utilization", "> 0 and <= 1, got 1.5"),
    ("engine.cuda_graph_sizes=8", "engine.cuda_graph_sizes", "expected a list"),
    ("engine.prefill_attention=cudnn", "engine.prefill_attention", "one of paged, sdpa, flash, got 'cudnn'"),
    ("model.dtype=float8", "model.dtype", "expected one of"),
    ("model.executor=null", "model.executor", "quote it"),
    ("model.null_forward_ms=-1", "model.null_forward_ms", "expected a number >= 0 and <= 60000, got -1.0"),
    (
        "model.null_forward_ms=fast",
        "model.null_forward_ms",
        "expected a number >= 0 and <= 60000, got 'fast'",
    ),
    ("workload.num_requests=0", "workload.num_requests", "expected an integer >= 1"),
    ("workload.input={dist: uniform}", "workload.input.max", "uniform lengths need a max"),
    ("workload.output.max=0", "workload.output.max", ">= 1"),
    ("workload.prefix.groups=4", "workload.prefix.prefix_len", ">= 1 when groups are set"),
    ("workload.dataset.type=mooncake", "workload.dataset.path", "a mooncake dataset needs a path"),
    ("workload.dataset.max_total_len=0", "workload.dataset.max_total_len", "expected an integer >= 1"),
    ("slo.ttft_ms=-1", "slo.ttft_ms", "expected a number > 0"),
    ("output.percentiles=[50, 120]", "output.percentiles[1]", "expected a number > 0 and <= 100, got 120.0"),
    ("output.percentiles[0]=5", "output.percentiles[0]", "unknown key"),
    ("backend.type=vllm", "backend.type", "expected one of bundled, hf"),
    ("backend.workers=2", "backend.workers", "stream workers send HTTP: backend.type openai or server"),
    (
        "backend.ray_connect_timeout_s=0",
        "backend.ray_connect_timeout_s",
        "expected a number > 0 and <= 86400",
    ),
    ("bogus=1", "bogus", "unknown key"),
    ("workload.arrival=fast", "workload.arrival", "expected a mapping"),
]


@pytest.mark.parametrize("override,key,text", BAD, ids=[b[1] for b in BAD])
def test_bad_config_exits_2_naming_the_key(null_config_file, override, key, text):
    result = CliRunner().invoke(app, ["run", str(null_config_file), "--set", override])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: run.yaml: {key}: ")
    assert text in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("backend", ["bundled", "hf"])
def test_stream_workers_are_the_http_clients_alone(backend):
    # the in-process backends have no stream workers: a count there would be silently ignored; auto, the
    # default, is one there
    with pytest.raises(ConfigError) as error:
        parse_config({}, [f"backend.type={backend}", "backend.workers=2"])
    assert str(error.value) == "backend.workers: stream workers send HTTP: backend.type openai or server"
    assert parse_config({}, [f"backend.type={backend}", "backend.workers=auto"]).backend.workers == "auto"
    http = parse_config({}, ["backend.type=openai", "backend.url=http://127.0.0.1:1", "backend.workers=2"])
    assert http.backend.workers == 2


def test_a_forward_time_for_the_real_model_exits_2(null_config_file):
    overrides = ["--set", "model.executor=model", "--set", "model.null_forward_ms=5"]
    result = CliRunner().invoke(app, ["run", str(null_config_file), *overrides])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: run.yaml: model.null_forward_ms: only the null executor")


def test_bad_key_in_yaml_file_is_reported_with_its_path(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("workload:\n  arrival:\n    rate: fast\n")
    expected = r"^c.yaml: workload.arrival.rate: expected a number >= 0.001 and <= 1000000, got 'fast'$"
    with pytest.raises(ValueError, match=expected):
        load_config(path)


def test_a_key_with_a_newline_is_named_on_one_line(tmp_path):
    # found by test_config_fuzz: YAML accepts any string as a key, "\n" included
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"\n": 0}}))
    with pytest.raises(ValueError) as error:
        load_config(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith("c.yaml: model.'\\n': unknown key")


@pytest.mark.parametrize("text", ["workload: [1, 2", "- just\n- a list\n"])
def test_unreadable_yaml_exits_2(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 2
    assert "c.yaml" in result.stderr


def test_missing_file_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["run", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "nope.yaml: cannot read" in result.stderr


def test_overrides_parse_values_as_yaml_and_validate_like_the_file():
    config = parse_config(
        {"engine": {"block_size": 8}},
        [
            "engine.block_size=32",
            "engine.prefix_caching=false",
            "slo.ttft_ms=250",
            "output.percentiles=[50, 99.9]",
            "workload.arrival.process=gamma",
            "model.executor='null'",
            "name=abc",
        ],
    )
    assert config.engine.block_size == 32
    assert config.engine.prefix_caching is False
    assert config.slo.ttft_ms == 250.0 and isinstance(config.slo.ttft_ms, float)
    assert config.output.percentiles == [50.0, 99.9]
    assert config.workload.arrival.process == "gamma"
    assert config.model.executor == "null"
    assert config.name == "abc"
    with pytest.raises(ConfigError) as info:
        parse_config({}, ["engine.block_size=big"])
    assert info.value.key == "engine.block_size"


def test_engine_receives_the_model_section_and_defaults_fill_the_rest():
    config = parse_config({"model": {"preset": "tiny", "seed": 3}}, default_name="quick")
    assert config.engine.model is config.model
    assert config.engine.model.seed == 3
    assert config.name == "quick"
    assert config.hf_batch_size == config.engine.max_num_seqs == 256
    assert config.workload.arrival.process == "inf"


def test_resolved_config_round_trips_through_yaml():
    arrival = {"process": "poisson", "rate": 3}
    config = parse_config({"workload": {"arrival": arrival}}, ["engine.block_size=32"])
    data = config.to_dict()
    assert "model" not in data["engine"]
    assert parse_config(yaml.safe_load(yaml.safe_dump(data))).to_dict() == data


def test_shipped_configs_are_valid():
    names = {p.stem: load_config(p) for p in Path("configs").glob("*.yaml")}
    shipped = {"quickstart", "ci", "llama3-8b-throughput", "llama3-8b-latency", "llama3-8b-sharegpt"}
    assert shipped <= set(names)
    throughput = names["llama3-8b-throughput"].workload
    assert (throughput.num_requests, throughput.input.mean, throughput.output.mean) == (256, 256, 128)
    assert names["llama3-8b-latency"].workload.arrival.rate == 4


def test_yaml_12_numbers_are_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "hardware: {peak_tflops: 4.8e3, peak_bandwidth_gb_s: 1e-3}\nworkload: {temperature: 1E0}\n"
    )
    config = load_config(path, ["workload.arrival.rate=2.5e1"])
    assert (config.hardware.peak_tflops, config.hardware.peak_bandwidth_gb_s) == (4800.0, 0.001)
    assert (config.workload.temperature, config.workload.arrival.rate) == (1.0, 25.0)
    path.write_text("name: e3\n")  # not a number: no digit before the exponent
    assert load_config(path).name == "e3"


def test_a_shipped_config_resolves_by_name():
    from llmbench.config.load import SHIPPED_CONFIGS

    assert load_config("quickstart").name == load_config("quickstart.yaml").name == "quickstart"
    assert {p.stem for p in SHIPPED_CONFIGS.glob("*.yaml")} >= {"quickstart", "ci", "ablation-cpu"}


def test_cpu_threads_default_to_one():
    assert parse_config({}).hardware.cpu_threads == 1
    assert parse_config({}, ["hardware.cpu_threads=null"]).hardware.cpu_threads is None


def test_tensor_parallel_counts_gpus_only_for_a_run_that_uses_them(monkeypatch):
    # a host with one GPU: CPU ranks need none, a GPU run of 2 ranks needs two
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cpu = parse_config({"model": {"preset": "tiny", "device": "cpu"}, "engine": {"tensor_parallel_size": 2}})
    assert cpu.engine.tensor_parallel_size == 2 and cpu.engine.model.device == "cpu"
    message = "engine.tensor_parallel_size: 2 ranks need as many GPUs, 1 visible"
    with pytest.raises(ConfigError, match=message):
        parse_config({"model": {"preset": "tiny"}, "engine": {"tensor_parallel_size": 2}})
