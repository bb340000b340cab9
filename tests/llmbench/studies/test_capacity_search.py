"""The capacity search on loads whose goodput share is known: it brackets the knee, bisects it to its
stated width, reruns the two loads that bound it, and says when the answer lies past its range."""

import pytest

from llmbench.studies.capacity_search import SearchSpace, find_capacity


def knee(at: float, noise: dict | None = None):
    """A share of 1 up to `at`, 0.5 above; `noise` maps (value, repeat) to a share that differs."""
    calls = []

    def measure(value, repeat):
        calls.append((value, repeat))
        if noise and (value, repeat) in noise:
            return noise[(value, repeat)]
        return 1.0 if value <= at else 0.5

    return measure, calls


@pytest.mark.parametrize("at", [0.37, 7.3, 42.0, 333.0])
def test_a_rate_knee_lies_in_the_interval_and_the_interval_is_as_narrow_as_asked(at):
    measure, calls = knee(at)
    result = find_capacity(SearchSpace(4.0, 0.1, 1000.0, integer=False, tolerance=0.1), measure, 0.95, 3, 40)
    assert result.complete
    assert result.passing <= at < result.failing
    assert result.failing <= result.passing * 1.1
    probes = {p.value: p for p in result.probes}
    # the bounds ran three times each, every other load once
    assert len(probes[result.passing].shares) == len(probes[result.failing].shares) == 3
    assert all(len(p.shares) == 1 for v, p in probes.items() if v not in (result.passing, result.failing))
    assert len(calls) == sum(len(p.shares) for p in result.probes)


def test_a_concurrency_knee_is_found_to_neighbouring_integers():
    measure, _ = knee(37)
    result = find_capacity(SearchSpace(8.0, 1.0, 1024.0, integer=True), measure, 0.95, 2, 40)
    assert (result.passing, result.failing) == (37.0, 38.0)
    assert all(p.value == int(p.value) for p in result.probes)


def test_a_boundary_rerun_that_turns_a_verdict_moves_the_search():
    """8 passed once by luck; its reruns fail, so the answer lies below 8 after all."""
    measure, _ = knee(5.0, noise={(8.0, 0): 1.0})
    result = find_capacity(SearchSpace(1.0, 0.1, 1000.0, integer=False, tolerance=0.1), measure, 0.95, 3, 60)
    assert result.complete and result.passing <= 5.0 < result.failing <= 8.0


def test_loads_past_either_end_of_the_range_are_reported_as_such():
    always, _ = knee(1e9)
    result = find_capacity(SearchSpace(8.0, 1.0, 64.0, integer=True), always, 0.95, 2, 40)
    assert (result.passing, result.failing) == (64.0, None)
    never, _ = knee(0.0)
    result = find_capacity(SearchSpace(8.0, 1.0, 64.0, integer=True), never, 0.95, 2, 40)
    assert (result.passing, result.failing) == (None, 1.0)


def test_the_run_limit_stops_the_search_with_what_it_knows():
    measure, calls = knee(7.3)
    result = find_capacity(SearchSpace(1.0, 0.1, 1000.0, integer=False), measure, 0.95, 3, 5)
    assert not result.complete and len(calls) == 5
    assert (result.passing, result.failing) == (5.66, 8.0)  # 1, 2, 4, 8, then sqrt(4 x 8)


def test_a_search_settled_by_its_last_allowed_run_is_complete():
    space = SearchSpace(1.0, 0.1, 1000.0, integer=False)
    unlimited, calls = knee(7.3)
    find_capacity(space, unlimited, 0.95, 2, 100)
    measure, limited_calls = knee(7.3)
    result = find_capacity(space, measure, 0.95, 2, len(calls))
    assert result.complete and limited_calls == calls


def test_a_share_exactly_at_the_target_passes():
    result = find_capacity(
        SearchSpace(2.0, 1.0, 4.0, integer=True), lambda v, r: 0.95 if v <= 3 else 0.9, 0.95, 1, 20
    )
    assert (result.passing, result.failing) == (3.0, 4.0)
