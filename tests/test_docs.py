"""The docs (README.md and docs/**/*.md) name only what exists: every `llmbench <command>` is a command, every
`--option` given with it is one of that command's options (as its --help prints them), every bare `--option`
on a command's own page is one of that command's, and every repository file a doc links to or names in code
exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the pages, not the notes that came with a measurement's files (docs/measurements/<machine>/...), which
# keep the paths of their day
DOCS = sorted(
    [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "measurements" not in p.parent.parts)]
    + list((ROOT / "docs" / "measurements").glob("*.md"))
)
REPO_DIRS = ("docs", "benchmarks", "scripts", "configs", "llmbench", "engine", "kernels", "tests")
REPO_PATH = re.compile(rf"(?<![\w./:-])((?:{'|'.join(REPO_DIRS)})/[\w./-]*)")  # not a git REV:path
COMMAND = re.compile(r"(?<![\w./-])llmbench ([a-z][a-z-]*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def code_of(text: str) -> list[str]:
    """The code a page shows: each line of its fenced blocks (a line ending in a backslash joined to the
    next) and each inline code span outside them."""
    lines = []
    for block in FENCE.findall(text):
        lines += block.replace("\\\n", " ").splitlines()
    return lines + INLINE.findall(FENCE.sub("", text))


def segments(code: str) -> list[str]:
    """One shell command each: split at &&, ||, ; and |, and cut at a bare -- (what follows is another
    program's arguments, as `llmbench profile ... -- nsys args`) and at a comment."""
    parts = re.split(r"&&|\|\||;|\|", code.split(" #")[0])
    return [re.split(r"\s--(?:\s|$)", part)[0] for part in parts]


@cache
def help_text(command: str) -> tuple[int, str]:
    args = [command, "--help"] if command else ["--help"]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "llmbench", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def options_of(command: str) -> set[str]:
    code, text = help_text(command)
    assert code == 0, f"llmbench {command} --help exited {code}:\n{text}"
    return set(OPTION.findall(text))


def named_commands() -> dict[str, set[tuple[str, str]]]:
    """Each command the docs name, with the (page, option) pairs given with it."""
    named: dict[str, set[tuple[str, str]]] = {}
    for page in DOCS:
        name = str(page.relative_to(ROOT))
        for code in code_of(page.read_text()):
            for segment in segments(code):
                found = COMMAND.search(segment)
                if found:
                    options = OPTION.findall(segment[found.end() :])
                    named.setdefault(found.group(1), set()).update((name, o) for o in options)
    return named


@pytest.fixture(scope="module")
def helps() -> None:
    commands = ["", *named_commands(), *(p.stem for p in (ROOT / "docs" / "commands").glob("*.md"))]
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(help_text, dict.fromkeys(commands)))


def test_every_command_the_docs_name_exists(helps):
    _, top = help_text("")
    missing = [c for c in named_commands() if help_text(c)[0] != 0]
    assert not missing, f"not llmbench commands: {missing}\n{top}"


def test_every_command_has_its_page_and_every_page_a_command(helps):
    _, top = help_text("")
    listed = {c for c in re.findall(r"^\W*([a-z][a-z-]*)\s{2,}\S", top, re.M) if help_text(c)[0] == 0}
    pages = {p.stem for p in (ROOT / "docs" / "commands").glob("*.md")}
    assert listed == pages, f"without a page: {listed - pages}; pages of no command: {pages - listed}"


def test_every_option_the_docs_give_a_command_exists(helps):
    wrong = [
        f"{page}: llmbench {command} {option}"
        for command, uses in named_commands().items()
        if help_text(command)[0] == 0
        for page, option in sorted(uses)
        if option not in options_of(command)
    ]
    assert not wrong, "options no --help lists:\n" + "\n".join(wrong)


def test_every_bare_option_on_a_command_page_is_that_commands(helps):
    wrong = []
    for page in sorted((ROOT / "docs" / "commands").glob("*.md")):
        known = options_of(page.stem)
        for code in code_of(page.read_text()):
            if code.startswith("--"):
                wrong += [f"{page.name}: {o}" for o in OPTION.findall(segments(code)[0]) if o not in known]
    assert not wrong, "options the page's command does not have:\n" + "\n".join(wrong)


def cited_paths(page: Path) -> list[tuple[str, Path]]:
    """(as written, where it points) for each link to a file and each repository path in code."""
    text = page.read_text()
    cited = []
    for target in LINK.findall(FENCE.sub("", text)):
        path = target.split("#")[0]
        if path and not re.match(r"[a-z]+:", path):
            cited.append((target, (page.parent / path).resolve()))
    for code in code_of(text):
        for path in REPO_PATH.findall(code):
            path = path.rstrip(".,:")
            if not re.search(r"[<{*]|NAME|TIME", path):
                cited.append((path, ROOT / path))
    return cited


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_page_cites_exists(page):
    missing = [written for written, path in cited_paths(page) if not path.exists()]
    assert not missing, f"{page.relative_to(ROOT)} cites files that do not exist: {missing}"


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_section_a_page_links_to_exists(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        path, _, anchor = target.partition("#")
        if anchor and not re.match(r"[a-z]+:", path):
            linked = (page.parent / path).resolve() if path else page
            if linked.suffix == ".md" and linked.is_file() and anchor not in anchors(linked):
                broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to sections that do not exist: {broken}"
