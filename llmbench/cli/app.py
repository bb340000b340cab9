"""The `llmbench` command. Each command parses its arguments and delegates; exit codes are
0 success, 1 run failure, 2 bad config or usage (one line on stderr, no traceback), 130 interrupted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import msgspec
import typer

import llmbench
from llmbench.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    NoReportOption,
    SetOption,
    VerboseOption,
    exit_codes,
    save_json,
    show_report,
    usage_error,
)
from llmbench.cli.console import RunProgress, console, metrics_table, setup_logging
from llmbench.cli.gate import compare, history
from llmbench.cli.studies import ablate, calibrate, capacity, soak, sweep
from llmbench.config.load import ConfigFileError, config_label, load_config
from llmbench.engine.config import ConfigError
from llmbench.run.directory import RunDirError, check_run_dir
from llmbench.run.signals import sigterm_interrupts
from llmbench.run.workload import WorkloadError

app = typer.Typer(
    help="Benchmark and profile LLM inference; every optimization of the bundled engine can be switched.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"llmbench {llmbench.__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print llmbench's version"),
    ] = None,
) -> None:
    pass


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="YAML run config, e.g. configs/quickstart.yaml")],
    set_: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default: runs/NAME-TIME)")] = None,
    repeat: Annotated[int, typer.Option(help="Timed trials; metrics become their median")] = 1,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the results of an earlier run in the run directory")
    ] = False,
    no_report: NoReportOption = False,
    check: Annotated[
        bool, typer.Option("--check", help="Fail unless the engine ends empty (no request, no KV block)")
    ] = False,
    profile_server: Annotated[
        bool,
        typer.Option(
            "--profile-server",
            help="POST the server's /start_profile and /stop_profile around the timed trials "
            "(backend.profile_server)",
        ),
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """Run a benchmark described by a YAML config and write its results.

    Example:

        llmbench run configs/quickstart.yaml --set workload.num_requests=16 --set engine.prefix_caching=false
    """
    from llmbench.run.result_files import default_run_dir
    from llmbench.run.summary import MAX_TRIALS

    setup_logging(verbose)
    if not 1 <= repeat <= MAX_TRIALS:
        raise usage_error(f"--repeat: expected an integer in [1, {MAX_TRIALS}], got {repeat}")
    with exit_codes((ConfigFileError,)):
        cfg = load_config(
            config, [*(set_ or []), *(["backend.profile_server=true"] if profile_server else [])]
        )
    run_dir = (out or Path(cfg.output.dir or default_run_dir(cfg.name))).expanduser()
    with exit_codes((RunDirError,)):
        check_run_dir(run_dir, force)  # again under the run's lock; here before the model loads
    # torch and the engine load only now: every usage error above is reported without them
    from llmbench.backends.factory import make_backend
    from llmbench.engine.parallel.group import TensorParallelError
    from llmbench.profiling.window import STEP_HOOK
    from llmbench.run.runner import run_benchmark

    # a ValueError: the model settings name something unusable (preset, path, device); Ctrl-C while
    # loading: nothing measured yet; a tensor-parallel rank that died while starting: the engine says which
    # a scheduler's or CI runner's SIGTERM stops the run as Ctrl-C does, its files written (run/signals.py)
    label = f"{config_label(config)}: "  # the schema's errors begin so too
    loading = exit_codes((ValueError,), label, interruptible=True, breakdowns=(TensorParallelError,))
    with sigterm_interrupts(), loading:
        backend = make_backend(cfg, STEP_HOOK)  # `llmbench profile` runs its workload by this command

    def failure() -> str:
        # a run that failed before its first row names no directory it never wrote
        if (run_dir / "config.yaml").exists():
            return f"run failed; results measured so far are in {run_dir}"
        return "run failed before anything was measured"

    user_errors = (ConfigError, WorkloadError, RunDirError)
    with (
        sigterm_interrupts(),
        exit_codes(user_errors, label, failure),
        RunProgress() as progress,
    ):
        result = run_benchmark(cfg, run_dir, repeat, backend, progress, check, replace=force)
    console.print(metrics_table(result.summary))
    console.print(f"results: {result.run_dir}", highlight=False)
    if result.summary.server_profile:
        console.print(f"server profile: {result.summary.server_profile.message}", highlight=False)
    if cfg.output.report and not no_report:
        show_report(result.run_dir)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.stopped:
        raise typer.Exit(EXIT_FAILURE)


@app.command()
def serve(
    config: Annotated[Path, typer.Argument(help="YAML config; its model and engine sections are served")],
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless told otherwise)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free one)")] = 8000,
    set_: SetOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Serve the bundled engine over an OpenAI-compatible HTTP API until Ctrl-C.

    Example:

        llmbench serve configs/quickstart.yaml --port 8000 --set engine.process_split=true
    """
    setup_logging(verbose)
    with exit_codes((ConfigFileError,)):
        cfg = load_config(config, set_ or [])
    from llmbench.engine.serving.api_server import AddressError
    from llmbench.engine.serving.api_server import serve as serve_http  # torch: after the config's checks

    # a ValueError: unusable model settings; an AddressError: the address is taken or not ours to bind
    with (
        exit_codes((ValueError,), f"{config_label(config)}: ", interruptible=True),
        exit_codes((AddressError,)),
    ):
        serve_http(cfg.engine, host, port, cfg.serve.max_body_bytes, cfg.serve.profile_dir)


