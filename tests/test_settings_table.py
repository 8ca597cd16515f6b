"""Each setting is declared once (the core's table) and validated once, with one message, on every way in.

``tests/settings_contract.json`` is the full list of ``AgentMagics`` traits
(type, default, None allowed, item type, help) and ``AgentConfig`` fields
(annotation, default) as they were declared by hand before the table: names,
types, defaults and help are contracts, so the derived ones must equal it
(settings added since, such as ``otel``, join the table and so the traits).
The messages are compared across ``AgentConfig(...)``, a trait set the way
``%config`` sets it, and ``%config``/``%%agent`` flags in a real IPython shell.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError

from harness_magic.core.config import SESSION_SETTINGS, SETTINGS, AgentConfig, setting_named
from harness_magic.notebook.agent_magics import AgentMagics
from harness_magic.notebook.settings import ALL_SETTINGS, NOTEBOOK_SETTINGS, trait_names

CONTRACT = json.loads((Path(__file__).parent / "settings_contract.json").read_text())

# (setting, hostile value, words the one message must hold)
HOSTILE = [
    ("max_turns", "25", "max_turns must be a whole number, got '25'"),
    ("max_turns", 0, "max_turns must be at least 1, got 0"),
    ("max_turns", True, "max_turns must be a whole number, got True"),
    ("max_turns", 10**30, "max_turns must be at most 9,223,372,036,854,775,807"),
    ("hot_count", -3, "hot_count must be at least 1, got -3"),
    ("memory_budget_bytes", -1, "must be a number of bytes >= 0, got -1"),
    ("memory_budget_bytes", 2**64, "must be at most 9,223,372,036,854,775,807"),
    ("max_tokens", 0, "max_tokens must be positive or None, got 0"),
    ("max_tokens", 1.5, "max_tokens must be an integer or None, got 1.5"),
    ("max_cost_usd", math.nan, "max_cost_usd must be positive or None, got nan"),
    ("max_cost_usd", -0.5, "max_cost_usd must be positive or None, got -0.5"),
    ("max_wall_s", math.inf, "max_wall_s must be at most 9,223,372,036,854,775,807 (None: no limit), got inf"),
    ("max_wall_s", "10", "max_wall_s must be a number or None, got '10'"),
    ("max_tool_calls", 2**70, "max_tool_calls must be at most"),
    ("context_window", 0, "context_window must be a positive number of tokens or None, got 0"),
    ("materialize_max_bytes", 0, "materialize_max_bytes must be a positive integer (1 to 9,223,372,036,854,775,807)"),
    ("materialize_max_rows", 2**63, "materialize_max_rows must be a positive integer"),
    ("max_questions", -1, "max_questions must be a non-negative integer, got -1"),
    ("max_questions", 10**12, "max_questions must be at most 1,000,000"),
    ("question_timeout_s", 0.0, "question_timeout_s must be a positive number of seconds or None, got 0.0"),
    ("question_timeout_s", math.nan, "question_timeout_s must be a positive number of seconds or None, got nan"),
    ("question_timeout_s", math.inf, "question_timeout_s must be at most"),
    ("sandbox", "chroot\nUsageError: fake", "sandbox 'chroot\\nUsageError: fake' is not valid; allowed: worker"),
    ("prompt_caching", "maybe", "prompt_caching 'maybe' is not valid; allowed: auto, on, off"),
    ("run_dir", "runs\nUsageError: fake", "run_dir must be a path of at most 4,096 printable characters"),
    ("spill_dir", "spill\x00", "spill_dir must be a path"),
    ("workspace_memory", "m" * 5000, "workspace_memory must be a path of at most 4,096"),
    ("audit_log", "audit\r.jsonl", "audit_log must be a path"),
    ("api_base", "http://host/v1\nX-Injected: 1", "api_base must be a URL without spaces or control characters"),
    ("model", "gpt 4", "bad model 'gpt 4': give a litellm model id"),
    ("model", "openai/x\nUsageError: fake", "bad model 'openai/x\\nUsageError: fake'"),
    ("actor_role", "dba\nadmin", "actor_role must be a role name without newline or control characters"),
    ("actor_role", "   ", "actor role '   ' must be a non-empty name"),
    ("masking", {"pii": "hide"}, "masking action 'hide' for 'pii' is not valid; allowed: allow, mask, deny"),
    ("masking", {"secret": "deny"}, "masking policy names class 'secret'"),
    ("skill_dirs", ("ok", "bad\npath"), "skill_dirs entry must be a path"),
    ("stream", "yes", "stream must be True or False, got 'yes'"),
]


def _message(call: Any) -> str:
    try:
        call()
    except (ValueError, TraitError) as exc:
        return str(exc)
    raise AssertionError("accepted")


# -- one declaration ---------------------------------------------------------------------------------


def test_the_derived_traits_are_the_ones_declared_by_hand_before_help_included() -> None:
    magics = AgentMagics(shell=None)
    traits = AgentMagics.class_own_traits(config=True)
    assert set(CONTRACT["traits"]) <= set(traits), "a setting was lost"  # new settings join the table later
    for name in CONTRACT["traits"]:
        trait = traits[name]
        inner = getattr(trait, "_trait", None)
        assert {"trait": type(trait).__name__, "default": getattr(magics, name), "allow_none": trait.allow_none,
                "item": type(inner).__name__ if inner is not None else None, "help": trait.help
                } == CONTRACT["traits"][name], name


def test_the_config_fields_keep_their_order_annotations_and_defaults() -> None:
    fields = [f for f in dataclasses.fields(AgentConfig) if f.name in CONTRACT["fields"]]
    assert [f.name for f in fields] == list(CONTRACT["fields"]), "lost or reordered (positional arguments)"
    assert dataclasses.fields(AgentConfig)[:len(fields)] == tuple(fields), "new fields go after the old ones"
    config = AgentConfig()
    for f in fields:
        value = getattr(config, f.name)
        assert {"type": f.type, "default": {"tuple": list(value)} if isinstance(value, tuple) else value
                } == CONTRACT["fields"][f.name], f.name


def test_every_trait_is_exactly_one_setting_of_the_table() -> None:
    names = [one.trait_name for one in ALL_SETTINGS]
    assert len(names) == len(set(names)), "a setting declared twice"
    assert set(names) == set(AgentMagics.class_own_traits(config=True))
    assert [one.name for one in SETTINGS if one.field] == [f.name for f in dataclasses.fields(AgentConfig)]
    for one in SETTINGS + NOTEBOOK_SETTINGS:
        assert callable(one.check) and one.help.strip(), one.name


def test_the_magics_declare_no_trait_of_their_own() -> None:
    source = Path(sys.modules[AgentMagics.__module__].__file__).read_text()
    for kind in ("Unicode(", "Integer(", "Float(", "Bool(", "List(", "Dict(", "config=True"):
        assert kind not in source, f"agent_magics.py declares a trait by hand ({kind})"


def test_which_settings_rebuild_what_is_read_from_the_table() -> None:
    assert set(trait_names(applies="run")) == {"max_tokens", "max_cost_usd", "max_wall_s", "max_tool_calls",
                                                "materialize_max_bytes", "materialize_max_rows", "max_query_rows",
                                                "max_query_cost", "max_write_operations"}
    assert set(trait_names(reconnects=True)) == {"connectors", "workspace_memory", "actor_role", "policy",
                                                 "policy_file"}
    assert "memory_budget" in trait_names(applies="session") and "model" not in trait_names(applies="session")


def test_the_config_the_magics_build_carries_every_trait_value(tmp_path: Path) -> None:
    magics = AgentMagics(shell=None, memory_budget=1024, skill_dirs=[str(tmp_path)], run_dir=str(tmp_path),
                         max_cost_usd=0.5, masking={"pii": "allow"})
    config = magics._config()
    assert (config.memory_budget_bytes, config.skill_dirs, config.run_dir, config.max_cost_usd) == (
        1024, (str(tmp_path),), str(tmp_path), 0.5)
    assert config.masking == {"pii": "allow", "financial": "mask", "restricted": "deny"}
    assert config.workspace_memory == ".harness_memory.yaml", "the notebook's default, not the core's None"


def test_an_unknown_setting_is_named_with_the_ones_there_are() -> None:
    with pytest.raises(ValueError, match="no setting 'colour'; settings: model, api_base"):
        setting_named("colour")
    assert setting_named("memory_budget") is setting_named("memory_budget_bytes")


# -- one validation, one message ----------------------------------------------------------------------


@pytest.mark.parametrize("name, value, words", HOSTILE, ids=[f"{n}={v!r}"[:40] for n, v, _ in HOSTILE])
def test_a_hostile_value_is_refused_with_the_same_message_by_the_config_and_the_trait(name: str, value: Any,
                                                                                     words: str) -> None:
    one = setting_named(name)
    by_config = _message(lambda: AgentConfig(**{name: value}))
    assert words in by_config and "\n" not in by_config
    magics = AgentMagics(shell=None)
    trait = one.trait_name
    before = getattr(magics, trait)
    trait_value = list(value) if isinstance(value, tuple) else value
    by_trait = _message(lambda: setattr(magics, trait, trait_value))
    if isinstance(value, str) and one.type is not str or one.type is bool or value is True or (
            one.type is int and isinstance(value, float)):
        assert trait in by_trait  # the trait's type refuses it first, naming the trait and the value
    else:
        assert by_trait == by_config.replace(name, trait), "one validator, one message"
    assert getattr(magics, trait) == before


def test_session_settings_are_validated_by_their_one_validator_too() -> None:
    assert {"connectors", "policy", "policy_file", "subagents"} <= {one.name for one in SESSION_SETTINGS}
    connectors, policy = setting_named("connectors"), setting_named("policy")
    with pytest.raises(ValueError, match="connector 'ftp' needs a 'type' of"):
        connectors.validate(["ftp"])
    with pytest.raises(ValueError, match="policy rule 1"):
        policy.validate({"rules": [{"action": "nope"}]})
    magics = AgentMagics(shell=None)
    with pytest.raises(TraitError, match="connector {'type': 'ftp'} needs a 'type' of"):
        magics.connectors = [{"type": "ftp"}]


SHELL = textwrap.dedent("""\
    import sys
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harness_magic")
    magics = shell.magics_manager.registry["AgentMagics"]
    for line in sys.argv[1:]:
        print("CELL", line.replace("\\n", "|"), flush=True)
        shell.run_cell(line)
        sys.stderr.flush()
        print("HOT", magics.hot_count, "TURNS", magics.max_turns, "RUN_DIR", repr(magics.run_dir), flush=True)
