"""The step loop (LLMEngine: schedule, launch, read back, process outputs) and, with process_split, the
engine core in a process of its own: the frontend, the core and the typed messages between them."""
