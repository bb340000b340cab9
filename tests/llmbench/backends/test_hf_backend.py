import pytest

from llmbench.config.load import parse_config
from llmbench.results.records import load_requests
from llmbench.run.runner import run_benchmark

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


def test_abort_stops_a_running_row_and_an_all_aborted_batch_ends_early():
    from llmbench.engine.request import SamplingParams

    from llmbench.backends.hf import HFBackend

    backend = HFBackend()
    backend.start(parse_config({**RUN, "engine": {"max_num_seqs": 3}}, ["backend.type=hf"]))
    forwards = []
    backend.model.register_forward_hook(lambda *_: forwards.append(1))
    long, short = (
        SamplingParams(max_tokens=60, ignore_eos=True),
        SamplingParams(max_tokens=3, ignore_eos=True),
    )
    for request_id, params in (("a", long), ("b", short), ("c", long)):
        backend.submit(request_id, [5, 6, 7], params)
    seen: dict[str, list] = {"a": [], "b": [], "c": [], "d": []}
    while not seen["a"]:
        for out in backend.poll():
            seen[out.request_id].append(out)
    backend.abort("a")
    after_abort = len(seen["a"])
    while backend.has_unfinished() and not (seen["b"] and seen["b"][-1].finished):
        for out in backend.poll():
            seen[out.request_id].append(out)
    backend.abort("c")
    while backend.has_unfinished():
        for out in backend.poll():
            seen[out.request_id].append(out)
    backend.submit("d", [8, 9], SamplingParams(max_tokens=1, ignore_eos=True))
    while backend.has_unfinished():
        for out in backend.poll():
            seen[out.request_id].append(out)
    backend.check_empty()
    backend.close()
    # "a" streamed nothing after its abort; "b" finished normally beside it
    assert len(seen["a"]) == after_abort and not any(out.finished for out in seen["a"] + seen["c"])
    assert seen["b"][-1].finished and len(seen["b"][-1].token_ids) == 3
    assert seen["d"][-1].finished
    # with every row done or aborted the batch stopped: far fewer than its 200 decode forwards
    assert len(forwards) < 100
