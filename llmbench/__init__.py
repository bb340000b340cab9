"""llmbench: benchmark and profile LLM inference with a bundled, switchable engine."""

import os

__version__ = "0.1.0"

# The engine and the kernels are installed as llmbench.engine and llmbench.kernels (the wheel puts them inside
# this package). A source checkout keeps them in the top-level folders engine/ and kernels/, which have no
# __init__.py on purpose: a regular package named `kernels` in the working directory would shadow Hugging
# Face's `kernels`, which transformers imports. Here they are found beside this package.
if not os.path.isdir(os.path.join(__path__[0], "engine")):
    __path__.append(os.path.dirname(__path__[0]))
