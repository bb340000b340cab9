"""One benchmark run: the workload, the runner that drives a backend with it, and the run directory's files
(the request rows, the step rows, summary.json)."""
