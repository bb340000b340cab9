"""schemathesis against the server's own OpenAPI schema: generated bodies, valid and not, on every
endpoint; none may be answered with a 5xx. A short context (max_model_len 64) keeps each generation
short.

schemathesis is driven through its Python API (load the schema, one Hypothesis strategy per operation, a
plain loop) rather than its pytest plugin, whose lazy fixture schemas reach into pytest's internals and
break on new pytest releases (schemathesis 4.32.5 with pytest 9.2: "'Function' object has no attribute
'_nodeid'")."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine.serving.servers import start_server

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (pip install -e '.[test]' brings it)"
)

# per operation, valid and invalid bodies together; derandomized so a failure reproduces run after run
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def fuzz_operation(operation) -> None:
    # negative too: bodies that break the schema must be 4xx, never 5xx
    cases = st.one_of([operation.as_strategy(generation_mode=mode) for mode in schemathesis.GenerationMode])

    @FUZZ
    @given(case=cases)
    def call(case):
        case.call_and_validate(checks=[schemathesis.checks.not_a_server_error])

    call()


def test_no_generated_request_gets_a_5xx():
    # split: every accepted body must also cross to the engine core as msgpack
    server = start_server(max_model_len=64, process_split=True)
    try:
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        labels = {operation.label for operation in operations}
        assert {"POST /v1/completions", "POST /v1/chat/completions", "GET /health"} <= labels
        for operation in operations:
            fuzz_operation(operation)
        assert server.check_empty() is None
    finally:
        server.stop()
