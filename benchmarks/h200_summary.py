"""Fold the H200 result files into DIR/summary.json and print the table: every target with its
measured value and a `met` flag, every figure taken from the file named beside it (nothing typed in by
hand). A file that is missing leaves its targets "not measured" (met: null) rather than failing.

    python benchmarks/h200_summary.py docs/measurements/h200

The files come from bash benchmarks/h200_measure.sh (decode_bs1, throughput_bundled/_hf, agreement, kernels
via llmbench kernels), bash benchmarks/h200_ablate_profile.sh (ablation, profile_all_off/_on), bash
benchmarks/h200_serving.sh (serving), bash benchmarks/h200_sampling_drain.sh (sampling_drain), and the
commands recorded in the others (cpu_overhead, overlap_latency, the ablations); throughput_bound.json is
the summary.json of `llmbench run configs/llama3-8b-throughput.yaml --repeat 3`.

Takes seconds. Writes DIR/summary.json (default DIR: docs/measurements/h200)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from h200_files import Files, ratio, target, throughput, variant

from llmbench.results.ablation import Variant
from llmbench.results.json_file import known
from llmbench.results.steps import Steps

THROUGHPUT_TARGET = 3.8  # bundled output throughput over HF eager generate's, same GPU, same run
DECODE_TARGET = 225.0  # bs1 tokens per second (or the roofline-derived target the file states, if higher)
ROOFLINE_TARGET = 0.85  # bs1 decode's share of the copy-bandwidth roofline
ABLATION_TARGET = 2.0  # all on / all off output throughput on the decode-heavy load
GPU_BUSY_TARGET = 0.95  # all on, GPU busy by step spans
SERVING_TARGET = 0.95  # through HTTP with the process split on, over the in-process output throughput
# engine CPU overhead, 256 decoding sequences, single step, graphs on (cpu_overhead.json): at most
PREPARE_TARGET_MS, HOST_TARGET_MS = 0.5, 1.0
ALL_OFF_BUSY_TARGET = 0.93  # GPU busy with every overlap optimization off (the cpu-overhead preset)
ITL_OVER_TPOT_TARGET = 1.10  # streamed 8-step windows: median ITL over median TPOT, at most
STREAMED_TARGET = 0.98  # streamed over bursty 8-step windows, output throughput
BOUND_TARGET = 0.80  # the throughput workload's output throughput over its roofline bound
PREFILL_TFLOPS_TARGET = 590.0  # prefill attention, B=1 new=8192: 0.75 of the 784 TFLOP/s GEMM peak
SHAREGPT_REQ_S_TARGET = 45.0  # vLLM 0.6.0's H100 figure scaled by 1.25 for the H200's memory bandwidth
SHAREGPT_TPOT_TARGET = 20.0  # ms, median


def decode_targets(files: Files) -> list[dict[str, Any]]:
    decode = files.get("decode_bs1.json")
    best = decode["tokens_per_s"][decode["best_mode"]] if decode else None
    goal = max(DECODE_TARGET, decode.get("target_tokens_per_s", 0)) if decode else DECODE_TARGET
    roofline = decode["fraction_of_roofline"][decode["best_mode"]] if decode else None
    mode = f" ({decode['best_mode']})" if decode else ""
    return [
        target(f"bs1 decode{mode}", best, goal, ["decode_bs1.json"], "tok/s"),
        target(f"bs1 decode{mode} / copy-bandwidth roofline", roofline, ROOFLINE_TARGET, ["decode_bs1.json"]),
    ]


def throughput_targets(files: Files) -> list[dict[str, Any]]:
    bundled, hf = (
        throughput(files.run("throughput_bundled.json")),
        throughput(files.run("throughput_hf.json")),
    )
    row = target(
        "throughput workload: bundled / HF generate output tok/s",
        ratio(bundled, hf),
        THROUGHPUT_TARGET,
        ["throughput_bundled.json", "throughput_hf.json"],
        "x",
    )
    return [{**row, "bundled_output_tok_s": bundled, "hf_output_tok_s": hf}]


def ablation_targets(files: Files) -> list[dict[str, Any]]:
    rows = []
    for name in ("ablation.json", "ablation_slower_host.json"):
        ablation = files.ablation(name)
        off, on = variant(ablation, "all off"), variant(ablation, "all on")
        off_tps, on_tps = throughput(off), throughput(on)
        label = "decode-heavy load: all on / all off" + (" (slower host)" if "slower" in name else "")
        row = target(label, ratio(on_tps, off_tps), ABLATION_TARGET, [name], "x")
        rows.append({**row, "all_off_output_tok_s": off_tps, "all_on_output_tok_s": on_tps})
    busy = _busy(variant(files.ablation("ablation.json"), "all on"))
    rows.append(target("GPU busy (step spans), all on", busy, GPU_BUSY_TARGET, ["ablation.json"]))
    return rows


def serving_targets(files: Files) -> list[dict[str, Any]]:
    variants = (files.get("serving.json") or {}).get("variants") or {}
    in_process = (variants.get("bundled in-process") or {}).get("output_throughput")
    split_off = (variants.get("HTTP, split off") or {}).get("output_throughput")
    split_on = (variants.get("HTTP, split on") or {}).get("output_throughput")
    row = target(
        "decode-heavy load through HTTP, split on / in-process",
        ratio(split_on, in_process),
        SERVING_TARGET,
        ["serving.json"],
        "x",
    )
    return [{**row, "in_process_output_tok_s": in_process, "split_gain": ratio(split_on, split_off)}]


def kernel_targets(files: Files) -> list[dict[str, Any]]:
    kernels = files.get("kernels.json")
    if kernels is None:
        return [target("kernels with a bandwidth target", None, 0.8, ["kernels.json"])]
    return [
        target(
            f"{k['kernel']} ({k['median_us']:.0f} us) / copy bandwidth",
            k["fraction_of_ceiling"],
            k["target"],
            ["kernels.json"],
        )
        for k in kernels["kernels"]
        if k.get("target") is not None
    ]


def cpu_overhead_targets(files: Files) -> list[dict[str, Any]]:
    rows = (files.get("cpu_overhead.json") or {}).get("rows") or []
    single = next((r for r in rows if r.get("num_scheduler_steps") == 1), {})
    name = "256 decoding sequences, single step, graphs on"
    busy = _busy(variant(files.ablation("ablation-cpu-overhead.json"), "all off"))
    return [
        target(
            f"{name}: prepare ms",
            single.get("prepare_ms"),
            PREPARE_TARGET_MS,
            ["cpu_overhead.json"],
            "ms",
            at_most=True,
        ),
        target(
            f"{name}: host ms a step",
            single.get("host_ms_per_step"),
            HOST_TARGET_MS,
            ["cpu_overhead.json"],
            "ms",
            at_most=True,
        ),
        target(
            "GPU busy (step spans), every overlap optimization off",
            busy,
            ALL_OFF_BUSY_TARGET,
            ["ablation-cpu-overhead.json"],
        ),
    ]


def overlap_targets(files: Files) -> list[dict[str, Any]]:
    rows = (files.get("overlap_latency.json") or {}).get("rows") or []
    found = []
    for batch in (1, 256):
        streamed, bursty = (
            next((r for r in rows if r["mode"] == mode and r["batch"] == batch), {})
            for mode in ("streamed N=8", "bursty N=8")
        )
        found.append(
            target(
                f"streamed N=8, batch {batch}: median ITL / median TPOT",
                streamed.get("itl_over_tpot"),
                ITL_OVER_TPOT_TARGET,
                ["overlap_latency.json"],
                "x",
                at_most=True,
            )
        )
        found.append(
            target(
                f"streamed / bursty N=8, batch {batch}: output tok/s",
                ratio(streamed.get("output_throughput"), bursty.get("output_throughput")),
                STREAMED_TARGET,
                ["overlap_latency.json"],
                "x",
            )
        )
    return found


def _busy(measured: Variant | None) -> float | None:
    return known(measured.steps.gpu_busy_step_spans) if measured else None


def _bound_steps(files: Files) -> Steps:
    """The throughput workload's step summary: its bound's figures (none where the file is missing)."""
    run = files.run("throughput_bound.json")
    return run.steps if run else Steps(num_steps=0)


def efficiency_targets(files: Files) -> list[dict[str, Any]]:
    steps = _bound_steps(files)
    kernels = (files.get("kernels.json") or {}).get("kernels") or []
    ours = [  # the paged kernel, or the split that sends a prompt's own K/V to SDPA
        k["achieved"]
        for k in kernels
        if k["shape"] == "B=1 new=8192 cached=0" and k["kernel"].startswith(("paged_prefill", "prefill_att"))
    ]
    return [
        target(
            "throughput workload / its roofline bound",
            known(steps.throughput_of_bound),
            BOUND_TARGET,
            ["throughput_bound.json"],
            "x",
        ),
        target(
            "prefill attention B=1 new=8192, our best op",
            max(ours, default=None),
            PREFILL_TFLOPS_TARGET,
            ["kernels.json"],
            "TFLOP/s",
        ),
    ]


def sharegpt_targets(files: Files) -> list[dict[str, Any]]:
    """configs/llama3-8b-sharegpt.yaml as committed, 1,000 requests at inf, the median of 3 trials."""
    name = "sharegpt/final.json"
    run = files.run(name)
    metrics = run.metrics if run else None
    label = "ShareGPT-like, 1000 requests at inf"
    req_s = metrics.request_throughput if metrics else None
    tpot = metrics.latencies.median_tpot_ms if metrics else None
    return [
        target(f"{label}: req/s", req_s, SHAREGPT_REQ_S_TARGET, [name], "req/s"),
        target(f"{label}: median TPOT ms", tpot, SHAREGPT_TPOT_TARGET, [name], "ms", at_most=True),
    ]


def reported(files: Files) -> list[dict[str, Any]]:
    """Figures shown beside the targets, with no target of their own."""
    rows = []
    for name in ("profile_all_off.json", "profile_all_on.json"):
        profile = files.get(name)
        value = profile.get("kernel_busy_fraction") if profile else None
        rows.append(
            {"name": f"kernel busy (nsys), {name[8:-5].replace('_', ' ')}", "value": value, "files": [name]}
        )
    points = (files.get("sampling_drain.json") or {}).get("points") or {}

    def tok_s(name: str) -> float | None:
        return (points.get(name) or {}).get("median_output_tok_s")

    for name, a, b in (
        (
            "decode-heavy load greedy, current / before the drain and sampler fixes",
            "current-greedy",
            "before-greedy",
        ),
        ("decode-heavy load, temperature 0.8 + top-p 0.95 / greedy", "current-t0.8-p0.95", "current-greedy"),
    ):
        rows.append({"name": name, "value": ratio(tok_s(a), tok_s(b)), "files": ["sampling_drain.json"]})
    for name, label in (
        ("ablation-cpu-overhead.json", "cpu-overhead preset: all on / all off"),
        ("ablation-cpu-overhead-server.json", "cpu-overhead preset through the server: all on / all off"),
        ("ablation-prefill-attention.json", "throughput workload: prefill_attention sdpa / paged"),
    ):
        ablation = files.ablation(name)
        on, off = throughput(variant(ablation, "all on")), throughput(variant(ablation, "all off"))
        rows.append({"name": label, "value": ratio(on, off), "files": [name]})
    steps = _bound_steps(files)
    rows.append(
        {
            "name": "throughput workload / its serial bound (matmuls, then attention)",
            "value": known(steps.throughput_of_serial_bound),
            "files": ["throughput_bound.json"],
        }
    )
    for kind, label in (("prefill", "steps that ran a prompt token"), ("decode", "decode-only steps")):
        rows.append(
            {
                "name": f"throughput workload, {label}: bound / their GPU time",
                "value": steps.value(f"{kind}_steps_of_bound"),
                "gpu_s": steps.value(f"{kind}_steps_gpu_s"),
                "of_serial_bound": steps.value(f"{kind}_steps_of_serial_bound"),
                "files": ["throughput_bound.json"],
            }
        )
    agreement = files.get("agreement.json")
    rows.append(
        {
            "name": "greedy token agreement, Triton vs torch backend",
            "value": agreement.get("token_agreement") if agreement else None,
            "identical_requests": agreement.get("identical_requests") if agreement else None,
            "num_requests": agreement.get("num_requests") if agreement else None,
            "files": ["agreement.json"],
        }
    )
    return rows


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/measurements/h200")
    files = Files(out)
    targets = (
        decode_targets(files)
        + throughput_targets(files)
        + ablation_targets(files)
        + serving_targets(files)
        + kernel_targets(files)
        + cpu_overhead_targets(files)
        + overlap_targets(files)
        + efficiency_targets(files)
        + sharegpt_targets(files)
    )
    summary = {
        "command": f"python benchmarks/h200_summary.py {out}",
        "targets": targets,
        "all_met": all(t["met"] for t in targets),
        "reported": reported(files),
        "not_measured": files.missing,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for row in targets + summary["reported"]:
        value = "-" if row["value"] is None else f"{row['value']:,.3f}".rstrip("0").rstrip(".")
        goal = f"{'<=' if row.get('at_most') else '>='} {row['target']:g}" if "target" in row else ""
        print(f"{row['name']:<62} {value:>10} {goal:>9} {row.get('status', '')}")
    if files.missing:
        print("not measured (file missing): " + ", ".join(files.missing))


if __name__ == "__main__":
    main()
