"""Programmatic dependent launch: when kernels use it, and the engine switch."""

import torch
from llmbench.kernels import pdl

from tests.kernels.paged_kv import DEVICE


def test_dependent_launch_is_off_without_a_compiled_hopper_kernel():
    # the interpreter has no grid-dependency control: kernels must launch the ordinary way
    device = torch.device(DEVICE)
    hopper = (
        device.type == "cuda" and not torch.version.hip and torch.cuda.get_device_capability(device)[0] >= 9
    )
    assert pdl.device_supports(device) == hopper
    assert pdl.launch_args(device) == {"PDL": hopper, "launch_pdl": hopper}


def test_engine_config_switches_dependent_launch(monkeypatch):
    from llmbench.engine.config import EngineConfig, ModelConfig
    from llmbench.engine.llm_engine import LLMEngine

    monkeypatch.setattr(pdl, "device_supports", lambda device: True)  # as on a Hopper GPU
    try:
        for enabled in (False, True):
            config = EngineConfig(
                model=ModelConfig(preset="tiny", device=DEVICE, dtype="float32"),
                attention_backend="triton",
                num_gpu_blocks=16,
                dependent_launch=enabled,
            )
            LLMEngine(config).shutdown()
            assert pdl.launch_args(torch.device(DEVICE)) == {"PDL": enabled, "launch_pdl": enabled}
    finally:
        pdl.set_enabled(True)
