"""Profiling: NVTX ranges (engine/nvtx_ranges.py), `llmbench profile --nsys` with its stats folded
into profile.json, and a torch.profiler fallback for machines without Nsight Systems."""
