"""Profiling: NVTX ranges (engine/observe/nvtx_ranges.py), the window that starts and stops a profiler around
chosen engine steps, `nsys stats` and the torch.profiler fallback read into profile.json's fields. The
profile run itself, `llmbench profile`, is a study (studies/profile_run.py)."""
