"""The study commands: `ablate`, `sweep`, `capacity`, `calibrate` and `soak` run one workload many times and
set the runs side by side. Registered on the `llmbench` app by cli/app.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from llmbench.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    NoReportOption,
    SetOption,
    VerboseOption,
    exit_codes,
    print_wide,
    save_json,
    show_report,
    usage_error,
)
from llmbench.cli.console import RunProgress, console, setup_logging
from llmbench.config.load import ConfigFileError
from llmbench.config.schema import MAX_REQUESTS
from llmbench.engine.config import ConfigError
from llmbench.run.directory import RunDirError
from llmbench.run.signals import sigterm_interrupts
from llmbench.run.workload import WorkloadError

if TYPE_CHECKING:
    from llmbench.studies.study import StudyResult


def ablate(
    config: Annotated[Path, typer.Argument(help="YAML run config, e.g. configs/ci.yaml")],
    order: Annotated[
        str | None, typer.Option(help="Toggles to add one at a time, comma-separated (default: all)")
    ] = None,
    leave_one_out: Annotated[
        bool, typer.Option("--leave-one-out", help="Also run all on with each toggle off")
    ] = False,
    repeat: Annotated[
        int, typer.Option(help="Trials per variant, interleaved: trial 1 of every variant, then trial 2, ...")
    ] = 3,
    preset: Annotated[
        str,
        typer.Option(
            help="all: every toggle in the default order; cpu-overhead: CUDA graphs on throughout, then "
            "process_split, async_output, num_scheduler_steps, async_scheduling"
        ),
    ] = "all",
    set_: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Directory (default: runs/NAME-ablation-TIME)")] = None,
    no_report: NoReportOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Run a workload with every optimization off, then add them one at a time; write ablation.json.

    Each variant runs --repeat times; the table shows medians with their 95% intervals, and a toggle whose
    effect lies inside the trial noise is marked as such.

    Example:

        llmbench ablate configs/ci.yaml --order process_split,num_scheduler_steps --leave-one-out --repeat 5

        llmbench ablate configs/llama3-8b-decode.yaml --preset cpu-overhead
    """
    from llmbench.studies.ablation import AblationError, run_ablation
    from llmbench.studies.ablation_table import ablation_table

    setup_logging(verbose)
    user_errors = (AblationError, ConfigFileError, ConfigError, WorkloadError, RunDirError)
    failure = f"ablation failed; variants measured so far are in {out or 'runs/'}"
    # Ctrl-C while a variant's model loads; during a run, run_benchmark keeps what it measured
    with _study_running(user_errors, failure) as progress:
        result = run_ablation(config, set_ or [], order, leave_one_out, out, progress, repeat, preset)
    _show_study(ablation_table(result.data), result, no_report)


