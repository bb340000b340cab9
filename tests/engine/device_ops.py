"""Which tensor ops a block of engine code runs: how the CUDA tests check that a step's host work
stays a handful of copies."""

from torch.utils._python_dispatch import TorchDispatchMode


class DeviceOps(TorchDispatchMode):
    """The names of the tensor ops run inside the block, views left out."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))
