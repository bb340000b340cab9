"""The model code: the Llama family in one file, its shapes and presets, and what a token costs."""
