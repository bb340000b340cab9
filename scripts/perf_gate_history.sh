#!/usr/bin/env bash
# A gate history over past commits: scripts/perf_gate.sh once per commit, each against the same baseline,
# every record appended to one JSONL file, then `llmbench history` charts it. A history that CI builds one
# gate at a time looks the same; this makes one from commits already landed.
#
#   scripts/perf_gate_history.sh FILE COMMIT [COMMIT ...]   (oldest first; extra gate options in GATE_ARGS)
#
# Each gate is an instructions gate unless GATE_ARGS says --mode wall: about a minute a commit on 2 cores.
# The published history is docs/measurements/cpu/perf_gate_history.jsonl (docs/commands/history.md).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/perf_gate_history.sh FILE COMMIT [COMMIT ...]" >&2; exit 2; }
history="$(realpath -m "$1")"
shift
for commit in "$@"; do
    git rev-parse --verify -q "$commit^{commit}" >/dev/null || { echo "not a commit: $commit" >&2; exit 2; }
done
status=0
for commit in "$@"; do
    code=0
    # shellcheck disable=SC2086  # GATE_ARGS is a list of options
    bash "$(dirname "$0")/perf_gate.sh" --current "$commit" --history "$history" ${GATE_ARGS:-} || code=$?
    # a regression (1) or can't tell (3) is a record like any other; a gate that could not measure is not
    if [ "$code" -eq 2 ]; then
        status=2
    fi
done
exit "$status"
