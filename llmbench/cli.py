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
    no_report: Annotated[bool, typer.Option("--no-report", help="Skip report.html and the plots")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Fail unless the engine ends empty (no request, no KV block)")
    ] = False,
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
    except KeyboardInterrupt:  # while loading: nothing measured yet
        raise typer.Exit(130) from None
    try:
        with RunProgress() as progress:
            result = run_benchmark(
                cfg, run_dir, repeat=repeat, backend=backend, progress=progress, check=check
            )
    except (ConfigError, WorkloadError) as e:
        raise usage_error(f"{config.name}: {e}") from None
    except Exception:
        logger.exception("run failed; results measured so far are in %s", run_dir)
        raise typer.Exit(1) from None
    console.print(metrics_table(result.summary))
    console.print(f"results: {result.run_dir}", highlight=False)
    if cfg.output.report and not no_report:
        from llmbench.report import write_report

        console.print(f"report: {write_report([result.run_dir], result.run_dir)}", highlight=False)
    if result.interrupted:
        raise typer.Exit(130)
    if result.stopped:
        raise typer.Exit(1)


@app.command()
def ablate(
    config: Annotated[Path, typer.Argument(help="YAML run config, e.g. configs/ci.yaml")],
    order: Annotated[
        str | None, typer.Option(help="Toggles to add one at a time, comma-separated (default: all)")
    ] = None,
    leave_one_out: Annotated[
        bool, typer.Option("--leave-one-out", help="Also run all on with each toggle off")
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config value: key.path=value (repeatable)"),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Directory (default: results/NAME-ablation-TIME)")] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="Skip report.html and the plots")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging")] = False,
) -> None:
    """Run a workload with every optimization off, then add them one at a time; write ablation.json.

    Example:

        llmbench ablate configs/ci.yaml --order process_split,num_scheduler_steps --leave-one-out
    """
    from rich.console import Console

    from llmbench.ablate import AblationError, ablation_table, run_ablation

    setup_logging(verbose)
    try:
        with RunProgress() as progress:
            result = run_ablation(config, set_ or [], order, leave_one_out, out, progress)
    except (AblationError, ConfigFileError, ConfigError, WorkloadError) as e:
        raise usage_error(str(e)) from None
    except KeyboardInterrupt:  # while loading a variant's model
        raise typer.Exit(130) from None
    except Exception:
        logger.exception("ablation failed; variants measured so far are in %s", out or "results/")
        raise typer.Exit(1) from None
    table = ablation_table(result.ablation)
    # never fold the numbers: CI logs report an 80-column console
    natural = console.measure(table, options=console.options.update_width(1000)).maximum
    Console(width=max(console.width, natural)).print(table)
    console.print(f"results: {result.out_dir}", highlight=False)
    if not no_report and (result.out_dir / "summary.json").is_file():
        from llmbench.report import write_report

        console.print(f"report: {write_report([result.out_dir], result.out_dir)}", highlight=False)
    if result.interrupted:
        raise typer.Exit(130)


@app.command()
def soak(
    requests: Annotated[int, typer.Option(min=1, help="Requests to run through each pool")] = 10_000,
    blocks: Annotated[int, typer.Option(min=1, help="KV blocks of the small, preempting pool")] = 64,
    seed: Annotated[int, typer.Option(help="Workload and arrival seed")] = 0,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a model.* or engine.* value: key.path=value (repeatable)"),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the figures as JSON to this file")] = None,
) -> None:
    """Preemption soak: the same requests through a KV pool far too small for them, then a large one.

    Exits 1 unless no request is lost or duplicated, no block leaks, and the greedy outputs of both
    pools are identical. The default model is the null executor (tiny shapes, no forward).

    Example:

        llmbench soak --requests 10000 --blocks 64 --out results/cpu/soak.json
    """
    import sys

    from llmbench.results import write_atomic
    from llmbench.soak import SoakError, run_soak, soak_engine_config, soak_table

    setup_logging()
    try:
        config = soak_engine_config(set_ or [], blocks)
    except (SoakError, ConfigError) as e:
        raise usage_error(str(e)) from None
    result = run_soak(config, requests, seed)
    console.print(soak_table(result))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        data = {"command": " ".join(["llmbench", *sys.argv[1:]]), **result.to_dict()}
        write_atomic(out, json.dumps(data, indent=2) + "\n")
        console.print(f"results: {out}", highlight=False)
    raise typer.Exit(0 if result.passed else 1)


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


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories")],
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default: the run's, or a new one)")
    ] = None,
) -> None:
    """Write report.html (self-contained) and PNG plots for one run, or side by side for several.

    Example:

        llmbench report results/quickstart-20250101-120000 results/quickstart-20250102-120000
    """
    from llmbench.report import ReportError, default_report_dir, write_report

    setup_logging()
    try:
        path = write_report(run_dirs, out or default_report_dir(run_dirs))
    except ReportError as e:
        raise usage_error(str(e)) from None
    console.print(f"report: {path}", highlight=False)


@app.command()
def compare(
    baseline: Annotated[Path, typer.Argument(help="Baseline run directory or summary.json")],
    current: Annotated[Path, typer.Argument(help="Current run directory or summary.json")],
    metric: Annotated[
        list[str] | None,
        typer.Option(help="Metric to check, NAME or NAME:THRESHOLD like mean_tpot_ms:10% (repeatable)"),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the verdicts to this file")
    ] = None,
) -> None:
    """Compare two runs; exit 1 when a metric regressed beyond its threshold and the trial noise.

    Example:

        llmbench compare results/baselines/ci results/ci-run --metric steps.mean_cpu_ms_per_step:150%
    """
    from rich.console import Console

    from llmbench.compare import CompareError, compare_runs, has_regression, verdict_table

    setup_logging()
    try:
        verdicts = compare_runs(baseline, current, metric, json_out)
    except CompareError as e:
        raise usage_error(str(e)) from None
    table = verdict_table(verdicts)
    # never fold the numbers: CI logs report an 80-column console
    natural = console.measure(table, options=console.options.update_width(1000)).maximum
    Console(width=max(console.width, natural)).print(table)
    raise typer.Exit(1 if has_regression(verdicts) else 0)


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
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config value: key.path=value (repeatable)"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default: results/CONFIG-TOOL-TIME)")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging")] = False,
) -> None:
    """Run a config with a profiler on chosen engine steps; writes profile.json and report.html.

    Arguments after -- are passed to `nsys profile`.

    Example:

        llmbench profile configs/quickstart.yaml --torch --steps 5:10
    """
    from llmbench.profiling.profile_run import profile_run
    from llmbench.profiling.window import ProfileError, parse_steps

    setup_logging(verbose)
    if use_nsys == use_torch:
        raise usage_error("choose one profiler: --nsys or --torch")
    try:
        tool = "nsys" if use_nsys else "torch"
        run_dir = profile_run(config, tool, parse_steps(steps), out, set_ or [], ctx.args)
    except (ProfileError, ConfigFileError) as e:
        raise usage_error(str(e)) from None
    except Exception:
        logger.exception("profile failed")
        raise typer.Exit(1) from None
    console.print(f"profile: {run_dir / 'profile.json'}\nreport: {run_dir / 'report.html'}", highlight=False)


def main() -> None:
    app()