def sweep(
    config: Annotated[Path, typer.Argument(help="YAML run config, e.g. configs/quickstart.yaml")],
    rates: Annotated[str, typer.Option(help="Request rates per second, comma-separated; inf: all at once")],
    set_: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Directory (default: runs/NAME-sweep-TIME)")] = None,
    no_report: NoReportOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Run a workload at several request rates, one run each; write sweep.json and a latency curve.

    Example:

        llmbench sweep configs/quickstart.yaml --rates 10,20,40,inf
    """
    from llmbench.studies.sweep import SweepError, run_sweep, sweep_table

    setup_logging(verbose)
    user_errors = (SweepError, ConfigFileError, ConfigError, WorkloadError, RunDirError)
    failure = f"sweep failed; rates measured so far are in {out or 'runs/'}"
    with _study_running(user_errors, failure) as progress:
        result = run_sweep(config, set_ or [], rates, out, progress)
    _show_study(sweep_table(result.data), result, no_report)


def capacity(
    config: Annotated[Path, typer.Argument(help="YAML run config with at least one SLO (slo.*)")],
    by: Annotated[str, typer.Option(help="The load searched: rate (req/s) or concurrency")] = "rate",
    target: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of requests that must meet every SLO")
    ] = 0.95,
    start: Annotated[
        float | None, typer.Option(help="First load probed (default: the config's rate or concurrency)")
    ] = None,
    lowest: Annotated[float | None, typer.Option(help="Lowest load probed (default 0.1 req/s, or 1)")] = None,
    highest: Annotated[
        float | None, typer.Option(help="Highest load probed (default 1000 req/s, or 1024)")
    ] = None,
    tolerance: Annotated[
        float, typer.Option(min=0.001, help="Rates: stop when the answer's interval is this narrow, relative")
    ] = 0.1,
    repeats: Annotated[
        int, typer.Option(min=1, help="Runs at each of the two loads bounding the answer")
    ] = 3,
    max_runs: Annotated[int, typer.Option(min=1, help="Most runs in all")] = 30,
    seconds: Annotated[
        float,
        typer.Option(help="Rates: each probe offers its rate this long (0: the config's num_requests)"),
    ] = 30.0,
    set_: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Directory (default: runs/NAME-capacity-TIME)")] = None,
    no_report: NoReportOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Find the highest request rate (or concurrency) at which enough requests meet every SLO.

    Doubles or halves the load until one probe passes and one fails, bisects between them, and reruns
    the two bounding loads; writes capacity.json, capacity.png and a run directory per run.

    Example:

        llmbench capacity configs/llama3-8b-sharegpt.yaml --set backend.type=server --target 0.95
    """
    from llmbench.results.capacity import CapacityOptions
    from llmbench.studies.capacity import CapacityError, run_capacity
    from llmbench.studies.capacity_view import capacity_table

    setup_logging(verbose)
    if by not in ("rate", "concurrency"):
        raise usage_error(f"--by: expected rate or concurrency, got {by!r}")
    options = CapacityOptions(by, target, start, lowest, highest, tolerance, repeats, max_runs, seconds)
    user_errors = (CapacityError, ConfigFileError, ConfigError, WorkloadError, RunDirError)
    failure = f"capacity search failed; runs measured so far are in {out or 'runs/'}"
    with _study_running(user_errors, failure) as progress:
        result = run_capacity(config, set_ or [], options, out, progress)
    _show_study(capacity_table(result.data), result, no_report)


def calibrate(
    config: Annotated[
        Path, typer.Argument(help="YAML run config: its workload, backend.workers and lag bound")
    ],
    ttft_ms: Annotated[
        float, typer.Option(min=0.0, help="The mock's TTFT for the error at the config's load")
    ] = 50.0,
    itl_ms: Annotated[
        float, typer.Option(min=0.0, help="The mock's ITL for the error at the config's load")
    ] = 10.0,
    max_streams: Annotated[int, typer.Option(min=1, help="Most streams the capacity ladder tries")] = 512,
    set_: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Directory (default: runs/NAME-calibrate-TIME)")] = None,
    verbose: VerboseOption = False,
) -> None:
    """Measure the error the benchmark client adds, and the load it sustains, against the bundled mock.

    Runs the config's workload against a mock server of known TTFT and ITL that records what it sent, then
    doubles the streams against a mock sending a chunk every millisecond until a run is client-limited
    (backend.client_lag_bound_ms); writes calibrate.json and a run directory per run.

    Example:

        llmbench calibrate configs/ci.yaml --set backend.workers=2 --max-streams 64
    """
    from llmbench.results.calibrate import CalibrateOptions
    from llmbench.studies.calibrate import CalibrateError, calibrate_table, run_calibrate

    setup_logging(verbose)
    options = CalibrateOptions(ttft_ms, itl_ms, max_streams)
    user_errors = (ConfigFileError, ConfigError, WorkloadError, RunDirError, CalibrateError)
    with _study_running(user_errors, "calibration failed") as progress:
        result = run_calibrate(config, set_ or [], options, out, progress)
    if result.data.fidelity:  # an interrupt during the first run leaves no figure to show
        print_wide(calibrate_table(result.data))
    console.print(f"results: {result.out_dir / 'calibrate.json'}", highlight=False)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


@contextmanager
def _study_running(user_errors: tuple[type[Exception], ...], failure: str) -> Iterator[RunProgress]:
    """A study's runs: its user errors one line and exit 2, Ctrl-C or SIGTERM ending the run in progress
    with its files written (exit 130 once the study has shown what it measured), a progress bar."""
    with (
        exit_codes(user_errors, failure=failure, interruptible=True),
        sigterm_interrupts(),
        RunProgress() as progress,
    ):
        yield progress


def _show_study(table: Table, result: StudyResult, no_report: bool) -> None:
    """A study's table, where its runs are and its report; exit 130 if it was interrupted."""
    print_wide(table)
    console.print(f"results: {result.out_dir}", highlight=False)
    if not no_report and (result.out_dir / "summary.json").is_file():
        show_report(result.out_dir)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def soak(
    requests: Annotated[
        int, typer.Option(min=1, max=MAX_REQUESTS, help="Requests to run through each pool")
    ] = 10_000,
    blocks: Annotated[int, typer.Option(min=1, help="KV blocks of the small, preempting pool")] = 64,
    seed: Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Workload and arrival seed")] = 0,
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

        llmbench soak --requests 10000 --blocks 64 --out docs/measurements/cpu/soak.json
    """
    from llmbench.studies.soak import SoakError, run_soak, soak_engine_config, soak_table

    setup_logging()
    with exit_codes((SoakError, ConfigError)):
        engine_config = soak_engine_config(set_ or [], blocks)
    result = run_soak(engine_config, requests, seed)
    console.print(soak_table(result))
    if out is not None:
        save_json(out, result.to_dict())
    raise typer.Exit(0 if result.passed else EXIT_FAILURE)
