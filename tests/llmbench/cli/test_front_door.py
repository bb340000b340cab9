"""The front door is light: --help, --version and every config or usage error answer without importing
torch, pandas or matplotlib (each costs seconds on a loaded host; the answer needs none of them)."""

import json
import subprocess
import sys

import llmbench

HEAVY = ("torch", "pandas", "matplotlib")

# (arguments, exit code): each is answered before a model, a run or a report would need the heavy modules
CALLS = [
    (["--help"], 0),
    (["--version"], 0),
    (["run", "--help"], 0),
    (["run", "nosuchthing"], 2),
    (["run", "quickstart", "--set", "nosuch.key=1"], 2),
    (["run", "quickstart", "--set", "workload.num_requests=0"], 2),
    (["run", "quickstart", "--repeat", "0"], 2),
    (["run", "quickstart", "--out", "/dev/null"], 2),
    (["serve", "nosuchthing"], 2),
    (["ablate", "quickstart", "--order", "nosuch"], 2),
    (["sweep", "quickstart", "--rates", "fast"], 2),
    (["soak", "--set", "workload.seed=1"], 2),
    (["profile", "quickstart"], 2),
    (["profile", "quickstart", "--torch", "--steps", "9:3"], 2),
    (["compare", "nosuch-a", "nosuch-b"], 2),
    (["report", "nosuch-run"], 2),
    (["nosuchcommand"], 2),
]

# one interpreter for all the calls: after each, which heavy modules have been imported so far
PROBE = """
import json, sys
from llmbench.cli import app
calls, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
seen = []
for args in calls:
    try:
        app(args, prog_name="llmbench")
        code = 0
    except SystemExit as e:
        code = e.code or 0
    seen.append([args, code, [m for m in heavy if m in sys.modules]])
print(json.dumps(seen))
"""


def test_help_version_and_usage_errors_import_no_torch_pandas_or_matplotlib(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([args for args, _ in CALLS]), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert [(args, code) for args, code, _ in seen] == CALLS, result.stderr
    assert [(args, heavy) for args, _, heavy in seen if heavy] == []
    assert f"llmbench {llmbench.__version__}\n" in result.stdout
    assert not (tmp_path / "runs").exists()  # nothing was run
