"""The run's roofline bound from its step records: each step's max(FLOPs / peak FLOP/s, bytes / peak
bandwidth) at the measured ceilings, summed, against the run's output tokens and duration."""

import dataclasses

import msgspec
import pytest

from llmbench.device.ceilings import Ceilings
from llmbench.metrics.requests import compute_metrics
from llmbench.metrics.roofline import measured_costs, with_bound
from llmbench.results.steps import Steps
from tests.llmbench.metrics.tiny_counts import (
    TINY_KV_BYTES_PER_TOKEN,
    TINY_MATMUL_PARAMS,
    TINY_PARAM_BYTES,
)

TINY = {"model": {"preset": "tiny", "dtype": "bfloat16"}}
LLAMA3_8B = {"model": {"preset": "llama3-8b", "dtype": "bfloat16"}}
# 1 GFLOP/s and 1 GB/s: a step's bound is its larger count over 1e9
UNIT = Ceilings(1e9, 1e9, device="unit", dtype="bfloat16", method="given", ms=0.0)
# the issue's H200 figures: 784 TFLOP/s dense bf16, 4.2 TB/s copy
H200 = Ceilings(7.84e14, 4.2e12, device="H200", dtype="bfloat16", method="given", ms=0.0)


def step(prefill=0, decode=0, context=0, pairs=0, forwards=1):
    return {
        "num_prefill_tokens": prefill,
        "num_decode_seqs": decode,
        "num_context_tokens": context,
        "num_attention_pairs": pairs,
        "num_steps": forwards,
    }


def bounded(rows, config, ceilings, trials) -> Steps:
    """The step log's summary with the bound added to it (its step figures left out)."""
    return with_bound(Steps(num_steps=len(rows)), rows, config, ceilings, trials)


def trial(tokens, duration_s):
    return msgspec.structs.replace(
        compute_metrics([], [50]), total_output_tokens=tokens, duration_s=duration_s
    )


def test_each_step_is_bound_by_its_flops_or_its_bytes_whichever_is_longer():
    # a 10-token prompt from position 0: matmuls for 10 tokens, no logits counted (no decode),
    # attention over its 55 causal pairs (2 layers x 64 query channels x 4)
    prefill = step(prefill=10, context=10, pairs=55)
    prefill_flops = 2 * 10 * TINY_MATMUL_PARAMS + 4 * 2 * 64 * 55
    prefill_bytes = TINY_PARAM_BYTES + 10 * TINY_KV_BYTES_PER_TOKEN
    assert prefill_flops > prefill_bytes
    older = {k: v for k, v in prefill.items() if k != "num_attention_pairs"}  # a log from before the count
    assert measured_costs(TINY, UNIT).step_flops(older) == 2 * 10 * TINY_MATMUL_PARAMS + 4 * 2 * 64 * 10
    # one decode of a 100-token sequence: bytes win
    decode = step(decode=1, context=100, pairs=100)
    decode_bytes = TINY_PARAM_BYTES + 100 * TINY_KV_BYTES_PER_TOKEN
    decode_flops = 2 * TINY_MATMUL_PARAMS + 2 * 512 * 64 + 4 * 2 * 64 * 100
    assert decode_bytes > decode_flops
    idle = step()  # a step that ran no token takes no time
    s = bounded([prefill, decode, idle], TINY, UNIT, [trial(2, 0.5)])
    bound = (prefill_flops + decode_bytes) / 1e9
    assert s.bound_s == pytest.approx(bound, rel=1e-12)
    assert s.bound_output_throughput == pytest.approx(2 / bound, rel=1e-12)
    assert s.throughput_of_bound == pytest.approx(bound / 0.5, rel=1e-12)
    assert s.ceiling_gemm_flops_per_s == 1e9 and s.bound_unavailable is msgspec.UNSET


def test_tensor_parallel_ranks_and_the_measured_dtype_scale_the_bound():
    decode = step(decode=1, context=100, pairs=100)
    one = bounded([decode], TINY, UNIT, [trial(1, 1.0)]).bound_s
    two = bounded([decode], TINY, dataclasses.replace(UNIT, devices=2), [trial(1, 1.0)]).bound_s
    assert two == pytest.approx(one / 2)
    # measured in float32 (auto on a CPU): 4 bytes a weight and a KV element, whatever the config says
    costs = measured_costs(TINY, dataclasses.replace(UNIT, dtype="float32"))
    assert costs.dtype_bytes == 4 and costs.peaks_source == "measured"
    assert costs.bound_s(decode) == pytest.approx(
        2 * (TINY_PARAM_BYTES + 100 * TINY_KV_BYTES_PER_TOKEN) / 1e9
    )


