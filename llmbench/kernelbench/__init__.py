"""`llmbench kernels`: each Triton kernel timed at Llama-3-8B shapes against the GPU's measured ceilings."""
