"""Studies: one workload run many ways (ablation, rate sweep) or pushed until it breaks (preemption soak)."""
