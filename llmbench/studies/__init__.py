"""Studies: one workload run many ways (ablation, rate sweep, capacity search, the client's calibration),
pushed until it breaks (preemption soak), or run under a profiler (profile_run.py)."""
