#!/usr/bin/env bash
# The serving measurement on one H200: configs/llama3-8b-decode.yaml (256 concurrent streams) in-process,
# and through HTTP against llmbench serve with engine.process_split off and on, 3 trials each; writes
# $1/serving.json (default runs/h200), the log beside it, and prints one line per variant. 4-6 minutes.
#   source .device/setup.sh && bash benchmarks/h200_serving.sh runs/h200
# Writes DIR/serving.json; the published one is docs/measurements/h200/serving.json.
set -u
out=${1:-runs/h200}
mkdir -p "$out"
timeout 360 python benchmarks/h200_serving.py "$out" --repeat 3 > "$out/serving.log" 2>&1
tail -n 5 "$out/serving.log"
