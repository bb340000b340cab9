"""The run config most toolkit tests start from."""

# the engine's CPU path without a model: every run in these tests takes well under a second
NULL_RUN = {
    "name": "t",
    "model": {"preset": "tiny", "executor": "null"},
    "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 256},
    "workload": {
        "num_requests": 12,
        "warmup_requests": 2,
        "input": {"dist": "uniform", "min": 4, "max": 40},
        "output": {"dist": "uniform", "min": 1, "max": 12},
    },
    "output": {"report": False},  # the report has tests of its own
}
