"""Every example a command's --help gives runs as shown from the repository's root: it parses, names only
files that exist or that an earlier example of the same help writes, its config loads with its --set
applied, and where it runs on a CPU and ends by itself it succeeds. The commands the docs/commands pages
give in their shell blocks parse and load their configs too."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.config.load import load_config, resolve_config_path
from llmbench.studies.calibrate import AS_CLIENT

ROOT = Path(__file__).resolve().parents[3]
COMMANDS = get_command(app).commands
OUTPUTS = ("out", "json_out")  # the path options a command writes; it reads every other path it names
WIDE = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}  # no example wrapped across two lines
# checked, not run here: each says why (the studies take a minute or more on 2 cores)
NOT_RUN = {
    "serve": "serves until stopped",
    "kernels": "times Triton kernels on a GPU",
    "ablate": "25 runs (5 variants, 5 trials each)",
    "soak": "10,000 requests",
}
# compare's exit 1 is its verdict on two timings, which a loaded host can tip; 2 would be a wrong example
EXIT_CODES = {"compare": (0, 1)}
PAGES = sorted((ROOT / "docs" / "commands").glob("*.md"))
SHELL_BLOCK = re.compile(r"^```(?:bash|sh)\n(.*?)^```", re.S | re.M)
# a page may stand for the user's earlier runs by their directories (runs/NAME-TIME)
EARLIER_RUN = re.compile(r"runs/")


def help_examples() -> dict[str, list[str]]:
    """Each command's examples, as its --help prints them: the lines that start with `llmbench `."""
    examples = {}
    for name in COMMANDS:
        shown = CliRunner().invoke(app, [name, "--help"], env=WIDE)
        assert shown.exit_code == 0, shown.output
        lines = [line.strip() for line in shown.output.splitlines()]
        examples[name] = [line for line in lines if line.startswith("llmbench ")]
    return examples


EXAMPLES = help_examples()


def page_examples(page: Path) -> list[str]:
    """The llmbench commands of a page's shell blocks, one per line (backslash continuations joined, an
    `ENV=value` prefix, a trailing comment or `&` dropped)."""
    found = []
    for block in SHELL_BLOCK.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|\||;|\|", line.split(" #")[0]):
                command = re.match(r"\s*(?:\w+=\S*\s+)*(llmbench .*)", part)
                if command:
                    found.append(command.group(1).strip().rstrip("&").strip())
    return found


def names_a_path(hint) -> bool:
    return hint is Path or any(names_a_path(arg) for arg in typing.get_args(hint))


# the parameters each command declares as paths: some typer releases hand them over parsed as Path
# objects, others as the strings click read
PATH_PARAMS = {
    info.callback.__name__: {
        name for name, hint in typing.get_type_hints(info.callback).items() if names_a_path(hint)
    }
    for info in app.registered_commands
}


def parse(example: str) -> tuple[str, dict]:
    """The command an example calls and its parameters as parsed (path parameters as Path objects); a bad
    option or argument raises."""
    words = shlex.split(example)
    assert words[0] == "llmbench" and words[1] in COMMANDS, f"not a llmbench command: {example}"
    # what follows a bare -- goes to another program (`llmbench profile ... -- nsys args`)
    args = words[2 : words.index("--")] if "--" in words else words[2:]
    params = COMMANDS[words[1]].make_context(words[1], args).params
    for name in PATH_PARAMS[words[1]] & params.keys():
        value = params[name]
        if isinstance(value, list | tuple):
            params[name] = [Path(v) for v in value]
        elif value is not None:
            params[name] = Path(value)
    return words[1], params


def paths(params: dict, names) -> list[Path]:
    found = []
    for name in names:
        value = params.get(name)
        found += [v for v in (value if isinstance(value, list | tuple) else [value]) if isinstance(v, Path)]
    return found


def where(path: Path) -> Path:
    """Where a path an example reads lies: in the checkout, or a shipped config by name."""
    return ROOT / path if (ROOT / path).exists() else resolve_config_path(path)


def config_of(command: str, params: dict):
    """The example's run config with its --set applied, or None where it names none that exists yet."""
    config = params.get("config")
    if config is None or not where(config).exists():
        return None
    as_run = AS_CLIENT if command == "calibrate" else ()  # calibrate runs any config as an HTTP client
    return load_config(where(config), [*(params.get("set_") or []), *as_run])


def unread(examples: list[str], placeholder: re.Pattern | None = None) -> list[str]:
    """The files the examples read that neither the repository holds nor an earlier example writes
    (nor `placeholder` matches); loading each config checks it and its --set."""
    missing, written = [], []
    for example in examples:
        command, params = parse(example)
        for path in paths(params, [name for name in params if name not in OUTPUTS]):
            if where(path).exists() or any(path == w or w in path.parents for w in written):
                continue
            if placeholder is None or not placeholder.match(str(path)):
                missing.append(f"{example}: {path}")
        config_of(command, params)
        written += paths(params, OUTPUTS)
    return missing


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_gives_an_example(command):
    assert EXAMPLES[command], f"llmbench {command} --help gives no example"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_examples_parse_and_read_files_that_exist(command):
    assert not unread(EXAMPLES[command]), "files no one wrote"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_parse_and_read_files_that_exist(page):
    assert not unread(page_examples(page), placeholder=EARLIER_RUN), "files no one wrote"


def on_a_gpu(example: str) -> bool:
    config = config_of(*parse(example))
    return config is not None and config.model.device == "cuda"


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_examples_run(command, tmp_path):
    if command in NOT_RUN:
        pytest.skip(NOT_RUN[command])
    # a GPU workload takes minutes even on its GPU: the check above loads its config instead
    runnable = [example for example in EXAMPLES[command] if not on_a_gpu(example)]
    if not runnable:
        pytest.skip("GPU workloads only")
    # a scratch root holding copies of the repository's inputs (a few small configs) and the folders its
    # outputs go to (new), so no example writes into the checkout; copies, not links: the GPU machine's
    # scratch space did not follow links into the checkout
    copied = set()  # the checkout's folders and files an example reads
    for example in runnable:
        params = parse(example)[1]
        for path in paths(params, [name for name in params if name not in OUTPUTS]):
            source, copy = ROOT / path.parts[0], tmp_path / path.parts[0]
            if source.exists() and not copy.exists():
                (shutil.copytree if source.is_dir() else shutil.copy2)(source, copy)
                copied.add(path.parts[0])
        for path in paths(params, OUTPUTS):
            assert path.parts[0] not in copied, f"{example} writes into the checkout"
            if (ROOT / path.parent).is_dir():
                (tmp_path / path.parent).mkdir(parents=True, exist_ok=True)
    # the checkout under test, wherever llmbench was installed from
    env = {**os.environ, **WIDE, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for example in runnable:
        words = shlex.split(example)
        done = subprocess.run(
            [sys.executable, "-m", "llmbench", *words[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode in EXIT_CODES.get(command, (0,)), f"{example}\n{done.stdout}\n{done.stderr}"
