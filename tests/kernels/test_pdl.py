"""Programmatic dependent launch: which devices use it, that a kernel's flag and Triton's launch option
always go together, the engine switch, and (on Hopper) that it changes no token."""

import pytest
import torch
from llmbench.engine.config import EngineConfig, ModelConfig
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.request import SamplingParams
from llmbench.kernels import pdl

from tests.kernels.paged_kv import DEVICE

CUDA = torch.device("cuda")


@pytest.fixture
def fresh_pdl():
    """device_supports answers once per device: each case asks anew, and the switch is back on after.
    Asked for before monkeypatch, so it tears down after monkeypatch has put the real function back."""
    pdl.device_supports.cache_clear()
    yield
    pdl.device_supports.cache_clear()
    pdl.set_enabled(True)


@pytest.mark.parametrize(
    ("capability", "interpreted", "rocm", "supported"),
    [
        ((9, 0), False, False, True),  # Hopper, compiled
        ((10, 0), False, False, True),  # Blackwell
        ((8, 0), False, False, False),  # Ampere has no grid dependency control
        ((9, 0), True, False, False),  # the interpreter has none either
        ((9, 0), False, True, False),  # nor ROCm, which also calls its GPUs "cuda"
    ],
)
def test_only_compiled_nvidia_kernels_of_capability_9_or_later_launch_dependently(
    fresh_pdl, monkeypatch, capability, interpreted, rocm, supported
):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.version, "hip", "6.2" if rocm else None)
    if interpreted:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert pdl.device_supports(CUDA) is supported
    assert pdl.device_supports(torch.device("cpu")) is False
    assert pdl.launch_args(CUDA) == {"PDL": supported, "launch_pdl": supported}
    pdl.set_enabled(False)
    assert pdl.launch_args(CUDA) == {"PDL": False, "launch_pdl": False}


def test_engine_config_switches_dependent_launch(fresh_pdl, monkeypatch):
    monkeypatch.setattr(pdl, "device_supports", lambda device: True)  # as on a Hopper GPU
    for enabled in (False, True):
        config = EngineConfig(
            model=ModelConfig(preset="tiny", device=DEVICE, dtype="float32"),
            attention_backend="triton",
            num_gpu_blocks=16,
            dependent_launch=enabled,
        )
        LLMEngine(config).shutdown()
        assert pdl.launch_args(torch.device(DEVICE)) == {"PDL": enabled, "launch_pdl": enabled}


@pytest.mark.gpu(capability=9)
def test_dependent_launch_changes_no_token(fresh_pdl):
    """Each kernel launched early waits for the one before it: greedy tokens of the Triton backend,
    CUDA graphs included, are the same with dependent launch on and off."""
    prompts = [[(7 * i + j) % 500 + 3 for j in range(5 + 11 * i)] for i in range(8)]
    tokens = {}
    for enabled in (True, False):
        config = EngineConfig(
            model=ModelConfig(preset="tiny", device="cuda", dtype="bfloat16"),
            attention_backend="triton",
            cuda_graphs=True,
            num_gpu_blocks=256,
            dependent_launch=enabled,
        )
        engine = LLMEngine(config)
        assert pdl.launch_args(CUDA)["PDL"] is enabled
        tokens[enabled] = engine.generate(prompts, SamplingParams(max_tokens=32, ignore_eos=True))
        engine.shutdown()
    assert tokens[True] == tokens[False]
