"""No import circle in the installed packages llmbench, llmbench.engine and llmbench.kernels.

The graph is read from the source with `ast`, so every import counts: module level, inside functions and
under TYPE_CHECKING. `from pkg import name` imports the submodule pkg.name when there is one, else pkg.
A circle is a strongly connected component of more than one module; the failure lists each with its
edges."""

import ast
import importlib.util
from pathlib import Path

PACKAGES = ("llmbench", "llmbench.engine", "llmbench.kernels")


def package_modules() -> dict[str, Path]:
    """Module name -> source file, for every .py file of the packages as installed."""
    modules = {}
    for package in PACKAGES:
        # the first location only: a source checkout appends the repository root to llmbench's path
        root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join([package, *(p for p in parts if p != "__init__")])] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules `name` imports (the nearest enclosing one when a name is not a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(known(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from this module's package
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else known(base))
    found.discard(None)
    found.discard(name)
    return found


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


def test_function_level_and_type_checking_imports_of_submodules_count(tmp_path):
    sources = {
        "p/__init__.py": "",
        "p/a.py": "def f():\n    from p.b import g\n",
        "p/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import a\n",
        "p/c.py": "from . import a\nfrom p.a import f\nimport p\n",
    }
    modules = {}
    for file, text in sources.items():
        (tmp_path / file).parent.mkdir(exist_ok=True)
        (tmp_path / file).write_text(text)
        modules[file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")] = tmp_path / file
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    assert graph == {"p": set(), "p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p", "p.a"}}
    assert circles(graph) == [["p.a", "p.b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]


def test_the_packages_have_no_import_circle():
    modules = package_modules()
    assert {"llmbench.cli.app", "llmbench.engine.llm_engine", "llmbench.kernels.triton_ops"} <= set(modules)
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    found = circles(graph)
    report = [
        "\n".join([f"circle of {len(c)}:"] + [f"  {m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c])
        for c in found
    ]
    assert not found, "\n".join(report)
