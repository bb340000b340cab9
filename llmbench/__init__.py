"""llmbench: benchmark and profile LLM inference with a bundled, switchable engine."""

import os
import sys
from importlib.machinery import ModuleSpec

__version__ = "0.1.0"

# The engine, the kernels and the shipped configs are folders at the top of the repository, installed inside
# this package as llmbench.engine, llmbench.kernels and llmbench.configs: pyproject.toml's package-dir table
# maps them, for a wheel (which holds them here) and an editable install (whose finder maps them). engine/
# and kernels/ have no __init__.py on purpose: a regular package named `kernels` in the working directory
# would shadow Hugging Face's `kernels`, which transformers imports. A checkout used without installing
# (PYTHONPATH, the perf gate's worktrees) needs the same three names mapped, and only those: the rest of the
# repository's root (tests/, benchmarks/, docs/) is no part of the package.
CHECKOUT_FOLDERS = {"llmbench.engine": "engine", "llmbench.kernels": "kernels", "llmbench.configs": "configs"}


class _CheckoutFolders:
    """Finds the package-dir names in a checkout's top-level folders (each a namespace package)."""

    def __init__(self, root: str):
        self.paths = {name: os.path.join(root, folder) for name, folder in CHECKOUT_FOLDERS.items()}

    def find_spec(self, name, path=None, target=None):
        if name not in self.paths:
            return None
        spec = ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [self.paths[name]]
        return spec


if not os.path.isdir(os.path.join(__path__[0], "engine")):
    # ahead of an editable install's finder, which may map these names to another checkout
    sys.meta_path.insert(0, _CheckoutFolders(os.path.dirname(__path__[0])))
