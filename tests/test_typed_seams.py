"""The typed seams: the cache, the provider adapter and the harness host are protocols every implementation meets.

Each protocol names its members once (``CACHE_MEMBERS``, ``ADAPTER_MEMBERS``, ``HOST_MEMBERS``); every
implementation has every member (a missing capability is declared, never left out), and no module probes a cache,
an adapter or a harness for a member of its protocol (``hasattr(cache, "versions")`` once hid a missing member).
The static side of the same contract is tests/test_types.py (mypy, strict on these modules).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness_magic import ProviderAdapter, ScriptedModel
from harness_magic.core.agent.host import HOST_MEMBERS, HarnessHost
from harness_magic.core.agent.loop import AsyncHarness, Harness
from harness_magic.core.cache import SessionCache
from harness_magic.core.cache.protocol import CACHE_MEMBERS, HandleCache
from harness_magic.core.control.recorded import load_run
from harness_magic.core.control.replay import _RecordedEnding
from harness_magic.core.execution.connectors.host import CONNECTOR_HOST_MEMBERS, ConnectorHost, ConnectorRun
from harness_magic.core.providers.adapter import AsyncProviderAdapter
from harness_magic.core.providers.protocol import (
    ADAPTER_MEMBERS,
    AsyncModelAdapter,
    ModelAdapter,
    SyncModelAdapter,
)

PACKAGE = Path(__file__).resolve().parent.parent / "harness_magic"


def declared_members(protocol: type) -> set[str]:
    """What a protocol class (and the protocols it extends) declares: annotations, methods and properties."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or cls.__module__ == "typing" or not getattr(cls, "_is_protocol", False):
            continue
        names |= set(getattr(cls, "__annotations__", {}))
        names |= {n for n in vars(cls) if not n.startswith("_") or n == "__contains__"}
    return names


def _scripted(turns: list | None = None) -> ProviderAdapter:
    return ProviderAdapter("scripted/typed-seams", transport=ScriptedModel(turns or [{"text": "done"}]))


def _recorded_ending(tmp_path: Path) -> _RecordedEnding:
    """A replay's adapter wrapper over a real recorded run (one scripted answer)."""
    harness = Harness(_scripted(), "system", [], run_dir=str(tmp_path / "runs"))
    result = harness.run_result("hello")
    return _RecordedEnding(_scripted(), load_run(result.run_file))


@pytest.mark.parametrize(("protocol", "members"), [
    (HandleCache, CACHE_MEMBERS),
    (SyncModelAdapter, ADAPTER_MEMBERS),
    (AsyncModelAdapter, ADAPTER_MEMBERS),
    (HarnessHost, HOST_MEMBERS),
    (ConnectorHost, CONNECTOR_HOST_MEMBERS),
])
def test_each_protocol_declares_exactly_its_member_list(protocol, members):
    assert declared_members(protocol) == set(members)
    assert len(members) == len(set(members)), "a member is listed twice"


def test_the_adapter_protocols_share_every_member_but_how_complete_is_driven():
    assert declared_members(ModelAdapter) == set(ADAPTER_MEMBERS) - {"complete"}


def test_every_cache_implementation_has_every_member():
    cache = SessionCache()
    try:
        missing = [m for m in CACHE_MEMBERS if not hasattr(cache, m)]
        assert missing == []
        assert isinstance(cache, HandleCache)
    finally:
        cache.close()


def test_every_adapter_implementation_has_every_member(tmp_path):
    sync = [_scripted(), _recorded_ending(tmp_path)]
    async_ = [AsyncProviderAdapter("scripted/typed-seams", transport=ScriptedModel([{"text": "done"}]))]
    for adapter in sync + async_:
        missing = [m for m in ADAPTER_MEMBERS if not hasattr(adapter, m)]
        assert missing == [], f"{type(adapter).__name__} lacks {missing}"
        assert isinstance(adapter, ModelAdapter)


