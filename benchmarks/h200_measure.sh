#!/usr/bin/env bash
# Every H200 measurement of the GPU path in one go (one device call): bs1 decode against the roofline,
# the throughput workload on the bundled engine and on HF generate, greedy agreement of the Triton and
# torch backends, the CUDA-graph tests. Results land in $1 (default runs/h200); a table is printed last.
#   bash benchmarks/h200_measure.sh runs/h200
# Takes at most about 10 minutes on an H200 (the timeouts below). Writes into DIR (default runs/h200);
# the published files are in docs/measurements/h200/.
set -u
out=${1:-runs/h200}
mkdir -p "$out"
timeout 150 python benchmarks/h200_decode.py --out "$out/decode_bs1.json" 2>&1 | tee "$out/decode_bs1.log"
for backend in bundled hf; do
  timeout 120 python -m llmbench run configs/llama3-8b-throughput.yaml --set "backend.type=$backend" \
    --out "$out/run-$backend" --no-report > "$out/throughput_$backend.log" 2>&1
  cp "$out/run-$backend/summary.json" "$out/throughput_$backend.json"
  tail -3 "$out/throughput_$backend.log"
done
timeout 120 python benchmarks/backend_agreement.py --out "$out/agreement.json" 2>&1 | tail -2
timeout 90 python -m pytest -q tests/engine/test_cuda_graphs.py 2>&1 | tail -3
python benchmarks/h200_summary.py "$out"
