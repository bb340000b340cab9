"""The report names what a run measured: on the CPU the forward runs inside the prepare phase, which the
step breakdown says; a run against an OpenAI-compatible server shows the server's engine and software as
not reported, not the local config's toggles and the client machine's software as if they were its."""

import json

from llmbench.report import write_report
from tests.llmbench.run_dirs import chart_specs, make_run_dir, visible

OPENAI = {"type": "openai", "url": "http://10.0.0.7:8000/v1", "model": "meta-llama/Llama-3.1-8B-Instruct"}
TOGGLES = {"chunked_prefill": True, "prefix_caching": True, "cuda_graphs": False}


def report_of(tmp_path, config: dict, environment: dict | None = None) -> str:
    run = make_run_dir(tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    summary["config"].update(config)
    summary["environment"].update(environment or {})
    (run / "summary.json").write_text(json.dumps(summary))
    return write_report([run], run).read_text()


def breakdown_labels(html: str) -> list[str]:
    spec = next(s for s in chart_specs(html) if s.get("x", {}).get("title") == "ms per engine step")
    return [d["label"] for d in spec["datasets"]]


def test_a_cpu_run_s_prepare_is_named_for_the_forward_it_holds(tmp_path):
    html = report_of(tmp_path / "cpu", {"model": {"device": "cpu", "executor": "model"}})
    assert "prepare + forward (CPU)" in breakdown_labels(html)
    assert "so prepare holds the model" in visible(html)
    # auto on a machine without a GPU is the CPU too
    html = report_of(tmp_path / "auto", {"model": {"device": "auto", "executor": "model"}}, {"gpu": None})
    assert "prepare + forward (CPU)" in breakdown_labels(html)


def test_a_gpu_or_null_executor_run_s_prepare_is_inputs_and_launch(tmp_path):
    gpu = {"model": {"device": "cuda", "executor": "model"}}
    null = {"model": {"device": "cpu", "executor": "null"}}
    for name, config in (("gpu", gpu), ("null", null)):
        html = report_of(tmp_path / name, config)
        assert "prepare (inputs + launch)" in breakdown_labels(html)
        assert "so prepare holds the model" not in visible(html)


def header(html: str) -> str:
    page = visible(html)
    return page[page.index('class="header-table"') : page.index("</table>")]


def test_an_openai_run_s_header_says_the_server_s_engine_and_software_are_not_reported(tmp_path):
    environment = {"torch": "2.13.0", "cpu_cores": 2}
    config = {"backend": OPENAI, "engine": TOGGLES, "model": {"preset": "tiny", "device": "cpu"}}
    shown = header(report_of(tmp_path, config, environment))
    assert "meta-llama/Llama-3.1-8B-Instruct at http://10.0.0.7:8000/v1" in shown
    assert "the server&#x27;s: not reported (the OpenAI API carries none)" in shown
    assert "chunked_prefill" not in shown and "tiny" not in shown  # the local config describes no server
    assert "the server&#x27;s: not reported; this client: python 3.11, torch 2.13.0" in shown
    assert "the server&#x27;s: not reported; this client: test cpu, 2 cores" in shown


def test_a_bundled_run_s_header_shows_its_own_toggles(tmp_path):
    shown = header(report_of(tmp_path, {"engine": TOGGLES, "model": {"preset": "tiny", "device": "cpu"}}))
    assert "on: chunked_prefill, prefix_caching; off: cuda_graphs" in shown and "not reported" not in shown
