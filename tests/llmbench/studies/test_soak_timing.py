"""The soak's per-batch block check wraps the executor: with GPU step timing (a CUDA engine) it must
pass the step's start event on, so the check runs on a GPU too."""

from llmbench.studies.soak import _check_each_batch
from tests.engine.fake_device import FORWARD_MS, timed_model_engine
from tests.engine.helpers import run, workload


def test_checked_batches_keep_their_gpu_spans():
    engine, _ = timed_model_engine(num_scheduler_steps=4)
    _check_each_batch(engine)
    run(engine, workload())
    records = [r for r in engine.drain_step_records() if r.num_prefill_tokens + r.num_decode_seqs]
    assert records and [r.gpu_ms for r in records] == [FORWARD_MS * r.num_steps for r in records]
