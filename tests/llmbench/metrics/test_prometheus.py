"""Reading a server's Prometheus text into the quantities a run keeps, whichever server wrote it, and
summarizing scrapes into increases, server-side means and gauge statistics."""

import msgspec
import pytest

from llmbench.metrics.prometheus import ExpositionError, known_quantities, parse_samples
from llmbench.metrics.server_side import summarize_scrapes

URL = "http://127.0.0.1:8000/metrics"

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:prompt_tokens_total{engine="0",model_name="m"} 1200.0
vllm:generation_tokens_total{engine="0",model_name="m"} 300.0
vllm:request_success_total{finished_reason="length",model_name="m"} 7.0
vllm:request_success_total{finished_reason="stop",model_name="m"} 3.0
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 1.5
vllm:time_per_output_token_seconds_count{model_name="m"} 290.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 5.8 1700000000000
"""

SGLANG = """\
sglang:num_running_reqs{model_name="m"} 4
sglang:num_queue_reqs{model_name="m"} 0
sglang:token_usage{model_name="m"} 0.28
sglang:prompt_tokens_total{model_name="m"} 7.0
sglang:generation_tokens_total{model_name="m"} 8.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 0.3
sglang:time_to_first_token_seconds_count{model_name="m"} 2.0
"""


def test_vllm_text_gives_every_quantity_summed_over_label_sets():
    values, sources = known_quantities(parse_samples(VLLM))
    assert values == {
        "running": 3.0,
        "waiting": 1.0,
        "kv_cache_usage": 0.375,  # a fraction: averaged over the engines, not summed
        "prompt_tokens": 1200.0,
        "generation_tokens": 300.0,
        "requests_finished": 10.0,
        "preemptions": 2.0,
        "ttft_sum": 1.5,
        "ttft_count": 10.0,
        "itl_sum": 5.8,
        "itl_count": 290.0,
    }
    assert sources["itl"] == "vllm:time_per_output_token_seconds"
    assert sources["running"] == "vllm:num_requests_running"


def test_sglang_text_maps_onto_the_same_names_and_leaves_out_what_it_lacks():
    values, sources = known_quantities(parse_samples(SGLANG))
    assert values["running"] == 4 and values["kv_cache_usage"] == 0.28 and values["ttft_count"] == 2
    assert "preemptions" not in values and "itl_sum" not in values
    assert sources["waiting"] == "sglang:num_queue_reqs"


def test_an_unknown_server_gives_nothing():
    assert known_quantities(parse_samples("process_cpu_seconds_total 12.5\n")) == ({}, {})


@pytest.mark.parametrize("text", ["<html>not found</html>", 'vllm:x{a="b"} many'])
def test_text_that_is_not_the_exposition_format_is_refused(text):
    with pytest.raises(ExpositionError, match="line 1"):
        parse_samples(text)


def test_scrapes_become_increases_per_trial_server_means_and_gauge_statistics():
    def row(t, trial, tokens, ttft_sum, ttft_count, running):
        return (t, trial, {"generation_tokens": tokens, "ttft_sum": ttft_sum, "ttft_count": ttft_count,
                           "running": running})  # fmt: skip

    rows = [
        row(0.0, 0, 100, 1.0, 10, 0),
        row(1.0, 0, 150, 2.0, 20, 4),
        row(2.0, 0, 200, 3.0, 30, 2),
        # between the trials the server served the warm-up of nothing; the counters jumped meanwhile
        row(9.0, 1, 500, 10.0, 100, 6),
        row(10.0, 1, 600, 12.0, 110, 0),
    ]
    summary = summarize_scrapes(URL, rows, {})
    assert summary.scrapes == 5
    assert summary.generation_tokens == 100 + 100
    assert summary.server_mean_ttft_ms == pytest.approx((2.0 + 2.0) / (20 + 10) * 1000)
    assert summary.mean_running == pytest.approx(12 / 5) and summary.max_running == 6
    assert summary.prompt_tokens is None and summary.server_mean_itl_ms is None
    assert summary.mean_waiting is None


def test_a_counter_that_went_down_was_reset_and_its_increase_is_unknown():
    rows = [(0.0, 0, {"prompt_tokens": 50.0}), (1.0, 0, {"prompt_tokens": 10.0})]
    assert summarize_scrapes(URL, rows, {}).prompt_tokens is None


@pytest.mark.parametrize("prefix", ["vllm:", "vllm:gpu_"])
def test_each_trials_prefix_cache_hit_rate_from_either_spelling_of_vllms_counters(prefix):
    def scrape(queries: float, hits: float) -> dict[str, float]:
        text = f"{prefix}prefix_cache_queries_total {queries}\n{prefix}prefix_cache_hits_total {hits}\n"
        return known_quantities(parse_samples(text))[0]

    # trial 0 finds none of its 100 tokens cached; trial 1 finds 75 of its 100
    rows = [
        (0.0, 0, scrape(0, 0)),
        (1.0, 0, scrape(100, 0)),
        (2.0, 1, scrape(100, 0)),
        (3.0, 1, scrape(200, 75)),
    ]
    assert summarize_scrapes(URL, rows, {}).prefix_cache_hit_rate_by_trial == [0.0, 0.75]


def test_sglangs_cache_hit_rate_gauge_is_averaged_over_each_trial():
    rows = [
        (float(i), i // 2, known_quantities(parse_samples(f"sglang:cache_hit_rate {r}"))[0])
        for i, r in enumerate([0, 0.2, 0.5, 0.7])
    ]
    assert summarize_scrapes(URL, rows, {}).prefix_cache_hit_rate_by_trial == pytest.approx([0.1, 0.6])


@pytest.mark.parametrize("suffix", ["_total", ""])
def test_each_trials_speculative_acceptance_from_vllms_counters_either_spelling(suffix):
    def scrape(drafts: float, proposed: float, accepted: float) -> dict[str, float]:
        text = f"vllm:spec_decode_num_drafts{suffix} {drafts}\n"
        text += f'vllm:spec_decode_num_draft_tokens{suffix}{{engine="0"}} {proposed}\n'
        text += f"vllm:spec_decode_num_accepted_tokens{suffix} {accepted}\n"
        text += f'vllm:spec_decode_num_accepted_tokens_per_pos{suffix}{{position="0"}} 999\n'  # not ours
        return known_quantities(parse_samples(text))[0]

    # trial 0: 10 drafts of 3 tokens, 15 of the 30 accepted; trial 1: 10 more, 30 of 30
    rows = [(0.0, 0, scrape(0, 0, 0)), (1.0, 0, scrape(10, 30, 15))]
    rows += [(2.0, 1, scrape(10, 30, 15)), (3.0, 1, scrape(20, 60, 45))]
    spec = summarize_scrapes(URL, rows, {})
    assert (spec.spec_drafts, spec.spec_draft_tokens, spec.spec_accepted_tokens) == (20, 60, 45)
    assert spec.spec_acceptance_rate == 0.75 and spec.spec_mean_accepted_length == 1 + 45 / 20
    assert spec.spec_drafts_by_trial == [10, 10]
    assert spec.spec_acceptance_rate_by_trial == [0.5, 1.0]
    assert spec.spec_mean_accepted_length_by_trial == [2.5, 4.0]


def test_sglangs_acceptance_from_its_verify_passes_and_gauges():
    def scrape(verifies: float, generated: float, finished: float, rate: float, length: float):
        text = f"sglang:spec_verify_calls_total {verifies}\nsglang:generation_tokens_total {generated}\n"
        text += f"sglang:num_requests_total {finished}\n"
        text += f'sglang:spec_accept_rate{{dp_rank="0"}} {rate}\n'
        text += f'sglang:spec_accept_length{{dp_rank="0"}} {length}\n'
        return known_quantities(parse_samples(text))[0]

    # 4 requests, 4 first tokens from their prefill, 96 more from 40 verify passes: 2.4 a pass
    rows = [(0.0, 0, scrape(0, 0, 0, 0.5, 2.0)), (1.0, 0, scrape(40, 100, 4, 0.7, 2.6))]
    spec = summarize_scrapes(URL, rows, {})
    assert spec.spec_drafts == 40 and spec.spec_mean_accepted_length == pytest.approx(2.4)
    assert spec.spec_acceptance_rate == pytest.approx(0.6)  # the gauge's mean over the scrapes
    assert spec.spec_draft_tokens is None and spec.spec_accepted_tokens is None


def test_a_server_without_speculative_decoding_has_none_of_its_keys():
    rows = [
        (0.0, 0, known_quantities(parse_samples(VLLM))[0]),
        (1.0, 0, known_quantities(parse_samples(VLLM))[0]),
    ]
    assert not [
        key for key in msgspec.to_builtins(summarize_scrapes(URL, rows, {})) if key.startswith("spec_")
    ]


# What vLLM's /metrics says for an engine with speculative decoding, as its prometheus_client writes it:
# HELP and TYPE lines, a `_created` timestamp beside every counter, one sample per engine, and the
# per-position counter whose name starts like the accepted-token total.
VLLM_SPEC_EXPOSITION = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="llama-3.1-8b"} {drafts0}
vllm:spec_decode_num_drafts_total{engine="1",model_name="llama-3.1-8b"} {drafts1}
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="llama-3.1-8b"} 1.7650824e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="llama-3.1-8b"} {proposed0}
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="llama-3.1-8b"} {proposed1}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="llama-3.1-8b"} {accepted0}
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="llama-3.1-8b"} {accepted1}
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="llama-3.1-8b"} 1.7650824e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama-3.1-8b",position="0"} 9000.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama-3.1-8b",position="1"} 7000.0
"""


def test_acceptance_from_a_whole_vllm_exposition_sums_engines_and_skips_created_and_per_position():
    def scrape(d0, d1, p0, p1, a0, a1) -> dict[str, float]:
        text = VLLM_SPEC_EXPOSITION
        for key, value in dict(
            drafts0=d0, drafts1=d1, proposed0=p0, proposed1=p1, accepted0=a0, accepted1=a1
        ).items():
            text = text.replace("{" + key + "}", f"{value:.1f}")
        return known_quantities(parse_samples(text))[0]

    # over the trial, two engines: 100 + 60 drafts of 3 tokens, 200 + 90 of the 480 accepted
    rows = [
        (0.0, 0, scrape(500, 400, 1500, 1200, 900, 700)),
        (1.0, 0, scrape(600, 460, 1800, 1380, 1100, 790)),
    ]
    spec = summarize_scrapes(URL, rows, {})
    assert (spec.spec_drafts, spec.spec_draft_tokens, spec.spec_accepted_tokens) == (160, 480, 290)
    assert spec.spec_acceptance_rate == pytest.approx(290 / 480)
    assert spec.spec_mean_accepted_length == pytest.approx(1 + 290 / 160)
