import os

# Triton kernels run in the interpreter on CPU; it must be set before any @triton.jit is defined.
os.environ.setdefault("TRITON_INTERPRET", "1")
