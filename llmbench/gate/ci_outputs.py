"""Verdicts in the forms CI systems read: a Markdown table for a job's summary page (GitHub Actions
appends `$GITHUB_STEP_SUMMARY` to it) and JUnit XML, one test case per metric, for the systems that
chart test results (GitLab, Jenkins, Buildkite). A regression is a failure, "can't tell" an error: the
gate could not judge, which is not the same as judging the change bad."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from llmbench.gate.compare import FAILING, INCONCLUSIVE, Verdict, format_value


def verdicts_markdown(title: str, verdicts: list[Verdict], note: str = "") -> str:
    lines = [f"### {title}", ""]
    if note:
        lines += [note, ""]
    lines += [
        "| metric | baseline | current | change | 95% CI | limit | verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for v in verdicts:
        ci = "-" if v.ci_low is None else f"{v.ci_low:+.1%}..{v.ci_high:+.1%}"
        sign = -1 if v.higher_is_better else 1
        mark = "❌ " if v.verdict in FAILING else "⚠️ " if v.verdict in INCONCLUSIVE else ""
        values = f"{format_value(v.baseline)} | {format_value(v.current)} | {v.change:+.2%} | {ci}"
        lines.append(f"| `{v.metric}` | {values} | {sign * v.threshold:+.1%} | {mark}{v.verdict} |")
    return "\n".join(lines) + "\n"


def write_markdown(path: Path | None, text: str) -> list[Path]:
    """Append to `path` and to $GITHUB_STEP_SUMMARY when set; the files written."""
    targets = [p for p in (path, os.environ.get("GITHUB_STEP_SUMMARY")) if p]
    for target in targets:
        with open(target, "a") as f:
            f.write(text + "\n")
    return [Path(t) for t in targets]


def verdicts_junit(suite: str, verdicts: list[Verdict]) -> str:
    failures = sum(v.verdict in FAILING for v in verdicts)
    errors = sum(v.verdict in INCONCLUSIVE for v in verdicts)
    root = ET.Element("testsuites")
    tests = str(len(verdicts))
    node = ET.SubElement(
        root, "testsuite", name=suite, tests=tests, failures=str(failures), errors=str(errors)
    )
    for v in verdicts:
        case = ET.SubElement(node, "testcase", classname=suite, name=v.metric)
        detail = (
            f"baseline {format_value(v.baseline)}, current {format_value(v.current)}, change {v.change:+.2%}"
        )
        if v.ci_low is not None:
            detail += f" (95% CI {v.ci_low:+.2%}..{v.ci_high:+.2%})"
        detail += f", limit {v.threshold:.1%}"
        if v.verdict in FAILING:
            ET.SubElement(case, "failure", message=f"{v.verdict}: {detail}")
        elif v.verdict in INCONCLUSIVE:
            ET.SubElement(case, "error", message=f"can't tell ({v.verdict}): {detail}")
        else:
            ET.SubElement(case, "system-out").text = f"{v.verdict}: {detail}"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
