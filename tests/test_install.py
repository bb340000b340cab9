"""The wheel in a fresh virtual environment beside transformers, which brings Hugging Face's `kernels`: the
two projects must not share an import name. The wheel is built from this checkout, installed with its
dependencies, and used from outside the checkout; transformers is then imported from the checkout's root,
where the folders engine/ and kernels/ sit in the working directory."""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(command: list[str], cwd: Path) -> str:
    # the child must see only the fresh environment, not this checkout or the test process's packages
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TRITON_INTERPRET")}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def _index_reachable(where: Path) -> bool:
    # the GPU machine has no network: there this test has nothing to install from
    fetch = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(where), "packaging"]
    return subprocess.run(fetch, capture_output=True, timeout=300).returncode == 0


def test_the_wheel_installs_beside_transformers_and_runs_the_quickstart(tmp_path: Path) -> None:
    if not _index_reachable(tmp_path / "probe"):
        pytest.skip("no package index reachable to install the wheel's dependencies from")
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)], tmp_path)
    (wheel,) = wheels.glob("llmbench-*.whl")

    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    # the CPU build of torch and its Triton first, as the README installs them: a plain `torch` requirement
    # could pull a CUDA build of several GB
    torch_pins = [f"torch=={_version('torch')}", f"triton=={_version('triton')}"]
    _run([python, "-m", "pip", "install", "-q", *torch_pins], tmp_path)
    _run([python, "-m", "pip", "install", "-q", str(wheel), "transformers>=5"], tmp_path)
    _run([python, "-m", "pip", "check"], tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    llmbench = str(tmp_path / "venv" / "bin" / "llmbench")
    _run([llmbench, "run", "quickstart", "--out", str(tmp_path / "run"), "--no-report"], elsewhere)
    assert (tmp_path / "run" / "summary.json").is_file()

    # from the checkout's root the working directory comes first on sys.path: its kernels/ folder must not
    # stand in for Hugging Face's package, which transformers imports
    probe = (
        "from transformers import LlamaConfig; import kernels, llmbench.kernels.reference; "
        "print(kernels.__file__)"
    )
    hf_kernels = _run([python, "-c", probe], ROOT).strip()
    assert Path(hf_kernels).is_relative_to(tmp_path / "venv"), hf_kernels


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name).split("+")[0]
