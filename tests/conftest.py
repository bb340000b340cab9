import functools
import os
import subprocess
import sys

import pytest
import torch
from packaging.version import Version

# Without a GPU, Triton kernels run in the interpreter; it must be set before any @triton.jit is defined.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# pytest-xdist workers share the cores: torch's default, a thread per core in every worker, oversubscribes
# them (on the 16-core GPU host the suite missed a 9-minute limit so; one thread each ran it in 84 s)
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"  # for the processes a test starts, too
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _keep_cpu_threads():
    """A run applies hardware.cpu_threads to the whole process (and OMP_NUM_THREADS for its children);
    a test's setting, say a fuzzed 300, must not slow the tests after it."""
    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    yield
    torch.set_num_threads(threads)
    if omp is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = omp


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The one place a test is skipped for the hardware it needs: @pytest.mark.gpu (a CUDA device),
    gpu(2) (two), gpu(capability=9) (Hopper or later); @pytest.mark.flash (FlashAttention-4 runs)."""
    gpu = item.get_closest_marker("gpu")
    if gpu is not None:
        count = gpu.kwargs.get("count", gpu.args[0] if gpu.args else 1)
        capability = gpu.kwargs.get("capability")
        if torch.cuda.device_count() < count:
            pytest.skip(f"needs {count} CUDA device{'s' * (count > 1)}")
        if capability is not None and torch.cuda.get_device_capability()[0] < capability:
            pytest.skip(f"needs compute capability {capability}.0 or later")
    if item.get_closest_marker("flash") is not None and (reason := _flash_unavailable()):
        pytest.skip(f"FlashAttention-4 {reason}")


@functools.cache
def _flash_unavailable() -> str | None:
    if not torch.cuda.is_available():
        return "needs CUDA"
    from llmbench.kernels import flash_attention

    return flash_attention.unavailable_reason(torch.device("cuda"), torch.bfloat16, 128)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "triton_interpreter: runs Triton kernels on CPU tensors, which needs the interpreter; where this "
        "process compiles them (a GPU machine), the test runs in a child pytest with TRITON_INTERPRET=1",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    # @triton.jit picks interpreter or compiler when a kernel module is imported, once per process:
    # a compiled-kernel process cannot also interpret, so the test gets a process of its own
    if (
        pyfuncitem.get_closest_marker("triton_interpreter") is None
        or os.environ.get("TRITON_INTERPRET") == "1"
    ):
        return None
    import triton  # only a compiled-kernel process gets here; the interpreting ones never need it

    if Version(triton.__version__) < Version("3.7"):
        # the GPU image pairs torch 2.11 with triton 3.6, whose interpreter hands program ids and scalar
        # loads over as one-element arrays that cannot bound a loop: every paged kernel fails there
        pytest.skip(f"the Triton {triton.__version__} interpreter cannot run these kernels (3.7 can)")
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid],
        cwd=pyfuncitem.config.rootpath,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        pytest.fail(
            f"failed under TRITON_INTERPRET=1 in a child pytest:\n{child.stdout[-6000:]}", pytrace=False
        )
    return True