for command in (ablate, sweep, capacity, calibrate, soak, compare, history):
    app.command()(command)


@app.command()
def env(
    bandwidth: Annotated[
        bool, typer.Option("--bandwidth", help="Also measure copy bandwidth in GB/s")
    ] = False,
) -> None:
    """Show software versions and hardware, as recorded in every run's summary.json (torch_threads: the
    default hardware.cpu_threads a run applies).

    Example:

        llmbench env --bandwidth
    """
    from llmbench.config.schema import HardwareConfig
    from llmbench.device.environment import apply_cpu_threads, collect_environment, measure_copy_bandwidth

    apply_cpu_threads(HardwareConfig().cpu_threads)
    info = msgspec.to_builtins(collect_environment())
    if bandwidth:
        info["bandwidth"] = measure_copy_bandwidth()
    typer.echo(json.dumps(info, indent=2))


@app.command()
def schema(
    name: Annotated[
        str, typer.Argument(help="Result file: summary, ablation, sweep, capacity or calibrate")
    ] = "summary",
) -> None:
    """Print the JSON Schema of a result file (summary: a run's summary.json; ablation, sweep, capacity,
    calibrate: a study's file).

    Example:

        llmbench schema ablation
    """
    from llmbench.results.schema import TYPES, json_schema

    if name not in TYPES:
        typer.echo(f"schema {name!r}: expected one of {', '.join(TYPES)}", err=True)
        raise typer.Exit(2)
    typer.echo(json.dumps(json_schema(name), indent=2))


@app.command()
def kernels(
    dtype: Annotated[str, typer.Option(help="Data type: bf16 or fp16")] = "bf16",
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON to this file")] = None,
) -> None:
    """Time each Triton kernel at Llama-3-8B shapes against the GPU's measured copy bandwidth and GEMM rate.

    Example:

        llmbench kernels --out docs/measurements/h200/kernels.json
    """
    from llmbench.kernelbench.bench import KernelBenchError, result_table, run_kernel_bench

    setup_logging()
    with exit_codes((KernelBenchError,)):
        result = run_kernel_bench(dtype)
    console.print(result_table(result))
    if out is not None:
        save_json(out, result)


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories")],
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default: the run's, or a new one)")
    ] = None,
) -> None:
    """Write report.html (self-contained) and PNG plots for one run, or side by side for several.

    Example (two runs of the CI config, the second without prefix caching, side by side):

        llmbench run configs/ci.yaml --out runs/before
        llmbench run configs/ci.yaml --out runs/after --set engine.prefix_caching=false
        llmbench report runs/before runs/after --out runs/before-vs-after
    """
    from llmbench.report import ReportError, default_report_dir, write_report

    setup_logging()
    out_dir = (out or default_report_dir(run_dirs)).expanduser()
    with exit_codes((ReportError, RunDirError)):
        check_run_dir(out_dir, replace=True)  # a file, or a path under one, cannot hold the report
        path = write_report(run_dirs, out_dir)
    console.print(f"report: {path}", highlight=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def profile(
    ctx: typer.Context,
    config: Annotated[Path, typer.Argument(help="YAML run config")],
    use_nsys: Annotated[
        bool, typer.Option("--nsys", help="Nsight Systems: NVTX phases, kernels, CUDA API")
    ] = False,
    use_torch: Annotated[
        bool, typer.Option("--torch", help="torch.profiler Chrome trace (no GPU needed)")
    ] = False,
    steps: Annotated[
        str | None, typer.Option(help="Engine steps A:B to capture, B excluded (default: all)")
    ] = None,
    set_: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default: runs/CONFIG-TOOL-TIME)")] = None,
    verbose: VerboseOption = False,
) -> None:
    """Run a config with a profiler on chosen engine steps; writes profile.json and report.html.

    Arguments after -- are passed to `nsys profile`.

    Example:

        llmbench profile configs/quickstart.yaml --torch --steps 5:10
    """
    from llmbench.profiling.steps import ProfileError, parse_steps, pick_tool
    from llmbench.report import write_report
    from llmbench.studies.profile_run import profile_run

    setup_logging(verbose)
    with exit_codes((ProfileError, ConfigFileError), failure="profile failed"):
        tool = pick_tool(use_nsys, use_torch)
        run_dir = profile_run(config, tool, parse_steps(steps), out, set_ or [], ctx.args)
        report = write_report([run_dir], run_dir)
    console.print(f"profile: {run_dir / 'profile.json'}\nreport: {report}", highlight=False)
