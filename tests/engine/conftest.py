"""Leak check after every engine test: each LLMEngine built during a test must end empty (no waiting or
running request, every KV block free, every ref count zero). A test that stops an engine mid-work on
purpose says so with @pytest.mark.leaves_work. And the saved HF checkpoint the agreement tests share."""

from __future__ import annotations

import pytest
from llmbench.engine.core.llm_engine import LLMEngine
from llmbench.engine.scheduling.check import assert_engine_empty


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "leaves_work: the test leaves requests in its engines on purpose")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "call":
        item.call_failed = report.failed  # a failed test's engines are mid-work anyway: no second error
    return report


@pytest.fixture(autouse=True)
def engines_end_empty(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    engines: list[LLMEngine] = []
    init = LLMEngine.__init__

    def tracked_init(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        engines.append(self)

    monkeypatch.setattr(LLMEngine, "__init__", tracked_init)
    yield engines
    if request.node.get_closest_marker("leaves_work") or getattr(request.node, "call_failed", True):
        return
    for engine in engines:
        assert_engine_empty(engine)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """An HF model saved to disk and its greedy continuations of every prompt (hf_reference.py)."""
    from tests.engine.hf_reference import save_checkpoint  # transformers: only where a test asks

    path = tmp_path_factory.mktemp("ckpt")
    return path, save_checkpoint(path)
