#!/usr/bin/env bash
# Performance regression gate: the engine's CPU cost per step of configs/ci.yaml (null executor, the
# engine's CPU path), this checkout against a recorded baseline commit, both measured here.
#
#   scripts/perf_gate.sh [--mode instructions|wall] [--baseline COMMIT] [--current COMMIT] [--pairs N]
#                        [--threshold PCT] [--keep DIR] [--history FILE] [--markdown FILE] [--junit FILE]
#
# --mode      instructions (default): instructions per engine step under Valgrind, one run a side, the same
#             count whatever else the machine is doing; wall: CPU ms per step from interleaved runs, for
#             what counts cannot see (waits, syscalls, a GPU)
# --baseline  default: the commit named in scripts/perf_gate_baseline (built in a git worktree)
# --current   default: this checkout's working tree as it is; a commit is built in a worktree
# --pairs     wall mode: baseline/current run pairs a round (default 20); while the runs are too noisy to
#             judge the threshold, another round, up to three
# --threshold the slowdown that fails (default 2% for instructions, 10% for wall time, each chosen from
#             measured A/A spread: docs/guides/ci-gate.md)
# --keep DIR  copy the verdicts (verdicts.json) there
# --history   append this gate's record (commit, date, metric, value, interval, verdict) to a JSONL file;
#             `llmbench history FILE` charts it
# --markdown  append a Markdown summary to this file (and to $GITHUB_STEP_SUMMARY when that is set)
# --junit     write JUnit XML there, one test case per metric
#
# A known slowdown, for measuring the gate's detection (scripts/perf_gate_calibrate.py), is injected into
# the current side (then always a worktree of --current, default HEAD) at PERF_GATE_INJECT_AT (schedule:
# Scheduler.schedule, the default; prepare: input preparation, InputBuffers.prepare):
#   PERF_GATE_INJECT_LOOPS=N  N turns of an empty Python loop per call: a fixed count of instructions
#   PERF_GATE_INJECT_US=N     a busy-wait of N microseconds per call: a fixed time (wall mode)
# The engine itself has no such hook.
#
# Exit codes: 0 pass; 1 regression (or a current side that completed no request); 2 usage, or a side that
# cannot be measured; 3 can't tell (too noisy to judge the threshold).
set -euo pipefail

usage() {
    echo "usage: scripts/perf_gate.sh [--mode instructions|wall] [--baseline COMMIT] [--current COMMIT]" \
        "[--pairs N] [--threshold PCT] [--keep DIR] [--history FILE] [--markdown FILE] [--junit FILE]" >&2
    exit 2
}
fail_usage() {
    echo "perf gate: $1" >&2
    exit 2
}

root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null)" || fail_usage "not inside a git clone"
baseline="" current="" pairs=20 threshold="" keep="" mode=instructions outputs=()
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case "$1" in
        --baseline) baseline="$2" ;;
        --current) current="$2" ;;
        --pairs) pairs="$2" ;;
        --threshold) threshold="$2" ;;
        --keep) keep="$2" ;;
        --mode) mode="$2" ;;
        --history | --markdown | --junit) outputs+=("$1" "$(realpath -m "$2")") ;;
        *) usage ;;
    esac
    shift 2
done
[[ "$pairs" =~ ^[0-9]+$ ]] && ((pairs >= 2 && pairs <= 1000)) || fail_usage "--pairs takes a whole number 2 to 1000"
[[ "$mode" == instructions || "$mode" == wall ]] || fail_usage "--mode takes instructions or wall"
[[ -z "$threshold" || "$threshold" =~ ^[0-9]+(\.[0-9]+)?%?$ ]] \
    || fail_usage "--threshold takes a slowdown like 10% or 0.1"
inject_us="${PERF_GATE_INJECT_US:-}" inject_loops="${PERF_GATE_INJECT_LOOPS:-}"
inject_at="${PERF_GATE_INJECT_AT:-schedule}"
[[ -z "$inject_us" || "$inject_us" =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail_usage "PERF_GATE_INJECT_US must be microseconds"
[[ -z "$inject_loops" || "$inject_loops" =~ ^[0-9]+$ ]] \
    || fail_usage "PERF_GATE_INJECT_LOOPS must be a whole number"
[[ -z "$inject_us" || -z "$inject_loops" ]] \
    || fail_usage "PERF_GATE_INJECT_US and PERF_GATE_INJECT_LOOPS: one or the other"
case "$inject_at" in
    schedule) inject_file=engine/scheduling/scheduler.py inject_class=Scheduler inject_method=schedule ;;
    prepare) inject_file=engine/execution/input_batch.py inject_class=InputBuffers inject_method=prepare ;;
    *) fail_usage "PERF_GATE_INJECT_AT takes schedule or prepare" ;;
esac
inject="${inject_us}${inject_loops}"
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
    # a commit from before the engine's folders keeps the module at the engine's top level (CHANGELOG.md)
    [ -f "$current_tree/$inject_file" ] || inject_file="engine/${inject_file##*/}"
    if [ -n "$inject_loops" ]; then
        # repeat() hands out one object: every turn costs the same (range() allocates past 256)
        slowdown="for _ in itertools.repeat(None, $inject_loops):
            pass" what="$inject_loops loop turns"
    else
        slowdown="end = time.perf_counter() + $inject_us / 1e6
        while time.perf_counter() < end:
            pass" what="$inject_us us"
    fi
    cat >>"$current_tree/$inject_file" <<EOF


# scripts/perf_gate.sh: an injected slowdown of every $inject_class.$inject_method() ($what)
def _perf_gate_slowed(method):
    import itertools
    import time

    def slowed(self, *args, **kwargs):
        $slowdown
        return method(self, *args, **kwargs)

    return slowed


$inject_class.$inject_method = _perf_gate_slowed($inject_class.$inject_method)
EOF
fi

label="${current:0:12}"
how="instructions per step under Valgrind, one run a side"
[ "$mode" = wall ] && how="CPU ms per step, $pairs interleaved pairs a round"
echo "perf gate: baseline ${baseline:0:12}, current ${label:-working tree}, $how" \
    "${inject:+(injected: ${what:-} per $inject_class.$inject_method())}" >&2
current_commit="${current:-$(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD || echo +)}"
cd "$root"
status=0
python3 -m llmbench.cli.perf_gate "$work/baseline-tree" "$current_tree" "$work/runs" --mode "$mode" \
    --pairs "$pairs" ${threshold:+--threshold "$threshold"} --json "$work/verdicts.json" \
    --baseline-commit "$baseline" --current-commit "$current_commit" ${outputs[@]+"${outputs[@]}"} \
    || status=$?
if [ -n "$keep" ] && [ -f "$work/verdicts.json" ]; then
    mkdir -p "$keep"
    cp "$work/verdicts.json" "$keep/"
fi
exit "$status"
