"""The `llmbench` command. Each command parses its arguments and delegates; exit codes are
0 success, 1 run failure, 2 bad config or usage (one line on stderr, no traceback)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer

from engine.config import ConfigError
from llmbench.config import ConfigFileError, load_config
from llmbench.console import RunProgress, console, metrics_table, setup_logging
from llmbench.workload import WorkloadError

logger = logging.getLogger("llmbench")

app = typer.Typer(
    help="Benchmark and profile LLM inference; every optimization of the bundled engine can be switched.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def usage_error(message: str) -> typer.Exit:
    """Print a one-line user error and return the exit to raise (code 2)."""
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="YAML run config, e.g. configs/quickstart.yaml")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config value: key.path=value (repeatable)"),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default: results/NAME-TIME)")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Timed trials; metrics become their median")] = 1,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging")] = False,
) -> None:
    """Run a benchmark described by a YAML config and write its results.

    Example:

        llmbench run configs/quickstart.yaml --set workload.num_requests=16 --set engine.prefix_caching=false
    """
    from llmbench.backends import make_backend
    from llmbench.results import default_run_dir
    from llmbench.runner import run_benchmark

    setup_logging(verbose)
    try:
        cfg = load_config(config, set_ or [])
    except ConfigFileError as e:
        raise usage_error(str(e)) from None
    run_dir = out or Path(cfg.output.dir or default_run_dir(cfg.name))
    try:
        backend = make_backend(cfg)
    except ValueError as e:  # the model settings name something unusable: preset, path, device
        raise usage_error(f"{config.name}: {e}") from None
    try:
        with RunProgress() as progress:
            result = run_benchmark(cfg, run_dir, repeat=repeat, backend=backend, progress=progress)
    except (ConfigError, WorkloadError) as e:
        raise usage_error(f"{config.name}: {e}") from None
    except Exception:
        logger.exception("run failed; results measured so far are in %s", run_dir)
        raise typer.Exit(1) from None
    console.print(metrics_table(result.summary))
    console.print(f"results: {result.run_dir}", highlight=False)
    if result.interrupted:
        raise typer.Exit(130)


@app.command()
def env(
    bandwidth: Annotated[
        bool, typer.Option("--bandwidth", help="Also measure copy bandwidth in GB/s")
    ] = False,
) -> None:
    """Show software versions and hardware, as recorded in every run's summary.json.

    Example:

        llmbench env --bandwidth
    """
    from llmbench.env import collect_environment, measure_copy_bandwidth

    info = collect_environment()
    if bandwidth:
        info["bandwidth"] = measure_copy_bandwidth()
    typer.echo(json.dumps(info, indent=2))


@app.command()
def kernels(
    dtype: Annotated[str, typer.Option(help="Data type: bf16 or fp16")] = "bf16",
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON to this file")] = None,
) -> None:
    """Time each Triton kernel at Llama-3-8B shapes against the GPU's measured copy bandwidth and GEMM rate.

    Example:

        llmbench kernels --out results/h200/kernels.json
    """
    import sys

    from llmbench.kernel_bench import KernelBenchError, result_table, run_kernel_bench
    from llmbench.results import write_atomic

    setup_logging()
    try:
        result = run_kernel_bench(dtype)
    except KernelBenchError as e:
        raise usage_error(str(e)) from None
    result = {"command": " ".join(["llmbench", *sys.argv[1:]]), **result}
    console.print(result_table(result))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(result, indent=2) + "\n")
        console.print(f"results: {out}", highlight=False)


def main() -> None:
    app()
