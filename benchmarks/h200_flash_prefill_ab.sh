#!/usr/bin/env bash
# prefill_attention flash against the other two end to end on the H200, 3 trials each: the throughput
# workload (256-token prompts), and long prompts (16 of 8,000 tokens in 4,096-token chunks: a fresh
# first chunk, then one after a 4,096-token cached prefix). Each run's summary.json, which holds its
# command, is copied to OUT_DIR/<workload>_<mode>.json.
#   bash benchmarks/h200_flash_prefill_ab.sh OUT_DIR
# Takes five `llmbench run --repeat 3` on an H200, each a model load and three trials (the flash runs
# compile their kernels at start). Writes OUT_DIR/<workload>_<mode>.json; the published files are in
# docs/measurements/h200/flash_ab/.
set -u
out=$1
long=(--set workload.num_requests=16 --set workload.warmup_requests=2 --set workload.input.mean=8000
  --set workload.output.mean=16 --set engine.max_num_seqs=16 --set engine.max_num_batched_tokens=4096
  --set engine.max_model_len=8192)
ab() {  # workload mode [overrides...]
  local name=$1 mode=$2
  shift 2
  python -m llmbench run configs/llama3-8b-throughput.yaml --repeat 3 --no-report "$@" \
    --set engine.prefill_attention="$mode" --out "/tmp/ab_${name}_$mode" > "/tmp/ab_${name}_$mode.log" 2>&1
  cp "/tmp/ab_${name}_$mode/summary.json" "$out/${name}_$mode.json"
  python - "$out/${name}_$mode.json" <<'PY'
import sys
from llmbench.results.summary import RunSummary
d = RunSummary.load(sys.argv[1])
trials = [(round(t.duration_s, 3), round(t.output_throughput), round(t.latencies.mean_ttft_ms)) for t in d.trials]
print(sys.argv[1], "of bound", round(d.steps.value("throughput_of_bound") or 0, 3), trials)
PY
}
for mode in flash paged; do ab throughput "$mode"; done
for mode in flash sdpa paged; do ab long "$mode" "${long[@]}"; done
