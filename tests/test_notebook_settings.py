"""Every ``AgentMagics`` setting with a rule refuses a bad value in one line naming it, and keeps the old value.

The rules are the validators of the core's table of settings
(:data:`harness_magic.core.config.SETTINGS`); ``AgentMagics`` applies them
through one ``@validate`` (test_settings_table checks one declaration and one
message per setting). These tests set traits on a real
``AgentMagics`` (as ``%config`` does); test_magics and test_magics_integration
go through a kernel's ``%config`` for a few of them.
"""

from __future__ import annotations

import pytest
from traitlets import TraitError

from harness_magic.core.config import MAX_SETTING_INT as MAX_CAP
from harness_magic.core.config import setting_named
from harness_magic.notebook.agent_magics import AgentMagics
from harness_magic.notebook.live import live_renderer
from harness_magic.notebook.settings import trait_names

BAD = [
    ("sandbox", "chroot", "sandbox 'chroot' is not valid; allowed: worker, inprocess, unconfined"),
    ("live", "sometimes", "live 'sometimes' is not valid; allowed: auto, widgets, rich, off"),
    ("prompt_caching", "maybe", "prompt_caching 'maybe' is not valid; allowed: auto, on, off"),
    ("max_turns", 0, "max_turns must be at least 1, got 0"),
    ("hot_count", -3, "hot_count must be at least 1, got -3"),
    ("materialize_max_bytes", 0, f"materialize_max_bytes must be a positive integer (1 to {MAX_CAP:,}), got 0"),
    ("materialize_max_rows", MAX_CAP + 1, f"materialize_max_rows must be a positive integer (1 to {MAX_CAP:,})"),
    ("memory_budget", -1, "memory_budget must be a number of bytes >= 0, got -1"),
    ("max_tokens", 0, "max_tokens must be positive or None, got 0"),
    ("max_cost_usd", -0.5, "max_cost_usd must be positive or None, got -0.5"),
    ("max_wall_s", 0.0, "max_wall_s must be positive or None, got 0.0"),
    ("max_tool_calls", -2, "max_tool_calls must be positive or None, got -2"),
    ("connectors", [{"type": "ftp"}], "connector {'type': 'ftp'} needs a 'type' of dbt, docs, duckdb, files, glossary, mcp, spark, sql"),
    ("context_window", 0, "context_window must be a positive number of tokens or None, got 0"),
    ("run_dir", "runs\nUsageError: fake", "run_dir must be a path of at most 4,096 printable characters"),
    ("max_questions", -1, "max_questions must be a non-negative integer, got -1"),
]
GOOD = [("sandbox", "inprocess"), ("live", "off"), ("prompt_caching", "on"), ("max_turns", 1), ("hot_count", 2),
        ("materialize_max_bytes", MAX_CAP), ("materialize_max_rows", 1), ("memory_budget", 0),
        ("max_tokens", 10), ("max_cost_usd", 0.01), ("max_wall_s", None), ("max_tool_calls", 1),
        ("connectors", [{"type": "files", "roots": ["data"]}]), ("context_window", None), ("run_dir", "my runs"),
        ("max_questions", 0)]


def test_every_case_is_a_configurable_trait_checked_by_its_setting() -> None:
    traits = AgentMagics.class_own_traits(config=True)
    assert {name for name, _, _ in BAD} <= set(traits) & set(trait_names())
    assert {name for name, _, _ in BAD} == {name for name, _ in GOOD}


@pytest.mark.parametrize("name, value, message", BAD, ids=[case[0] for case in BAD])
def test_a_bad_setting_is_refused_naming_it_and_the_old_value_stays(name: str, value: object, message: str) -> None:
    magics = AgentMagics(shell=None)
    before = getattr(magics, name)
    with pytest.raises(TraitError) as refused:
        setattr(magics, name, value)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value), "one line"
    assert getattr(magics, name) == before


@pytest.mark.parametrize("name, value", GOOD, ids=[case[0] for case in GOOD])
def test_a_good_setting_is_kept_as_given(name: str, value: object) -> None:
    magics = AgentMagics(shell=None)
    setattr(magics, name, value)
    assert getattr(magics, name) == value


def test_a_setting_that_does_not_exist_is_a_developer_error_naming_it() -> None:
    with pytest.raises(ValueError, match="no setting 'colour'"):
        setting_named("colour")


def test_an_unknown_live_mode_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="live mode 'loud' is not valid"):
        live_renderer("loud", in_kernel=False, owner=None)


def test_live_off_gives_no_view_and_auto_in_a_terminal_gives_the_rich_renderer() -> None:
    from harness_magic.notebook.render import TerminalRenderer

    assert live_renderer("off", in_kernel=True, owner=None) == (None, None)
    handler, widget = live_renderer("auto", in_kernel=False, owner=None)
    assert isinstance(handler, TerminalRenderer) and widget is None


def test_turning_subagents_on_adds_the_tool_to_the_live_session_once(tmp_path) -> None:
    from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME

    magics = AgentMagics(shell=None, sandbox="inprocess", subagents=False, run_dir=str(tmp_path / "runs"),
                         model="offline/quickstart")
    try:
        def subagent_tools() -> int:
            return sum(tool.name == SUBAGENT_TOOL_NAME for tool in magics.session.harness.tools)

        assert subagent_tools() == 0
        magics.subagents = True
        assert subagent_tools() == 1
        magics.subagents = False
        magics.subagents = True  # already on: the same tool, not a second one
        assert subagent_tools() == 1
    finally:
        magics.close()
