"""EngineConfig: the one object holding every engine toggle. It validates itself at construction,
so everything downstream can trust it. The llmbench YAML sections `model` and `engine` map onto
ModelConfig and EngineConfig field for field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any


class ConfigError(ValueError):
    """A user-caused configuration error. `key` is the dotted field path (relative to the object
    that raised it); callers prefix their own section name."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


def bounded(
    default: Any = None,
    *,
    factory: Any = None,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> Any:
    """A dataclass field with numeric bounds (a list's apply to each item), declared once: the YAML
    loader (llmbench/config/build.py) checks them with the type, check_bounds when Python builds the
    object. Every number has an upper bound, so none reaches C code (struct, torch, time_t) too large."""
    kept = {"default_factory": factory} if factory is not None else {"default": default}
    return field(**kept, metadata={"gt": gt, "ge": ge, "le": le})


def finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an integer beyond the float range
        return False


def within(value: float, bounds: Any) -> bool:
    gt, ge, le = bounds.get("gt"), bounds.get("ge"), bounds.get("le")
    return (gt is None or value > gt) and (ge is None or value >= ge) and (le is None or value <= le)


def describe(noun: str, bounds: Any) -> str:
    """`noun` with its bounds, as an error says what it expected: "an integer >= 1 and <= 1024"."""
    upper = f" and <= {_number(bounds['le'])}" if bounds.get("le") is not None else ""
    if bounds.get("gt") is not None:
        return f"{noun} > {_number(bounds['gt'])}{upper}"
    if bounds.get("ge") is not None:
        return f"{noun} >= {_number(bounds['ge'])}{upper}"
    return noun


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"  # 1e6 as 1000000, 2**63 exact


def check_bounds(config: Any) -> None:
    """Each bounded field of a dataclass built in Python holds a finite number within its bounds."""
    for spec in fields(config):
        value = getattr(config, spec.name)
        if not spec.metadata or value is None:
            continue
        noun = "an integer" if "int" in str(spec.type) else "a number"
        for item in value if isinstance(value, list) else [value]:
            number = isinstance(item, (int, float)) and not isinstance(item, bool)
            if not (number and finite(item) and within(item, spec.metadata)):
                raise ConfigError(spec.name, f"expected {describe(noun, spec.metadata)}, got {item!r}")


DTYPES = ("float32", "bfloat16", "float16", "auto")
DEVICES = ("cpu", "cuda", "auto")
EXECUTORS = ("model", "null")
ATTENTION_BACKENDS = ("torch", "triton", "auto")
PREFILL_ATTENTIONS = ("paged", "sdpa", "flash")
MAX_SEQS = 1 << 16  # sequences in a batch, far past any device's
MAX_ENGINE_TOKENS = 1 << 24  # tokens in a step or a context, far past any model's


@dataclass
class ModelConfig:
    """Which weights to run, and where. `preset` names a shape with seeded random weights
    (engine/models/shape.py PRESETS) or a packaged real model (engine/loading/packaged.py); `path` is a
    local HF-format directory or a Llama .gguf file and wins over preset."""

    preset: str | None = "tiny"
    path: str | None = None
    dtype: str = "auto"  # auto: bfloat16 on cuda, float32 on cpu
    device: str = "auto"  # auto: cuda when available
    seed: int = bounded(0, ge=0, le=2**63 - 1)  # torch's generators take 64-bit seeds
    executor: str = "model"  # null: forward replaced by a no-op returning fixed tokens (pure CPU overhead)
    # null executor: each forward takes this long on a simulated device, queued in order (0: none)
    null_forward_ms: float = bounded(0.0, ge=0, le=60_000)
    tokenizer: str | None = None  # tokenizer.json path; defaults to <path>/tokenizer.json or the GGUF's own
    chat_template: str | None = None  # a Jinja template file; default: the model's own (serving/tokenizer.py)

    def __post_init__(self) -> None:
        _require(self.preset is not None or self.path is not None, "preset", "give a preset or a path")
        _require(self.dtype in DTYPES, "dtype", f"expected one of {', '.join(DTYPES)}, got {self.dtype!r}")
        _require(
            self.device in DEVICES, "device", f"expected one of {', '.join(DEVICES)}, got {self.device!r}"
        )
        _require(
            self.executor in EXECUTORS,
            "executor",
            f"expected one of {', '.join(EXECUTORS)}, got {self.executor!r}",
        )
        check_bounds(self)
        _require(
            not self.null_forward_ms or self.executor == "null",
            "null_forward_ms",
            'only the null executor simulates a forward\'s time (set executor: "null")',
        )


@dataclass
class EngineConfig:
    """Every optimization toggle of the bundled engine. Off values reproduce a naive engine."""

    model: ModelConfig = field(default_factory=ModelConfig)
    # paged KV cache
    block_size: int = bounded(16, ge=1, le=1024)
    # exact pool size in blocks; wins over the two below. Block ids are int32 on the device
    num_gpu_blocks: int | None = bounded(None, ge=1, le=2**31 - 1)
    kv_cache_memory_gb: float | None = bounded(None, gt=0, le=1_000_000)
    # cuda only: fraction of device memory for weights + activations + KV
    gpu_memory_utilization: float = bounded(0.9, gt=0, le=1)
    # scheduling
    max_num_seqs: int = bounded(256, ge=1, le=MAX_SEQS)
    max_num_batched_tokens: int = bounded(8192, ge=1, le=MAX_ENGINE_TOKENS)
    max_model_len: int | None = bounded(None, ge=1, le=MAX_ENGINE_TOKENS)  # default: max_position_embeddings
    chunked_prefill: bool = True
    prefix_caching: bool = True
    # CPU-overhead optimizations
    num_scheduler_steps: int = bounded(1, ge=1, le=1024)
    # a window's tokens handed over forward by forward, each as soon as it is known (off: in one burst)
    stream_multi_step: bool = True
    # vLLM 0.6.0: step n read back, then step n+1 scheduled and launched before n's outputs are processed
    async_output: bool = False
    # vLLM V1 / SGLang overlap: step n+1 launched before step n is read back (its decodes fed on the
    # device); output processing lags one step as with async_output, which it includes
    async_scheduling: bool = False
    process_split: bool = False
    # GPU path
    cuda_graphs: bool = False
    # a decode batch runs padded to the smallest size holding it: past 16 rows one every 16, since from
    # about 128 rows the matmuls cost in proportion to their rows, padding included (a ShareGPT-like
    # batch of 130 ran as 256 with sizes in powers of two; docs/measurements/h200/graph_sizes/)
    cuda_graph_sizes: list[int] = bounded(
        factory=lambda: [1, 2, 4, 8, *range(16, 257, 16)], ge=1, le=MAX_SEQS
    )
    attention_backend: str = "auto"  # auto: triton on cuda, torch on cpu
    # sdpa: a step's sequences with no cached prefix (chunk at position 0) attend to their own K/V through
    # torch's SDPA (cuDNN on Hopper), the rest through the paged kernel. flash: every chunk through
    # FlashAttention-4 (the optional flash-attn-4 package; Hopper or later, bf16/fp16). A field of its
    # own, not an attention_backend value: it pairs with either backend (decodes stay on the backend's)
    prefill_attention: str = "paged"
    dependent_launch: bool = True  # Triton kernels on Hopper and later: programmatic dependent launch
    tensor_parallel_size: int = bounded(1, ge=1, le=64)  # ranks the weights are split over, one process each
    # measurement
    step_timing: bool = True  # per-step host phase times and CUDA events

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = ModelConfig(**self.model)
        check_bounds(self)
        _require(len(self.cuda_graph_sizes) > 0, "cuda_graph_sizes", "expected a non-empty list of integers")
        self.cuda_graph_sizes = sorted(set(self.cuda_graph_sizes))
        _require(
            self.attention_backend in ATTENTION_BACKENDS,
            "attention_backend",
            f"expected one of {', '.join(ATTENTION_BACKENDS)}, got {self.attention_backend!r}",
        )
        _require(
            self.prefill_attention in PREFILL_ATTENTIONS,
            "prefill_attention",
            f"expected one of {', '.join(PREFILL_ATTENTIONS)}, got {self.prefill_attention!r}",
        )

    def check_ranks(self) -> None:
        """Ranks the model can run on: a real model, and enough visible GPUs. Not part of __post_init__:
        a run's engine section is read before its model section is attached, and the default model's
        device (auto) would count GPUs for a CPU run on a GPU host."""
        _require(
            self.tensor_parallel_size == 1 or self.model.executor != "null",
            "tensor_parallel_size",
            f"{self.tensor_parallel_size} ranks, but the null executor has no weights to split (set 1)",
        )
        if self.tensor_parallel_size > 1 and self.model.device != "cpu":
            import torch  # only here: the config is read before anything else needs torch

            gpus = torch.cuda.device_count()
            _require(
                gpus == 0 or self.tensor_parallel_size <= gpus,
                "tensor_parallel_size",
                f"{self.tensor_parallel_size} ranks need as many GPUs, {gpus} visible",
            )
