"""The import graph of the installed packages llmbench, llmbench.engine and llmbench.kernels: no import
circle, and every import on the toolkit's floors (docs/design/toolkit.md). Of the tests': no test module
imports another.

The graph is read from the source with `ast`, so every import counts: module level, inside functions and
under TYPE_CHECKING. `from pkg import name` imports the submodule pkg.name when there is one, else pkg.
A circle is a strongly connected component of more than one module; the failure lists each with its
edges. A floor failure names the importing file and line and both packages."""

import ast
import importlib.util
import re
from pathlib import Path

PACKAGES = ("llmbench", "llmbench.engine", "llmbench.kernels")
ROOT = Path(__file__).resolve().parents[1]
FLOORS_PAGE = ROOT / "docs" / "design" / "toolkit.md"
# llmbench's own two modules stand outside the floors: `python -m llmbench` runs the commands, and the
# package's __init__ (its version) may be read from any floor
ENTRY, ROOT_MODULE = "llmbench.__main__", "llmbench"


def package_modules() -> dict[str, Path]:
    """Module name -> source file, for every .py file of the packages as installed."""
    modules = {}
    for package in PACKAGES:
        root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join([package, *(p for p in parts if p != "__init__")])] = path
    return modules


def import_lines(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) for each of the given modules that `name` imports (the nearest enclosing one when a
    name is not a module), itself left out."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, known(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from this module's package
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((node.lineno, submodule if submodule in modules else known(base)))
    return sorted({(line, module) for line, module in found if module not in (None, name)})


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules `name` imports (the nearest enclosing one when a name is not a module)."""
    return {module for _, module in import_lines(name, path, modules)}


def floors_of_page(text: str) -> list[tuple[str, ...]]:
    """The floors the page's "## The order" block lists, top first: a line's first column names its
    packages (comma-separated); an indented line goes on with the one before."""
    block = re.search(r"^## The order\n.*?^```\n(.*?)^```", text, re.S | re.M)
    assert block, f"{FLOORS_PAGE}: no fenced block under '## The order'"
    lines = [line for line in block.group(1).splitlines() if line and not line[0].isspace()]
    return [tuple(re.split(r"\s{2,}", line)[0].split(", ")) for line in lines]


def package_of(module: str) -> str:
    """The floor's name for a module: llmbench.run.phase -> run, llmbench.engine.x -> engine; ENTRY and
    ROOT_MODULE are their own."""
    return module if module in (ENTRY, ROOT_MODULE) else module.split(".")[1]


def floor_breaches(modules: dict[str, Path], floors: list[tuple[str, ...]]) -> list[str]:
    """Every package on no floor, and every import against the floors as "file:line: A imports B
    (module), which stands above it" (or "shares its floor"). `floors` lists packages top first; ENTRY
    stands above them all and ROOT_MODULE below."""
    level = {ENTRY: -1, ROOT_MODULE: len(floors)}
    level |= {package: k for k, floor in enumerate(floors) for package in floor}
    unplaced = sorted({package_of(name) for name in modules} - set(level))
    breaches = [f"{package} is on no floor of {shown(FLOORS_PAGE)}" for package in unplaced]
    for name, path in modules.items():
        here = package_of(name)
        for line, module in import_lines(name, path, modules):
            there = package_of(module)
            if here == there or {here, there} & set(unplaced) or level[here] < level[there]:
                continue
            where = "shares its floor" if level[here] == level[there] else "stands above it"
            breaches.append(f"{shown(path)}:{line}: {here} imports {there} ({module}), which {where}")
    return breaches


def shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def modules_under(root: Path, top: Path) -> dict[str, Path]:
    """Module name -> source file, for every .py file under `top`, named from `root`."""
    return {
        ".".join(p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"): path
        for path in sorted(top.rglob("*.py"))
    }


def write_tree(root: Path, sources: dict[str, str]) -> dict[str, Path]:
    for file, text in sources.items():
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text(text)
    return modules_under(root, root)


def test_function_level_and_type_checking_imports_of_submodules_count(tmp_path):
    sources = {
        "p/__init__.py": "",
        "p/a.py": "def f():\n    from p.b import g\n",
        "p/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import a\n",
        "p/c.py": "from . import a\nfrom p.a import f\nimport p\n",
    }
    modules = write_tree(tmp_path, sources)
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    assert graph == {"p": set(), "p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p", "p.a"}}
    assert import_lines("p.c", modules["p.c"], modules) == [(1, "p.a"), (2, "p.a"), (3, "p")]
    assert circles(graph) == [["p.a", "p.b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]


def test_an_import_against_the_floors_names_its_file_line_and_both_packages(tmp_path):
    modules = write_tree(
        tmp_path,
        {
            "llmbench/__init__.py": "",
            "llmbench/__main__.py": "from llmbench.top import app\n",
            "llmbench/top/__init__.py": "",
            "llmbench/top/app.py": "import llmbench\nfrom llmbench.low.data import Row\n",
            "llmbench/low/__init__.py": "",
            "llmbench/low/data.py": "import os\n\n\ndef late():\n    from llmbench.top import app\n",
            "llmbench/side/__init__.py": "from llmbench.low import data\nfrom llmbench.beside import y\n",
            "llmbench/beside/y.py": "",
            "llmbench/stray/z.py": "from llmbench.top.app import Row\n",
        },
    )
    floors = floors_of_page(
        "## The order\n\n```\ntop       commands\nside, beside  two\n  more\nlow  data\n```\n"
    )
    assert floors == [("top",), ("side", "beside"), ("low",)]
    assert floor_breaches(modules, floors) == [
        f"stray is on no floor of {shown(FLOORS_PAGE)}",
        f"{tmp_path}/llmbench/low/data.py:5: low imports top (llmbench.top.app), which stands above it",
        f"{tmp_path}/llmbench/side/__init__.py:2: side imports beside (llmbench.beside.y), which shares "
        "its floor",
    ]


def test_the_packages_have_no_import_circle():
    modules = package_modules()
    assert {"llmbench.cli.app", "llmbench.engine.core.llm_engine", "llmbench.kernels.triton_ops"} <= set(
        modules
    )
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    found = circles(graph)
    report = [
        "\n".join([f"circle of {len(c)}:"] + [f"  {m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c])
        for c in found
    ]
    assert not found, "\n".join(report)


def test_every_import_keeps_to_the_floors():
    breaches = floor_breaches(package_modules(), floors_of_page(FLOORS_PAGE.read_text()))
    assert not breaches, f"against the floors of {shown(FLOORS_PAGE)}:\n" + "\n".join(breaches)


def test_no_test_module_imports_another():
    # what tests share lives in a conftest.py or a helper module (tests/llmbench/run_dirs.py, say)
    tests = Path(__file__).resolve().parent
    modules = modules_under(tests.parent, tests)
    found = [
        f"{shown(path)}:{line}: imports {module}"
        for name, path in modules.items()
        for line, module in import_lines(name, path, modules)
        if module.rpartition(".")[2].startswith("test_")
    ]
    assert not found, "test modules imported by others:\n" + "\n".join(found)
