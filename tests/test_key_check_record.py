"""The missing-key record (issue 35, point 1): a kernel refuses a model that lacks its key without starting litellm.

The provider host writes down what litellm's ``validate_environment`` said and which variables it looked at
(:mod:`harness_magic.core.providers.key_record`); a later transport gives the same error from that record,
with no host process, only while the answer must be the same. Every test points ``XDG_CACHE_HOME`` at its
own folder: the record of one test is never another's. The record is made once by a real host (litellm's
own answer); the tests that check a case goes "the normal way" give the transport a host that is not
litellm (a script that exits at once), so the attempt to reach it is what shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from harness_magic.core.providers import key_record
from harness_magic.core.providers.adapter import ProviderAdapter, route_model, warm_up_provider
from harness_magic.core.providers.errors import ProviderError, ProviderUnreachable
from harness_magic.core.providers.hosted import HostedTransport, ProviderHost
from harness_magic.core.providers.key_record import (
    RECORD_MAX_BYTES,
    RECORD_MAX_MODELS,
    EnvironmentReads,
    KeyRefusal,
    environment_reads,
    record_path,
    record_refusal,
    recorded_refusal,
)
from harness_magic.core.providers.transport import no_key_error

OPENAI_MODEL = "openai/gpt-4o-mini"
ANTHROPIC_MODEL = "anthropic/claude-3-5-haiku-20241022"
"""litellm's check for this provider accepts either of two variables and names one: the record must know both."""
KEY_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


def payload(model: str = OPENAI_MODEL) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "What is 1 + 1?"}]}