def test_a_replay_declares_no_input_window_so_it_never_compacts_the_recorded_requests(tmp_path):
    ending = _recorded_ending(tmp_path)
    assert ending.max_input_tokens is None
    assert ending.window_learned is False
    assert ending.model == "scripted/typed-seams"
    # its estimates are the wrapped adapter's, so a compaction measure would agree with a live run's
    assert ending.estimate_text_tokens("how many rows?") == _scripted().estimate_text_tokens("how many rows?")


def test_a_fresh_adapter_shares_no_state_with_its_parent():
    parent = _scripted([{"text": "one"}, {"text": "two"}])
    parent.complete("system", [], [])
    child = parent.fresh()
    assert type(child) is ProviderAdapter and child is not parent
    assert child.last_payload is None and parent.last_payload is not None


def test_both_harness_drivers_have_every_host_member(tmp_path):
    drivers = [Harness(_scripted(), "system", [], run_dir=str(tmp_path)),
               AsyncHarness(AsyncProviderAdapter("scripted/x", transport=ScriptedModel([{"text": "ok"}])), "system",
                            [], run_dir=str(tmp_path))]
    for harness in drivers:
        missing = [m for m in HOST_MEMBERS if not hasattr(harness, m)]
        assert missing == [], f"{type(harness).__name__} lacks {missing}"
        assert isinstance(harness, HarnessHost)
        assert isinstance(harness, ConnectorHost)  # the connectors' narrower view of the same harness
        assert isinstance(harness.cache, HandleCache)


def test_a_run_has_what_the_connectors_read_of_it(tmp_path):
    harness = Harness(_scripted(), "system", [], run_dir=str(tmp_path))
    seen = []
    harness.subscribe(lambda event: seen.append(harness.current_run) if event.kind == "run_started" else None)
    harness.run_result("hello")
    run = seen[0]
    missing = [m for m in declared_members(ConnectorRun) if not hasattr(run, m)]
    assert missing == []


def test_an_object_missing_a_member_is_not_taken_for_a_cache():
    class AlmostACache:  # everything a prompt-injected plugin might hand over as "a cache", but no versions()
        def __getattr__(self, name):
            if name == "versions":
                raise AttributeError(name)
            return lambda *a, **k: None

    assert not isinstance(object(), HandleCache)
    assert not isinstance(AlmostACache(), HandleCache)


_SEAM_NAMES = r"(?:self\.)?(?:_?cache|parent_cache|child_cache|_?adapter|parent_adapter|_?harness|host|parent)"


_ABOVE_THE_AGENT = ("core/agent", "core/control", "core/session.py", "core/config.py", "notebook", "evals", "audit",
                    "demo")
"""Where a harness can be typed as :class:`HarnessHost` (the planes that may import the agent plane); below it,
the execution and knowledge planes declare their own narrow host protocols (``ToolHost``, ``LedgerHost``)."""


@pytest.mark.parametrize(("what", "members", "where"), [
    ("cache", CACHE_MEMBERS, ("",)),
    ("adapter", ADAPTER_MEMBERS, ("",)),
    ("harness", HOST_MEMBERS, _ABOVE_THE_AGENT),
    ("connector's harness", CONNECTOR_HOST_MEMBERS, ("core/execution/connectors",)),
])
def test_no_module_probes_a_seam_for_a_member_of_its_protocol(what, members, where):
    names = "|".join(re.escape(m) for m in members)
    probe = re.compile(rf"""(getattr|hasattr)\(\s*{_SEAM_NAMES}\s*,\s*["']({names})["']""")
    files = [p for p in PACKAGE.rglob("*.py") if str(p.relative_to(PACKAGE)).startswith(where)]
    offenders = [f"{p.relative_to(PACKAGE)}: {m.group(0)}" for p in files
                 for m in probe.finditer(p.read_text(encoding="utf-8"))]
    assert files and offenders == [], f"probing a {what} instead of typing it"


def test_no_module_compares_class_names_to_catch_an_exception():
    probe = re.compile(r"""type\(exc\)\.__name__\s*==""")
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if probe.search(p.read_text("utf-8"))]
    assert offenders == []
