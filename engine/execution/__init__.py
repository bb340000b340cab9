"""A scheduled batch to sampled tokens on the device: the model runner (or the null executor), input
preparation, the KV pool, CUDA graphs, the sampler and the kernels chosen for the model."""
