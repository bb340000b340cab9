"""The regression gate: `llmbench compare` (compare.py, reading each side with load.py) and the CI gate's
interleaved measurement (perf_gate.py; scripts/perf_gate.sh runs it through cli/perf_gate.py)."""
