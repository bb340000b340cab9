#!/usr/bin/env bash
# Two versions of some files, measured in turns on one host (A1 B1 A2 B2 ...), so that the host's own
# drift falls on both alike. VERSION_A and VERSION_B are folders laid out as the checkout (for example
# VERSION_B/engine/scheduling/batch.py); each round copies one over the checkout, runs the command with {out}
# replaced by OUT_DIR/<A|B>_<round> (a path without extension: the command adds its own), and the
# checkout's files are put back as they were at the end.
#   bash benchmarks/interleaved_ab.sh ab/A ab/B 3 runs/h200/slotted_entries -- \
#       python benchmarks/cpu_overhead.py --forward-ms 9 --out {out}.json
# Takes the command's time 2 x ROUNDS. Writes what the command writes, into OUT_DIR.
set -euo pipefail
if [ $# -lt 6 ] || [ "$5" != "--" ]; then
    echo "usage: $0 VERSION_A VERSION_B ROUNDS OUT_DIR -- COMMAND (with {out})" >&2
    exit 2
fi
version_a=$1 version_b=$2 rounds=$3 out_dir=$4
shift 5
for version in "$version_a" "$version_b"; do
    [ -d "$version" ] || { echo "error: $version: no such folder" >&2; exit 2; }
done
backup=$(mktemp -d)
# every file either version replaces, backed up to be put back
files=$( { (cd "$version_a" && find . -type f); (cd "$version_b" && find . -type f); } | sort -u)
for file in $files; do
    mkdir -p "$backup/$(dirname "$file")"
    cp "$file" "$backup/$file"
done
trap 'cp -r "$backup"/. . && rm -rf "$backup"' EXIT
mkdir -p "$out_dir"
for round in $(seq "$rounds"); do
    for side in A B; do
        version=$([ "$side" = A ] && echo "$version_a" || echo "$version_b")
        cp -r "$backup"/. .  # a file only the other version replaces is the checkout's again
        cp -r "$version"/. .
        out="$out_dir/${side}_$round"
        echo "== $side round $round"
        "${@//\{out\}/$out}"
    done
done
