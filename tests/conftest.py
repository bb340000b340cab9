import os

import torch

# Without a GPU, Triton kernels run in the interpreter; it must be set before any @triton.jit is defined.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
