#!/usr/bin/env bash
# `llmbench kernels` with the GPU's SM clock, power, temperatures and clock-event reasons sampled every
# 250 ms beside it (0x4: SW power cap). Run on the H200 with the device's setup sourced:
#   bash results/h200/kernels_power_trace/command.sh OUT_DIR
set -u
out=${1:?output directory}
mkdir -p "$out"
sleep 20  # the GPU idles first, so the trace starts from rest
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active \
  --format=csv -lms 250 > "$out/smi_during_kernels.csv" &
sampler=$!
python -m llmbench kernels --out "$out/kernels.json" > "$out/kernels.log" 2>&1
kill "$sampler"
