"""Tensor parallelism: a rank's group and collectives, the weight shards, the worker processes and
their liveness."""