def throughput_workload(forwards_per_decode_step: int) -> list[dict]:
    """Llama-3-8B, 256 prompts of 256 tokens and 128 output tokens: 8 prefill steps of 32 prompts
    (8,192 tokens), then 127 decodes of 256 sequences, in windows of the given number of forwards."""
    rows = [step(prefill=8192, context=8192, pairs=32 * 256 * 257 // 2) for _ in range(8)]
    done = 1  # the prefill sampled each sequence's first token
    while done < 128:
        n = min(forwards_per_decode_step, 128 - done)
        length = 256 + done + 1  # KV positions of each sequence at the window's first forward
        rows.append(step(decode=256, context=256 * length, pairs=256 * length, forwards=n))
        done += n
    return rows


def test_the_throughput_workload_reproduces_the_issues_hand_calculation():
    # issue 18: prefill 9.2e14 FLOP at 784 TFLOP/s = 1.17 s, then 127 decode steps at
    # max(26.8 GB / 4.2 TB/s, 3.84 TFLOP / 784 TFLOP/s) = 6.4 ms each: about 16.5k output tok/s
    costs = measured_costs(LLAMA3_8B, H200)
    prefill = throughput_workload(1)[:8]
    assert sum(costs.step_flops(r) for r in prefill) == pytest.approx(9.2e14, rel=0.01)
    assert sum(costs.bound_s(r) for r in prefill) == pytest.approx(1.17, rel=0.01)
    for n in (1, 8):
        s = bounded(throughput_workload(n), LLAMA3_8B, H200, [trial(256 * 128, 2.9)])
        assert s.bound_output_throughput == pytest.approx(16.5e3, rel=0.02)
        assert s.throughput_of_bound == pytest.approx(s.bound_s / 2.9)
    single = bounded(throughput_workload(1), LLAMA3_8B, H200, [trial(1, 1)]).bound_s
    windowed = bounded(throughput_workload(8), LLAMA3_8B, H200, [trial(1, 1)]).bound_s
    assert windowed == pytest.approx(single, rel=1e-9)  # a window's forwards read one more position each


def test_the_serial_bound_runs_matmuls_and_attention_one_after_the_other():
    costs = measured_costs(LLAMA3_8B, H200)
    rows = throughput_workload(8)
    assert all(costs.serial_bound_s(r) >= costs.bound_s(r) * (1 - 1e-12) for r in rows)
    # a prefill step is compute-bound in its matmuls and in its attention: the two bounds agree
    assert costs.serial_bound_s(rows[0]) == pytest.approx(costs.bound_s(rows[0]), rel=1e-12)
    # a decode window of 256 sequences: matmuls bound by their FLOPs (256 rows a weight sit past the
    # ridge point), attention by its KV reads; one after the other, their times add
    matmul_bytes, attention_bytes, matmul_flops, attention_flops = costs.step_parts(rows[8])
    assert (
        matmul_flops / 7.84e14 > matmul_bytes / 4.2e12
        and attention_bytes / 4.2e12 > attention_flops / 7.84e14
    )
    assert costs.serial_bound_s(rows[8]) == pytest.approx(matmul_flops / 7.84e14 + attention_bytes / 4.2e12)
    assert costs.bound_s(rows[8]) == pytest.approx((matmul_bytes + attention_bytes) / 4.2e12)
    # 7.0 ms a forward against the bound's 5.9 ms: 15.5k output tok/s against 16.5k
    s = bounded(rows, LLAMA3_8B, H200, [trial(256 * 128, 2.9)])
    assert s.serial_bound_output_throughput == pytest.approx(15.45e3, rel=0.01)
    assert s.throughput_of_serial_bound == pytest.approx(s.serial_bound_s / 2.9)


def test_trials_are_pooled_like_their_tokens_and_durations():
    rows = [step(decode=1, context=100, pairs=100)] * 3  # two trials' steps, in one log
    s = bounded(rows, TINY, UNIT, [trial(2, 1.0), trial(1, 3.0)])
    assert s.bound_output_throughput == pytest.approx(3 / s.bound_s)
    assert s.throughput_of_bound == pytest.approx(s.bound_s / 4.0)


def test_without_a_bound_the_summary_says_why():
    reason = "model.executor null: no model runs, so its roofline does not apply"
    s = bounded([step(decode=1, context=9)], TINY, reason, [trial(1, 1.0)])
    figures = ("bound_s", "bound_output_throughput", "throughput_of_bound")
    figures += ("serial_bound_s", "serial_bound_output_throughput", "throughput_of_serial_bound")
    assert s == Steps(num_steps=1, **dict.fromkeys(figures), bound_unavailable=reason)
    assert bounded([], TINY, UNIT, []).bound_unavailable == "no timed engine steps"
    old = {**step(decode=1), "num_context_tokens": None}  # a log from before the context count
    assert "batch context" in bounded([old], TINY, UNIT, [trial(1, 1.0)]).bound_unavailable
    none = bounded([step(decode=1, context=9)], TINY, UNIT, [trial(0, 1.0)])
    assert none.throughput_of_bound is None and none.bound_s > 0
    gone = bounded([step()], {"model": {"path": "/no/such/model"}}, UNIT, [trial(1, 1.0)])
    assert gone.bound_unavailable == "the model's shape cannot be read"


def test_the_bound_is_split_between_prefill_and_decode_steps_by_their_gpu_time():
    """Where the time beyond the bound goes: each kind of step's GPU time, and its bound over it."""
    costs = measured_costs(LLAMA3_8B, H200)
    rows = throughput_workload(8)
    for r in rows:  # prefill steps at 190 ms, decode windows at 10.4 ms a forward
        r["gpu_ms"] = 190.0 if r["num_prefill_tokens"] else 10.4 * r["num_steps"]
    s = bounded(rows, LLAMA3_8B, H200, [trial(256 * 128, 2.9)])
    prefill, decode = rows[:8], rows[8:]
    assert s.prefill_steps_gpu_s == pytest.approx(8 * 0.19)
    assert s.decode_steps_gpu_s == pytest.approx(127 * 0.0104)
    assert s.prefill_steps_of_bound == pytest.approx(sum(map(costs.bound_s, prefill)) / (8 * 0.19))
    assert s.decode_steps_of_bound == pytest.approx(sum(map(costs.bound_s, decode)) / (127 * 0.0104))
    assert s.decode_steps_of_serial_bound == pytest.approx(
        sum(map(costs.serial_bound_s, decode)) / (127 * 0.0104)
    )
    # at these times (and the issue's peaks) the decode windows hold the gap: 0.61 of their bound, the
    # prefill steps 0.77
    assert 0.55 < s.decode_steps_of_bound < 0.65 and 0.75 < s.prefill_steps_of_bound < 0.85
    # a trial's last step ran no forward (it hands back the outputs): no GPU time, nothing to split
    with_tail = bounded([*rows, step(forwards=1)], LLAMA3_8B, H200, [trial(256 * 128, 2.9)])
    assert with_tail.decode_steps_of_bound == s.decode_steps_of_bound
    # a run without GPU times (the CPU) has neither kind's figures
    del rows[3]["gpu_ms"]
    assert not any(
        k.startswith(("prefill_steps", "decode_steps"))
        for k in msgspec.to_builtins(bounded(rows, LLAMA3_8B, H200, [trial(1, 1)]))
    )


def test_the_run_table_and_the_report_name_each_kind_of_step_s_share_of_its_bound():
    from rich.console import Console

    from llmbench.cli.console import metrics_table
    from llmbench.report.format import describe, number
    from llmbench.results.steps import Steps
    from llmbench.results.summary import SCHEMA_VERSION, RunSummary

    steps = Steps(
        num_steps=0, prefill_steps_gpu_s=1.52, prefill_steps_of_bound=0.882, decode_steps_gpu_s=1.33
    )
    steps.decode_steps_of_bound = 0.614
    summary = RunSummary(
        schema_version=SCHEMA_VERSION, name="run", complete=True, config={}, metrics=None, steps=steps
    )
    console = Console(record=True, width=200)
    console.print(metrics_table(summary))
    assert "prefill 88.2% of 1.52 s, decode 61.4% of 1.33 s" in console.export_text()
    label = describe("decode_steps_of_bound")
    assert label.label == "Decode steps: fraction of bound" and number(0.614, label.unit) == "61.4%"
    assert (
        describe("prefill_steps_gpu_s").unit == "s"
        and "prompt token" in describe("prefill_steps_gpu_s").definition
    )
