#!/usr/bin/env bash
# Token latency of each overlap mode (single step, async output, async scheduling, bursty and streamed
# 8-step windows) at batch 1 and 256, and the cpu-overhead ablation preset, on the H200. Writes
# overlap_latency.json, ablation-cpu-overhead.json and the logs to $1 (default $OUT); copy the JSON to
# runs/h200/.
#   source .device/setup.sh && bash benchmarks/h200_overlap.sh "$OUT"
# Takes at most about 10 minutes on an H200 (the timeouts below). Writes into DIR; the published files are
# docs/measurements/h200/overlap_latency.json and ablation-cpu-overhead.json.
set -u
out=${1:-$OUT}
work=/tmp/h200-overlap
rm -rf "$work" && mkdir -p "$work" "$out"
timeout 240 python benchmarks/overlap_latency.py --gpu --out "$out/overlap_latency.json" 2>&1 \
  | grep -v 'KV pool' | tee "$out/overlap_latency.log" | tail -12
# repeat 3 by default; REPEAT=1 fits the cpu-overhead preset's 5 variants in about two minutes
timeout 330 python -m llmbench ablate configs/llama3-8b-decode.yaml --preset cpu-overhead --repeat "${REPEAT:-3}" \
  --out "$work/ablation" --no-report 2>&1 | tee "$out/ablate-cpu-overhead.log" | tail -14
cp "$work/ablation/ablation.json" "$out/ablation-cpu-overhead.json"
ls -la "$out"
