"""The gate's history: records appended and read back, change points on series of known steps, the
chart and page of `llmbench history`, and its bad input."""

import pytest
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.gate.history import HistoryError, HistoryRecord, append_record, change_points, load_history


def record(k: int, value: float, metric: str = "steps.instructions_per_step", code: int = 0) -> HistoryRecord:
    return HistoryRecord(
        commit=f"{k:02d}" * 20,
        date=f"2026-12-07T10:{k:02d}:00+00:00",
        metric=metric,
        mode="instructions",
        value=value,
        baseline_value=1_000_000.0,
        baseline_commit="0" * 40,
        change=value / 1_000_000 - 1,
        ci_low=None,
        ci_high=None,
        threshold=0.02,
        verdict="ok" if code == 0 else "REGRESSION",
        exit_code=code,
        config="configs/ci.yaml",
        host="ci",
    )


def test_records_round_trip_through_the_jsonl_file(tmp_path):
    path = tmp_path / "deep" / "history.jsonl"
    written = [record(k, 1_000_000 + k) for k in range(3)]
    for r in written:
        append_record(path, r)
    assert load_history(path) == written
    assert len(path.read_text().splitlines()) == 3


def test_a_step_that_stays_is_one_change_point_and_noise_is_none():
    # instruction counts: flat within 0.03%, then 4% more from the sixth gate on
    flat = [1_000_000, 1_000_200, 999_900, 1_000_100, 1_000_000]
    stepped = [1_040_000, 1_040_150, 1_039_900, 1_040_050]
    (point,) = change_points(flat + stepped, min_change=0.01)
    assert point.index == 5 and point.change == pytest.approx(0.04, abs=1e-3)
    assert change_points(flat, min_change=0.01) == []
    # a wall-time series whose noise (±5%) is larger than its 3% drift has no change point
    noisy = [1.00, 1.05, 0.95, 1.04, 0.97, 1.03, 1.08, 0.98, 1.02, 1.06]
    assert change_points(noisy, min_change=0.01) == []
    # a step down and back up: two change points, in order
    assert [p.index for p in change_points([10.0] * 4 + [8.0] * 4 + [10.0] * 4, 0.01)] == [4, 8]


def test_history_command_writes_the_chart_and_page_with_the_change_point(tmp_path):
    path = tmp_path / "history.jsonl"
    values = [1_000_000, 1_000_100, 999_950, 1_050_000, 1_050_100, 1_049_900]
    for k, value in enumerate(values):
        append_record(path, record(k, value, code=1 if k == 3 else 0))
    append_record(path, record(9, 0.12, metric="steps.mean_cpu_ms_per_step"))
    result = CliRunner().invoke(
        app, ["history", str(path), "--metric", "steps.instructions_per_step", "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert f"change point at {'03' * 6}" in result.output and "+5.00%" in result.output
    png, page = tmp_path / "out" / "history.png", tmp_path / "out" / "history.html"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text()
    assert "data:image/png;base64," in text and "03" * 6 in text and "+5.00%" in text
    # two metrics and none chosen: the one-line error names the option
    both = CliRunner().invoke(app, ["history", str(path), "--out", str(tmp_path / "x")])
    assert both.exit_code == 2 and "--metric" in both.output


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such history file"),
        ("", "holds no record"),
        ('{"commit": 1}\n', ":1: not a gate history record"),
    ],
)
def test_a_bad_history_file_is_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "history.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(HistoryError, match=message):
        load_history(path)
    result = CliRunner().invoke(app, ["history", str(path)])
    assert result.exit_code == 2 and message in " ".join(result.output.split())