def keyless(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    for name in KEY_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


def refusal_text(transport: HostedTransport, model: str) -> str:
    with pytest.raises(ProviderError) as info:
        transport.complete(payload(model), None)
    assert info.value.request_sent is False and info.value.retryable is False
    return str(info.value)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real provider host, asked for both models with no key: litellm's refusals, and the record it wrote."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as monkeypatch:
        keyless(monkeypatch, cache)
        host = ProviderHost()
        try:
            texts = {model: refusal_text(HostedTransport(host=host), model) for model in (OPENAI_MODEL, ANTHROPIC_MODEL)}
        finally:
            host.close()
    assert host.starts == 1
    return {"cache": cache, "texts": texts, "record": record_path({"XDG_CACHE_HOME": str(cache)}).read_bytes()}


@pytest.fixture
def cache(recorded: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's cache folder holding a copy of the real host's record; no key in the environment."""
    folder = tmp_path / "cache"
    (folder / "harness_magic").mkdir(parents=True)
    (folder / "harness_magic" / "provider-keys.json").write_bytes(recorded["record"])
    keyless(monkeypatch, folder)
    return folder


@pytest.fixture
def no_litellm_host(tmp_path: Path):
    """A host handle whose process is not litellm: it exits at once, so a request that reaches for it fails
    as unreachable and ``starts`` counts the attempts."""
    host = ProviderHost(argv=[sys.executable, "-c", "pass"])
    yield host
    host.close()


def written(cache: Path) -> dict[str, Any]:
    return json.loads((cache / "harness_magic" / "provider-keys.json").read_text())


# -- the record is used ----------------------------------------------------------------------------------------


def test_the_host_records_what_litellm_refused_and_which_variables_it_looked_at(recorded):
    data = json.loads(recorded["record"])
    assert data["schema"] == key_record.RECORD_SCHEMA and data["litellm"] == key_record.litellm_version()
    openai, anthropic = data["models"][OPENAI_MODEL], data["models"][ANTHROPIC_MODEL]
    assert openai["route"] == "openai" and openai["missing"] == ["OPENAI_API_KEY"]
    assert openai["seen"]["OPENAI_API_KEY"] == "absent" and "PATH" not in openai["seen"], "what the check read, only"
    assert anthropic["missing"] == ["ANTHROPIC_API_KEY"]
    assert anthropic["seen"]["ANTHROPIC_AUTH_TOKEN"] == "absent", "the alternative litellm accepts was seen too"
    assert "sk-" not in recorded["record"].decode(), "names and states only, never values"


def test_a_recorded_refusal_is_given_without_starting_a_host_and_reads_exactly_as_the_hosts(cache, recorded,
                                                                                               no_litellm_host):
    for model in (OPENAI_MODEL, ANTHROPIC_MODEL):
        transport = HostedTransport(host=no_litellm_host)
        assert refusal_text(transport, model) == recorded["texts"][model]
        assert transport.warm_up(model) is False
    assert no_litellm_host.starts == 0 and no_litellm_host.pid is None


def test_an_adapter_asks_no_model_tables_for_a_refused_run_and_asks_again_once_the_key_is_there(
        cache, recorded, no_litellm_host, monkeypatch):
    from harness_magic.core.transcript.messages import Message, TextBlock

    adapter = ProviderAdapter(OPENAI_MODEL, transport=HostedTransport(host=no_litellm_host), max_retries=0)
    assert adapter.max_input_tokens is None and adapter.cache_markers is False
    assert adapter.estimate_text_tokens("What is 1 + 1?") > 0
    with pytest.raises(ProviderError) as info:
        adapter.complete("You are terse.", [Message("user", (TextBlock("What is 1 + 1?"),))], [])
    assert str(info.value) == recorded["texts"][OPENAI_MODEL] and no_litellm_host.starts == 0
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-since")
    assert adapter.max_input_tokens is None, "the host is unreachable here: the fallback, after asking"
    assert no_litellm_host.starts >= 1, "the model's tables were asked for, not an answer kept from the refusal"


def test_an_async_call_is_refused_from_the_record_too(cache, recorded, no_litellm_host):
    with pytest.raises(ProviderError) as info:
        asyncio.run(HostedTransport(host=no_litellm_host).acomplete(payload(), None))
    assert str(info.value) == recorded["texts"][OPENAI_MODEL] and no_litellm_host.starts == 0


def test_the_cells_warm_up_and_route_check_ask_no_host_for_a_recorded_refusal(cache, monkeypatch):
    asked: list[str] = []
    monkeypatch.setattr(ProviderHost, "warm_up", lambda self, idle_s=None: asked.append("warm_up") is None)
    monkeypatch.setattr(HostedTransport, "route", lambda self, model: asked.append("route") or "asked")
    assert warm_up_provider(OPENAI_MODEL) is False
    assert route_model(OPENAI_MODEL) == "openai" and asked == [], "the route litellm gave, from the record"
    local = "http://127.0.0.1:9/v1"
    assert warm_up_provider(OPENAI_MODEL, api_base=local) is True, "a local server: the normal way"
    assert route_model(OPENAI_MODEL, api_base=local) == "asked"
    assert route_model(OPENAI_MODEL, extra={"api_key": "sk-in-extra"}) == "asked"
    assert asked == ["warm_up", "route", "route"]


# -- every other case goes the normal way ---------------------------------------------------------------------


@pytest.mark.parametrize("change", ["key set since", "key set empty", "alternative key set", "api_base given",
                                    "api_key given", "extra given", "another model", "cost map switched"])
def test_a_changed_case_goes_to_the_host(cache, no_litellm_host, monkeypatch, change):
    model, options = (ANTHROPIC_MODEL if change == "alternative key set" else OPENAI_MODEL), {}
    if change == "key set since":
        monkeypatch.setenv("OPENAI_API_KEY", "sk-set-since")
    elif change == "key set empty":
        monkeypatch.setenv("OPENAI_API_KEY", "")
    elif change == "alternative key set":
        monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-set-since")
    elif change == "api_base given":
        options = {"api_base": "http://127.0.0.1:9/v1"}
    elif change == "api_key given":
        options = {"api_key": "sk-given"}
    elif change == "extra given":
        options = {"extra": {"api_key": "sk-in-extra"}}
    elif change == "another model":
        model = "openai/gpt-4o"
    elif change == "cost map switched":
        monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "False")
    transport = HostedTransport(host=no_litellm_host, **options)
    assert transport.recorded_refusal(model) is None
    with pytest.raises(ProviderUnreachable):
        transport.complete(payload(model), None)
    assert no_litellm_host.starts >= 1, "the call went for the host"


def test_another_litellm_version_invalidates_the_record(cache, monkeypatch):
    assert recorded_refusal(OPENAI_MODEL) is not None
    monkeypatch.setattr(key_record, "litellm_version", lambda: "0.0.1-another")
    assert recorded_refusal(OPENAI_MODEL) is None
    reads = EnvironmentReads(dict(os.environ))
    reads.names.add("OPENAI_API_KEY")
    assert record_refusal(KeyRefusal("openai/gpt-4o", "openai", ("OPENAI_API_KEY",), {}), reads)
    assert set(written(cache)["models"]) == {"openai/gpt-4o"}, "the other version's answers are dropped"
    assert written(cache)["litellm"] == "0.0.1-another"


# -- a hostile, corrupt or huge record is ignored, then replaced --------------------------------------------


def _entry(**changes: Any) -> dict[str, Any]:
    entry = {"route": "openai", "missing": ["OPENAI_API_KEY"], "seen": {"OPENAI_API_KEY": "absent"}}
    entry.update(changes)
    return entry


def _record(models: dict[str, Any], **changes: Any) -> bytes:
    data = {"schema": key_record.RECORD_SCHEMA, "litellm": key_record.litellm_version(), "models": models}
    data.update(changes)
    return json.dumps(data).encode()


HOSTILE_RECORDS = {
    "not json": b"\x00\xff{not json",
    "a list": b"[1, 2, 3]",
    "deeply nested": b"[" * 30_000 + b"]" * 30_000,
    "over the size limit": _record({OPENAI_MODEL: _entry()}) + b" " * RECORD_MAX_BYTES,
    "another schema": _record({OPENAI_MODEL: _entry()}, schema=99),
    "too many models": _record({f"openai/m{i}": _entry() for i in range(RECORD_MAX_MODELS + 1)} | {
        OPENAI_MODEL: _entry()}),
    "missing key not seen missing": _record({OPENAI_MODEL: _entry(seen={"OPENAI_API_KEY": "set"})}),
    "nothing seen": _record({OPENAI_MODEL: _entry(seen={})}),
    "a variable name that is code": _record({OPENAI_MODEL: _entry(
        seen={"OPENAI_API_KEY": "absent", "__import__('os').system('id')": "absent"})}),
    "a state that is a value": _record({OPENAI_MODEL: _entry(seen={"OPENAI_API_KEY": "sk-live-123"})}),
    "a route that is text": _record({OPENAI_MODEL: _entry(route="openai; rm -rf ~")}),
    "extra fields": _record({OPENAI_MODEL: _entry(run="import os")}),
    "missing as text": _record({OPENAI_MODEL: _entry(missing="OPENAI_API_KEY")}),
}


@pytest.mark.parametrize("case", list(HOSTILE_RECORDS))
def test_a_hostile_or_corrupt_record_is_ignored_and_replaced(cache, no_litellm_host, case):
    path = record_path()
    path.write_bytes(HOSTILE_RECORDS[case])
    transport = HostedTransport(host=no_litellm_host)
    assert transport.recorded_refusal(OPENAI_MODEL) is None
    with pytest.raises(ProviderUnreachable):
        transport.complete(payload(), None)
    reads = EnvironmentReads({})
    reads.names.add("OPENAI_API_KEY")
    assert record_refusal(KeyRefusal(OPENAI_MODEL, "openai", ("OPENAI_API_KEY",), {}), reads)
    assert recorded_refusal(OPENAI_MODEL) is not None, "rewritten whole"


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "device"])
def test_a_record_that_is_not_a_plain_file_is_not_read(cache, kind):
    path = record_path()
    good = path.read_bytes()
    path.unlink()
    if kind == "symlink":
        (cache / "elsewhere.json").write_bytes(good)
        path.symlink_to(cache / "elsewhere.json")
    elif kind == "fifo":
        os.mkfifo(path)  # nobody writes to it: opening it must not wait
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    assert recorded_refusal(OPENAI_MODEL) is None


def test_the_record_keeps_the_newest_models_within_its_bound(cache):
    reads = EnvironmentReads({})
    reads.names.add("OPENAI_API_KEY")
    for index in range(RECORD_MAX_MODELS + 5):
        assert record_refusal(KeyRefusal(f"openai/model-{index}", "openai", ("OPENAI_API_KEY",), {}), reads)
    models = written(cache)["models"]
    assert len(models) == RECORD_MAX_MODELS and f"openai/model-{RECORD_MAX_MODELS + 4}" in models
    assert "openai/model-0" not in models and OPENAI_MODEL not in models
    assert len(record_path().read_bytes()) < RECORD_MAX_BYTES


def test_a_check_that_walked_the_whole_environment_is_not_recorded(cache):
    with environment_reads() as reads:
        dict(os.environ)  # what a check that copies the environment does: nothing says which names mattered
    assert reads.whole
    assert record_refusal(KeyRefusal("openai/gpt-4o", "openai", ("OPENAI_API_KEY",), {}), reads) is False
    assert "openai/gpt-4o" not in written(cache)["models"]


def test_watching_the_environment_notes_each_name_read_and_puts_it_back(monkeypatch):
    real = os.environ
    monkeypatch.setenv("HM_PRESENT", "1")
    with environment_reads() as reads:
        assert "HM_PRESENT" in os.environ and os.getenv("HM_ABSENT") is None
        os.environ["HM_WRITTEN"] = "yes"
    assert os.environ is real and real["HM_WRITTEN"] == "yes"
    assert reads.names == {"HM_PRESENT", "HM_ABSENT"} and not reads.whole
    del real["HM_WRITTEN"]


def test_an_unwritable_cache_folder_costs_only_the_record(tmp_path, monkeypatch):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    reads = EnvironmentReads({})
    reads.names.add("OPENAI_API_KEY")
    assert record_refusal(KeyRefusal(OPENAI_MODEL, "openai", ("OPENAI_API_KEY",), {}), reads) is False
    assert recorded_refusal(OPENAI_MODEL) is None


def test_the_error_text_is_the_one_users_saw_before():
    assert str(no_key_error(OPENAI_MODEL, ["OPENAI_API_KEY"])) == (
        "No API key for model 'openai/gpt-4o-mini': set OPENAI_API_KEY in the environment (never in the notebook), "
        "point api_base at a local server, or use the offline model (model 'offline/quickstart', or "
        "'scripted/<file.json>' / 'replay/<run.jsonl>').")


# -- the way users meet it ----------------------------------------------------------------------------------------


@pytest.mark.kernel
def test_a_kernel_refuses_a_recorded_model_without_a_provider_host_or_litellm(cache, recorded, tmp_path):
    from kernel_helpers import agent_kernel

    with agent_kernel(tmp_path, run_dir="runs", sandbox="inprocess") as kernel:
        cell = kernel.run(f"%%agent -m {OPENAI_MODEL}\nWhat is 1 + 1?")
        said = json.dumps(cell.outputs)
        assert "No API key for model" in said and "OPENAI_API_KEY" in said, said[-2000:]
        assert kernel.value("__import__('harness_magic.core.providers.hosted', fromlist=['_'])"
                            ".shared_host().starts") == 0
        assert kernel.value("'litellm' in __import__('sys').modules") is False
