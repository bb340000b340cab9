#!/usr/bin/env bash
# Output throughput of the decode-heavy load before and after the commit that stopped the step-record
# drain and the sampler from blocking the host (AFTER, found by its subject, against its parent), both
# taken from this clone's history so nothing else differs, greedy and at temperature 0.8; then the
# current tree greedy and at temperature 0.8 + top-p 0.95, each one `llmbench run --repeat 3`; and the
# all-off load once on each side for its GPU busy (step spans), which no longer counts input preparation.
# Writes sampling_drain.json (median and per-trial tok/s, GPU busy, readback wait) and the logs to $1.
#   source .device/setup.sh && bash scripts/h200_sampling_drain.sh "$OUT"
# On a CPU, for a smoke test: CONFIG=configs/ci.yaml bash scripts/h200_sampling_drain.sh /tmp/out
set -u
out=${1:-$OUT}
after_commit=${AFTER:-$(git log -1 --format=%h --grep='Step timing and sampling without hidden host waits')}
before=${BEFORE:-$after_commit^}
config=$PWD/${CONFIG:-configs/llama3-8b-decode.yaml}
work=/tmp/h200-sampling-drain
rm -rf "$work" && mkdir -p "$work/before" "$work/after" "$out"
for side in before after; do
  commit=$([ $side = before ] && echo "$before" || echo "$after_commit")
  git archive "$commit" | tar -x -C "$work/$side" || { echo "no commit $commit in this clone's history"; exit 2; }
done
point() {  # name, code directory, trials, --set arguments
  local name=$1 code=$2 trials=$3
  shift 3
  (cd "$code" && PYTHONPATH="$code:/tmp/site" timeout 170 python -m llmbench run "$config" --repeat "$trials" \
    --out "$work/runs/$name" --set output.report=false "$@") > "$out/$name.log" 2>&1
  echo "$name: exit $? $(grep -m1 'output throughput' "$out/$name.log")"
}
t08=(--set workload.temperature=0.8)
point before-greedy "$work/before" 3
point after-greedy "$work/after" 3
point before-t0.8 "$work/before" 3 "${t08[@]}"
point after-t0.8 "$work/after" 3 "${t08[@]}"
point current-greedy "$PWD" 3
point current-t0.8-p0.95 "$PWD" 3 "${t08[@]}" --set workload.top_p=0.95
# every toggle off: the synchronous steps whose input preparation the step span used to count as busy
all_off=(--set engine.process_split=false --set engine.async_output=false --set engine.num_scheduler_steps=1
  --set engine.cuda_graphs=false --set engine.chunked_prefill=false --set engine.prefix_caching=false)
point before-all-off "$work/before" 1 "${all_off[@]}"
point after-all-off "$work/after" 1 "${all_off[@]}"
python - "$work/runs" "$out/sampling_drain.json" "$before" "$after_commit" "$config" <<'EOF'
import json, pathlib, statistics, sys
work, target, before, after, config = pathlib.Path(sys.argv[1]), sys.argv[2], *sys.argv[3:]
points = {}
for run in sorted(p for p in work.iterdir() if (p / "summary.json").is_file()):
    summary = json.loads((run / "summary.json").read_text())
    steps = summary.get("steps") or {}
    tok_s = [t["output_throughput"] for t in summary.get("trials") or [summary["metrics"]]]
    points[run.name] = {
        "median_output_tok_s": statistics.median(tok_s),
        "trials_output_tok_s": tok_s,
        "gpu_busy_step_spans": steps.get("gpu_busy_step_spans", steps.get("gpu_busy_fraction")),
        "mean_wait_ms": steps.get("mean_wait_ms"),
    }
result = {
    "command": "source .device/setup.sh && bash scripts/h200_sampling_drain.sh $OUT",
    "config": config,
    "before": before,
    "after": after,
    "current": "the tree the script ran in",
    "sampling": {"t0.8": "workload.temperature=0.8", "t0.8-p0.95": "workload.temperature=0.8 top_p=0.95"},
    "points": points,
}
pathlib.Path(target).write_text(json.dumps(result, indent=1) + "\n")
for name, p in points.items():
    print(f"{name:>18}: {p['median_output_tok_s']:10,.0f} tok/s (trials {', '.join(f'{x:,.0f}' for x in p['trials_output_tok_s'])})")
EOF
