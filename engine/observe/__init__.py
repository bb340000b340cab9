"""What each step cost: the StepRecord of its host phases and GPU time, the step log, the NVTX ranges,
the torch or nsys profile window `llmbench serve` opens on request."""
