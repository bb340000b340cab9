"""The report as a user sees it: headless Chromium loads report.html, logs no console errors, draws
every chart and paints a page that is not blank. CI installs Debian's chromium, so there the test must run."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pytest

from llmbench.report import write_report
from tests.llmbench.run_dirs import make_run_dir, study_dir, write_ablation

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IN_CI = os.environ.get("CI") == "true"
WINDOW = (1280, 2000)

pytestmark = pytest.mark.skipif(CHROMIUM is None and not IN_CI, reason="chromium not installed")


def chromium_flags(tmp_path: Path) -> list[str]:
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ]


def render(page: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """Console lines Chromium logged while loading `page`, and its screenshot."""
    if CHROMIUM is None:
        pytest.fail("chromium is required in CI (.ci/run installs it)")
    shot = tmp_path / f"{page.stem}.png"
    flags = [*chromium_flags(tmp_path), f"--screenshot={shot}"]
    proc = subprocess.run([CHROMIUM, *flags, page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    return console, shot


def test_console_errors_are_detected(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<html><body><p>x</p><script>console.error('boom'); missing();</script></body></html>")
    console, _ = render(page, tmp_path)
    assert any("boom" in line for line in console)
    assert any("Uncaught ReferenceError" in line for line in console)


def test_report_loads_without_console_errors_and_is_not_blank(tmp_path):
    hostile = "<script>console.error('injected'); document.body.innerHTML = ''</script>"
    run = make_run_dir(tmp_path / "run", name="<img src=x onerror=alert(1)>", gpu=True, prompt=hostile)
    write_ablation(run, {"all off": 100.0, "chunked_prefill": 140.0, "all on": 175.0})
    report = write_report([run], run)

    console, shot = render(report, tmp_path)
    assert console == []  # the hostile prompt and name were shown as text, never run

    study = write_report(
        [study_dir(tmp_path / "study", "ablation", ["all off", "+chunked_prefill"])], tmp_path / "study"
    )
    assert render(study, tmp_path)[0] == []
    dom = subprocess.run(
        [CHROMIUM, *chromium_flags(tmp_path), "--dump-dom", study.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    for heading in ("Headline figures", "Step time breakdown", "Ablation and sweep", "Latency", "Over time"):
        assert f"<h2>{heading}</h2>" in dom
    canvases = re.findall(r"<canvas[^>]*>", dom)
    assert len(canvases) == 9  # breakdown, ablation bars, four CDFs, throughput, queue, KV blocks
    assert all("box-sizing: border-box" in c for c in canvases)  # Chart.js sized and drew each one

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    assert pixels.std() > 0.05
    assert (pixels < 0.5).mean() > 0.01  # text and plot lines, not just a white page
