"""The regression gate: `llmbench compare` (compare.py, reading each side with load.py) and the CI gate's
interleaved measurement (perf_gate.py, run by scripts/perf_gate.sh)."""
