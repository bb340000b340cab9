#!/usr/bin/env bash
# Output throughput of the decode-heavy load before and after the fixes that stopped the step-record
# drain and the sampler from blocking the host: BEFORE is a tree of the commit before them (default: this
# clone's b5d1921, exported with `git archive`; BEFORE_DIR names an exported tree where the GPU box has no
# git history), the current tree after, greedy; and the current tree at temperature 0.8 + top-p 0.95
# beside its greedy figure; each one `llmbench run --repeat 3` of that tree's own copy of the config.
# Writes sampling_drain.json (median and per-trial tok/s, GPU busy, readback wait) and the logs to $1.
#   source .device/setup.sh && BEFORE_DIR=.baseline bash benchmarks/h200_sampling_drain.sh "$OUT"
# On a CPU, for a smoke test: CONFIG=configs/ci.yaml bash benchmarks/h200_sampling_drain.sh /tmp/out
# Takes three `llmbench run --repeat 3` of at most 170 s each on an H200. Writes DIR/sampling_drain.json;
# the published one is docs/measurements/h200/sampling_drain.json.
set -u
out=${1:-$OUT}
before=${BEFORE:-b5d1921}
config=${CONFIG:-configs/llama3-8b-decode.yaml}  # each side runs its own copy of it
work=/tmp/h200-sampling-drain
rm -rf "$work" && mkdir -p "$work/before" "$out"
if [ -n "${BEFORE_DIR:-}" ]; then
  cp -r "$BEFORE_DIR/." "$work/before"
else
  git archive "$before" | tar -x -C "$work/before" || { echo "no commit $before in this clone's history"; exit 2; }
fi
point() {  # name, code directory, trials, --set arguments
  local name=$1 code=$2 trials=$3
  shift 3
  (cd "$code" && PYTHONPATH="$code:/tmp/site" timeout 170 python -m llmbench run "$code/$config" --repeat "$trials" \
    --out "$work/runs/$name" --set output.report=false "$@") > "$out/$name.log" 2>&1
  echo "$name: exit $? $(grep -m1 'output throughput' "$out/$name.log")"
}
t08=(--set workload.temperature=0.8)
point before-greedy "$work/before" 3
point current-greedy "$PWD" 3
point current-t0.8-p0.95 "$PWD" 3 "${t08[@]}" --set workload.top_p=0.95
python - "$work/runs" "$out/sampling_drain.json" "${BEFORE_DIR:-$before}" "current tree" "$config" <<'EOF'
import json, pathlib, statistics, sys
from llmbench.results.summary import RunSummary
work, target, before, after, config = pathlib.Path(sys.argv[1]), sys.argv[2], *sys.argv[3:]
points = {}
for run in sorted(p for p in work.iterdir() if (p / "summary.json").is_file()):
    summary = RunSummary.load(run)  # a file of the tree before is migrated (gpu_busy_fraction renamed)
    tok_s = [t.output_throughput for t in summary.trials or [summary.metrics]]
    points[run.name] = {
        "median_output_tok_s": statistics.median(tok_s),
        "trials_output_tok_s": tok_s,
        "gpu_busy_step_spans": summary.steps.value("gpu_busy_step_spans"),
        "mean_wait_ms": summary.steps.mean_wait_ms,
    }
result = {
    "command": "source .device/setup.sh && BEFORE_DIR=.baseline bash benchmarks/h200_sampling_drain.sh $OUT",
    "config": config,
    "before": before,
    "after": after,
    "current": "the tree the script ran in",
    "sampling": {"t0.8-p0.95": "workload.temperature=0.8 top_p=0.95"},
    "points": points,
}
pathlib.Path(target).write_text(json.dumps(result, indent=1) + "\n")
for name, p in points.items():
    print(f"{name:>18}: {p['median_output_tok_s']:10,.0f} tok/s (trials {', '.join(f'{x:,.0f}' for x in p['trials_output_tok_s'])})")
EOF
