"""Where a model comes from: its facts resolved from the config, and its weights built from a preset, an
HF directory or a GGUF file (the GGUF's tensors and tokenizer read here too)."""
