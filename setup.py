"""Lists the packages: llmbench, and the top-level engine/ and kernels/ folders installed as llmbench.engine
and llmbench.kernels (pyproject.toml maps the folders; the names are found here)."""

from setuptools import find_namespace_packages, setup


def packages_under(folder: str, name: str) -> list[str]:
    return [name] + [f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]


setup(
    packages=packages_under("llmbench", "llmbench")
    + packages_under("engine", "llmbench.engine")
    + packages_under("kernels", "llmbench.kernels")
)
