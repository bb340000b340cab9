"""What makes the package: pyproject.toml's tables say what the wheel holds, and llmbench/__init__.py maps
the same top-level folders for a checkout. Both lists follow the folders, and nothing else of the
repository's root is importable under llmbench."""

import importlib
from pathlib import Path

import pytest

import llmbench

tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def package_folders(folder: Path, name: str) -> set[str]:
    """The package names of a folder and of each folder under it that holds Python files."""
    found = {name}
    for path in folder.rglob("*.py"):
        parts = path.parent.relative_to(folder).parts
        if "__pycache__" not in parts and parts:
            found.add(".".join([name, *parts]))
    return found


def test_the_wheel_lists_every_package_folder():
    mapped = {name: ROOT / folder for name, folder in SETUPTOOLS["package-dir"].items()}
    expected = package_folders(ROOT / "llmbench", "llmbench")
    for name, folder in mapped.items():
        expected |= package_folders(folder, name)
    assert set(SETUPTOOLS["packages"]) == expected


def test_a_checkout_maps_the_folders_the_wheel_maps():
    assert llmbench.CHECKOUT_FOLDERS == SETUPTOOLS["package-dir"]


@pytest.mark.parametrize("name", ["tests", "benchmarks", "docs", "scripts"])
def test_the_rest_of_the_repository_is_no_part_of_the_package(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"llmbench.{name}")


def test_the_mapped_folders_import_from_the_repository_or_the_install():
    import llmbench.engine.config
    import llmbench.kernels.reference

    from llmbench.config.load import SHIPPED_CONFIGS

    installed = Path(llmbench.__file__).parent
    for module, folder in ((llmbench.engine.config, "engine"), (llmbench.kernels.reference, "kernels")):
        assert Path(module.__file__).parent in (ROOT / folder, installed / folder)
    assert (SHIPPED_CONFIGS / "quickstart.yaml").is_file()
