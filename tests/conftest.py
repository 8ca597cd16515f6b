"""Shared fixtures: a scripted OpenAI-compatible server and harness builders."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripted_server import ScriptedServer  # noqa: E402


@pytest.fixture(scope="session")
def run_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by every process of this test run: under pytest-xdist each worker's basetemp is a
    folder inside it (``pytest-N/popen-gw0``), so a heavy read-only build kept here (the dbt shop project,
    :func:`dbt_project.build_shop_project`, which takes a lock) is made once per run, not once per worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _provider_keys() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name.endswith("_API_KEY")}


@pytest.fixture(scope="module", autouse=True)
def provider_keys_stay_as_found():
    """A test module leaves this process's provider keys (``*_API_KEY``) as it found them: every kernel or child
    a later module starts inherits them, and under pytest-xdist which module runs later on a worker changes
    from run to run (a leaked key once turned a "no key" test into a network error). Set them with monkeypatch."""
    before = _provider_keys()
    yield
    after = _provider_keys()
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"this module left provider keys changed: {changed} (set them with monkeypatch)"


@pytest.fixture
def server():
    """A running scripted server; set ``server.replies`` before the run."""
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def http_adapter(server):
    """Factory: a ProviderAdapter talking litellm over HTTP to ``server``."""
    from harness_magic import ProviderAdapter

    def make(stream: bool = True, **options: Any) -> ProviderAdapter:
        options.setdefault("sleep", lambda s: None)
        return ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", stream=stream,
                               **options)

    return make
