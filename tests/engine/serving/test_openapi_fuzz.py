"""schemathesis against the server's own OpenAPI schema: generated bodies, valid and not, on every
endpoint; none may be answered with a 5xx. A short context (max_model_len 64) keeps each generation
short."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.engine.serving.servers import start_server


@pytest.fixture(scope="module")
def api_schema():
    # split: every accepted body must also cross to the engine core as msgpack
    server = start_server(max_model_len=64, process_split=True)
    loaded = schemathesis.openapi.from_url(server.url + "/openapi.json")
    # negative too: bodies that break the schema must be 4xx, never 5xx
    loaded.config.generation.update(modes=list(GenerationMode), deterministic=True)
    yield loaded
    assert server.check_empty() is None
    server.stop()


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_5xx(case):
    case.call_and_validate(checks=[not_a_server_error])
