#!/usr/bin/env bash
# Performance regression gate: CPU ms per engine step of configs/ci.yaml (null executor, the engine's CPU
# path), this checkout against a recorded baseline commit, both measured here in interleaved runs.
#
#   scripts/perf_gate.sh [--baseline COMMIT] [--current COMMIT] [--pairs N] [--threshold PCT] [--keep DIR]
#
# --baseline  default: the commit named in scripts/perf_gate_baseline (built in a git worktree)
# --current   default: this checkout's working tree as it is; a commit is built in a worktree
# --pairs     baseline/current run pairs a round (default 20); while the runs are too noisy to catch twice
#             the threshold, another round, up to three
# --threshold the slowdown that fails (default 10%, chosen from measured A/A noise: docs/guides/ci-gate.md);
#             the gate also fails when its trials are too noisy to catch twice that
# --keep DIR  copy the verdicts (verdicts.json) there
#
# PERF_GATE_INJECT_US=N makes the current side (then always a worktree of --current, default HEAD) busy-wait
# N microseconds at the start of every Scheduler.schedule(), a known slowdown for measuring the gate's
# detection rate (scripts/perf_gate_calibrate.py). The engine itself has no such hook.
#
# Exit codes: 0 pass, 1 regression (or a current side that completed no request, or noise too high to
# resolve the threshold), 2 usage or a side that cannot run the config.
set -euo pipefail

usage() {
    echo "usage: scripts/perf_gate.sh [--baseline COMMIT] [--current COMMIT] [--pairs N]" \
        "[--threshold PCT] [--keep DIR]" >&2
    exit 2
}
fail_usage() {
    echo "perf gate: $1" >&2
    exit 2
}

root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null)" || fail_usage "not inside a git clone"
baseline="" current="" pairs=20 threshold=10% keep=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case "$1" in
        --baseline) baseline="$2" ;;
        --current) current="$2" ;;
        --pairs) pairs="$2" ;;
        --threshold) threshold="$2" ;;
        --keep) keep="$2" ;;
        *) usage ;;
    esac
    shift 2
done
[[ "$pairs" =~ ^[0-9]+$ ]] && ((pairs >= 2 && pairs <= 1000)) || fail_usage "--pairs takes a whole number 2 to 1000"
[[ "$threshold" =~ ^[0-9]+(\.[0-9]+)?%?$ ]] || fail_usage "--threshold takes a slowdown like 10% or 0.1"
inject="${PERF_GATE_INJECT_US:-}"
[[ -z "$inject" || "$inject" =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail_usage "PERF_GATE_INJECT_US must be microseconds"
if [ -z "$baseline" ]; then
    [ -f "$root/scripts/perf_gate_baseline" ] || fail_usage "no --baseline and no scripts/perf_gate_baseline"
    baseline="$(tr -d '[:space:]' <"$root/scripts/perf_gate_baseline")"
fi
resolve() {
    git -C "$root" rev-parse --verify -q "$1^{commit}" \
        || fail_usage "commit $1 is not in this clone's history (fetch it, or name another)"
}
baseline="$(resolve "$baseline")"
[ -z "$current" ] && [ -n "$inject" ] && current=HEAD
[ -z "$current" ] || current="$(resolve "$current")"

work="$(mktemp -d)"
cleanup() {
    set +e  # remove whatever is there, whatever fails
    for tree in "$work"/*-tree; do
        [ -d "$tree" ] && git -C "$root" worktree remove --force --force "$tree" >/dev/null 2>&1
    done
    rm -rf "$work"
    git -C "$root" worktree prune
}
trap cleanup EXIT
trap "exit 130" INT TERM  # the EXIT trap then removes the worktrees
git -C "$root" worktree add -q --detach "$work/baseline-tree" "$baseline"
current_tree="$root"
if [ -n "$current" ]; then
    current_tree="$work/current-tree"
    git -C "$root" worktree add -q --detach "$current_tree" "$current"
fi
if [ -n "$inject" ]; then
    cat >>"$current_tree/engine/scheduler.py" <<EOF


# scripts/perf_gate.sh: PERF_GATE_INJECT_US=$inject, an injected slowdown of every schedule()
def _perf_gate_slowed(schedule, seconds):
    import time

    def slowed(self, *args, **kwargs):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return schedule(self, *args, **kwargs)

    return slowed


Scheduler.schedule = _perf_gate_slowed(Scheduler.schedule, $inject / 1e6)
EOF
fi

label="${current:0:12}"
echo "perf gate: baseline ${baseline:0:12}, current ${label:-working tree}, $pairs interleaved pairs" \
    "${inject:+(injected: ${inject} us per schedule())}" >&2
cd "$root"
status=0
python3 -m llmbench.cli.perf_gate "$work/baseline-tree" "$current_tree" "$work/runs" --pairs "$pairs" \
    --threshold "$threshold" --json "$work/verdicts.json" || status=$?
if [ -n "$keep" ] && [ -f "$work/verdicts.json" ]; then
    mkdir -p "$keep"
    cp "$work/verdicts.json" "$keep/"
fi
exit "$status"