""")


def test_config_and_agent_flags_in_a_shell_give_the_same_messages_and_keep_the_old_values(tmp_path: Path) -> None:
    cells = ["%config AgentMagics.hot_count = -3", "%config AgentMagics.max_turns = 0",
             "%config AgentMagics.max_cost_usd = float('nan')", "%config AgentMagics.run_dir = 'a\\nb'",
             "%config AgentMagics.max_tool_calls = 10**30",
             "%%agent -m offline/quickstart --max-turns 0\nHi", "%%agent -m offline/quickstart --max-cost nan\nHi",
             "%%agent -m offline/quickstart --max-tokens 0\nHi"]
    out = subprocess.run([sys.executable, "-c", SHELL, *cells], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    for name, value in [("hot_count", -3), ("max_turns", 0), ("max_cost_usd", math.nan), ("run_dir", "a\nb"),
                        ("max_tool_calls", 10**30)]:
        assert f"UsageError: {_message(lambda: AgentConfig(**{name: value}))}" in text
    assert "UsageError: --max-turns must be at least 1, got 0" in text
    assert "UsageError: --max-cost must be positive or None, got nan" in text
    assert "UsageError: --max-tokens must be positive or None, got 0" in text
    assert text.count("HOT 10 TURNS 25 RUN_DIR 'runs'") == len(cells), "every refused value left the old one"
    assert "Traceback" not in text


def test_config_help_shows_every_setting_with_its_whole_help() -> None:
    shown = " ".join(AgentMagics.class_get_help().split())
    for one in ALL_SETTINGS:
        assert f"--AgentMagics.{one.trait_name}=" in shown
        assert " ".join(one.help.split()) in shown, f"{one.trait_name}'s help is cut or missing"
