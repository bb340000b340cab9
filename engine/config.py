"""EngineConfig: the one object holding every engine toggle. It validates itself at construction,
so everything downstream can trust it. The llmbench YAML sections `model` and `engine` map onto
ModelConfig and EngineConfig field for field."""

from __future__ import annotations

from dataclasses import dataclass, field


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


DTYPES = ("float32", "bfloat16", "float16", "auto")
DEVICES = ("cpu", "cuda", "auto")
EXECUTORS = ("model", "null")
ATTENTION_BACKENDS = ("torch", "triton", "auto")
PREFILL_ATTENTIONS = ("paged", "sdpa", "flash")


@dataclass
class ModelConfig:
    """Which weights to run, and where. `preset` names a shape with seeded random weights
    (engine/models/shape.py PRESETS) or a packaged real model (engine/models/packaged.py); `path` is a
    local HF-format directory or a Llama .gguf file and wins over preset."""

    preset: str | None = "tiny"
    path: str | None = None
    dtype: str = "auto"  # auto: bfloat16 on cuda, float32 on cpu
    device: str = "auto"  # auto: cuda when available
    seed: int = 0
    executor: str = "model"  # null: forward replaced by a no-op returning fixed tokens (pure CPU overhead)
    # null executor: each forward takes this long on a simulated device, queued in order (0: none)
    null_forward_ms: float = 0.0
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
        _require(
            isinstance(self.null_forward_ms, (int, float))
            and not isinstance(self.null_forward_ms, bool)
            and self.null_forward_ms >= 0,
            "null_forward_ms",
            f"expected milliseconds >= 0, got {self.null_forward_ms!r}",
        )
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
    block_size: int = 16
    num_gpu_blocks: int | None = None  # exact pool size in blocks; wins over the two below
    kv_cache_memory_gb: float | None = None
    gpu_memory_utilization: float = 0.9  # cuda only: fraction of device memory for weights + activations + KV
    # scheduling
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None  # defaults to the model's max_position_embeddings
    chunked_prefill: bool = True
    prefix_caching: bool = True
    # CPU-overhead optimizations
    num_scheduler_steps: int = 1
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
    cuda_graph_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, *range(16, 257, 16)])
    attention_backend: str = "auto"  # auto: triton on cuda, torch on cpu
    # sdpa: a step's sequences with no cached prefix (chunk at position 0) attend to their own K/V through
    # torch's SDPA (cuDNN on Hopper), the rest through the paged kernel. flash: every chunk through
    # FlashAttention-4 (the optional flash-attn-4 package; Hopper or later, bf16/fp16). A field of its
    # own, not an attention_backend value: it pairs with either backend (decodes stay on the backend's)
    prefill_attention: str = "paged"
    dependent_launch: bool = True  # Triton kernels on Hopper and later: programmatic dependent launch
    tensor_parallel_size: int = 1  # ranks the weights are split over, one process each
    # measurement
    step_timing: bool = True  # per-step host phase times and CUDA events

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = ModelConfig(**self.model)
        _require(self.block_size >= 1, "block_size", f"expected an integer >= 1, got {self.block_size}")
        _require(
            self.num_gpu_blocks is None or self.num_gpu_blocks >= 1,
            "num_gpu_blocks",
            f"expected an integer >= 1, got {self.num_gpu_blocks}",
        )
        _require(
            self.kv_cache_memory_gb is None or self.kv_cache_memory_gb > 0,
            "kv_cache_memory_gb",
            f"expected a number > 0, got {self.kv_cache_memory_gb}",
        )
        _require(
            0 < self.gpu_memory_utilization <= 1,
            "gpu_memory_utilization",
            f"expected a number in (0, 1], got {self.gpu_memory_utilization}",
        )
        _require(self.max_num_seqs >= 1, "max_num_seqs", f"expected an integer >= 1, got {self.max_num_seqs}")
        _require(
            self.max_num_batched_tokens >= 1,
            "max_num_batched_tokens",
            f"expected an integer >= 1, got {self.max_num_batched_tokens}",
        )
        _require(
            self.max_model_len is None or self.max_model_len >= 1,
            "max_model_len",
            f"expected an integer >= 1, got {self.max_model_len}",
        )
        _require(
            self.num_scheduler_steps >= 1,
            "num_scheduler_steps",
            f"expected an integer >= 1, got {self.num_scheduler_steps}",
        )
        _require(
            len(self.cuda_graph_sizes) > 0 and all(s >= 1 for s in self.cuda_graph_sizes),
            "cuda_graph_sizes",
            f"expected a non-empty list of integers >= 1, got {self.cuda_graph_sizes}",
        )
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
        _require(
            self.tensor_parallel_size >= 1,
            "tensor_parallel_size",
            f"expected an integer >= 1, got {self.tensor_parallel_size}",
        )

    def check_gpus(self) -> None:
        """Enough visible GPUs for the ranks. Not part of __post_init__: a run's engine section is read
        before its model section is attached, and the default model's device (auto) would count GPUs
        for a CPU run on a GPU host."""
        if self.tensor_parallel_size > 1 and self.model.device != "cpu":
            import torch  # only here: the config is read before anything else needs torch

            gpus = torch.cuda.device_count()
            _require(
                gpus == 0 or self.tensor_parallel_size <= gpus,
                "tensor_parallel_size",
                f"{self.tensor_parallel_size} ranks need as many GPUs, {gpus} visible",
            )
