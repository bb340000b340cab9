"""Ramp-up arrivals against their formulas: a constant process submits exactly where the ramp's
cumulative rate crosses each integer, a random one is the same draws moved by time rescaling, and each
request's row records the rate offered at its arrival."""

import json
import math

import numpy as np
import pytest
from llmbench.engine.config import ConfigError

from llmbench.config.load import parse_config
from llmbench.config.schema import ArrivalConfig, RampUpConfig
from llmbench.run.ramp import cumulative, offered_rate
from llmbench.run.runner import run_benchmark
from llmbench.run.workload import arrival_times
from tests.llmbench.null_run import NULL_RUN


def constant(strategy, start_rate=2.0, rate=10.0, duration_s=4.0):
    ramp = RampUpConfig(strategy, start_rate, duration_s)
    return ArrivalConfig("constant", rate=rate, ramp_up=ramp)


def test_a_linear_ramp_submits_where_its_integral_reaches_each_request():
    # rate(t) = 2 + 2t over 4 s, so L(t) = 2t + t^2: request i goes at t = sqrt(1 + i) - 1; L(4) = 24
    times = arrival_times(constant("linear"), 40, None)
    for i, t in enumerate(times):
        expected = math.sqrt(1 + i) - 1 if i <= 24 else 4 + (i - 24) / 10
        assert t == pytest.approx(expected, abs=1e-9)


def test_an_exponential_ramp_submits_where_its_integral_reaches_each_request():
    # rate(t) = 2 * 5^(t/4), so L(t) = 8 (5^(t/4) - 1) / ln 5 and request i goes at t = 4 log5(1 + i ln5 / 8)
    times = arrival_times(constant("exponential"), 40, None)
    total = 8 * 4 / math.log(5)  # L(4)
    for i, t in enumerate(times):
        expected = 4 * math.log(1 + i * math.log(5) / 8, 5) if i <= total else 4 + (i - total) / 10
        assert t == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_the_offered_rate_climbs_from_the_start_to_the_target_and_stays(strategy):
    ramp = RampUpConfig(strategy, 2.0, 4.0)
    assert offered_rate(ramp, 10.0, 0.0) == 2.0
    assert offered_rate(ramp, 10.0, 4.0) == offered_rate(ramp, 10.0, 100.0) == 10.0
    middle = 6.0 if strategy == "linear" else 2 * math.sqrt(5)
    assert offered_rate(ramp, 10.0, 2.0) == pytest.approx(middle)
    # the integral's slope is the rate
    assert (cumulative(ramp, 10.0, 2.001) - cumulative(ramp, 10.0, 2.0)) / 0.001 == pytest.approx(
        middle, rel=1e-3
    )


def test_a_falling_ramp_works_the_same_way():
    times = arrival_times(constant("linear", start_rate=10.0, rate=2.0, duration_s=4.0), 30, None)
    # L(t) = 10t - t^2 for t <= 4 (L(4) = 24), then 2 per second
    for i, t in enumerate(times):
        expected = 5 - math.sqrt(25 - i) if i <= 24 else 4 + (i - 24) / 2
        assert t == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("process", ["poisson", "gamma"])
def test_a_random_process_keeps_its_draws_moved_onto_the_ramp(process):
    plain = ArrivalConfig(process, rate=10.0, burstiness=0.5)
    ramped = ArrivalConfig(process, rate=10.0, burstiness=0.5, ramp_up=RampUpConfig("exponential", 1.0, 5.0))
    flat = arrival_times(plain, 200, np.random.default_rng(3))
    moved = arrival_times(ramped, 200, np.random.default_rng(3))
    assert np.all(np.diff(moved) >= 0) and moved[0] == 0
    for t_flat, t_moved in zip(flat, moved, strict=True):
        assert cumulative(ramped.ramp_up, 10.0, t_moved) == pytest.approx(10.0 * t_flat, rel=1e-9, abs=1e-12)


def test_a_ramp_needs_a_rate():
    with pytest.raises(
        ConfigError, match="workload.arrival.ramp_up: a ramp needs an arrival process with a rate"
    ):
        parse_config({"workload": {"arrival": {"process": "inf", "ramp_up": {"duration_s": 10}}}})
    with pytest.raises(
        ConfigError, match="workload.arrival.ramp_up.strategy: expected one of linear, exponential"
    ):
        parse_config({"workload": {"arrival": {"process": "poisson", "ramp_up": {"strategy": "steps"}}}})


def test_each_request_records_the_rate_offered_when_it_arrived(tmp_path):
    arrival = {"process": "constant", "rate": 200.0, "ramp_up": {"start_rate": 50.0, "duration_s": 0.05}}
    config = parse_config({**NULL_RUN, "workload": {**NULL_RUN["workload"], "arrival": arrival}})
    run_benchmark(config, tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    timed = sorted((r for r in rows if not r["warmup"]), key=lambda r: int(r["id"]))
    times = arrival_times(config.workload.arrival, len(timed), None)
    assert [r["offered_rate"] for r in timed] == pytest.approx(
        [offered_rate(config.workload.arrival.ramp_up, 200.0, t) for t in times]
    )
    assert timed[0]["offered_rate"] == 50.0 and timed[-1]["offered_rate"] == 200.0
    assert all("offered_rate" not in r for r in rows if r["warmup"])


def test_without_a_ramp_the_rows_carry_no_offered_rate(tmp_path):
    config = parse_config(
        {**NULL_RUN, "workload": {**NULL_RUN["workload"], "arrival": {"process": "poisson"}}}
    )
    assert not config.workload.arrival.ramp_up.on
    run_benchmark(config, tmp_path / "run")
    assert "offered_rate" not in (tmp_path / "run" / "requests.jsonl").read_text()
