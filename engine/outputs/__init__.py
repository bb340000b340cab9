"""A step's sampled tokens on their way back: read back from the device, then turned into each
request's outputs and stop decisions."""
