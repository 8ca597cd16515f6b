"""Domain subagent presets (issue 25 point 2): a role, a tool subset GIVEN (not asked for), optional skills.

A scripted child model that calls a tool outside its preset's subset gets the loop's own
"does not exist" error, because the tool is not in its harness; the request it sends lists only
the subset. Connectors are real (a SQLite file through the sql connector).
"""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from harness_magic.core.agent.loop import Harness
from harness_magic.core.cache import SessionCache
from harness_magic.core.control.presets import PRESETS, PresetError, SubagentPreset, get_preset
from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME, enable_subagents
from harness_magic.core.execution.connectors import ApprovalPolicy, ConnectorRegistry, sql_connector
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.transcript.events import SubagentEvent
from harness_magic.core.transcript.log import read_log


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


def turn(tool, **arguments):
    return {"tool_calls": [call(tool, **arguments)]}


def scripted(turns):
    return ProviderAdapter("scripted/presets", transport=ScriptedModel(turns))


def tool_results(messages):
    return [b for m in messages for b in m.content if getattr(b, "type", "") == "tool_result"]


@pytest.fixture
def shop(tmp_path):
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table orders (id integer, region text, total real)")
        db.executemany("insert into orders values (?, ?, ?)", [(1, "n", 10.0), (2, "s", None), (3, "n", 5.0)])
    registry = ConnectorRegistry(approval=ApprovalPolicy.from_config("allow"))
    registry.register(sql_connector(f"sqlite:///{path}", name="shop", allow_writes=True))
    return path, registry


def build(tmp_path, parent_turns, child_turns, registry=None, **options):
    cache = SessionCache()
    cache.put("sales", pd.DataFrame({"amount": [1, 2, 3]}))
    parent = Harness(scripted(parent_turns), "You analyse sales.", [], max_turns=10, run_dir=str(tmp_path),
                     cache=cache)
    children = []

    def adapter_factory(_parent_adapter):
        children.append(scripted(child_turns))
        return children[-1]

    def tools_factory(child_cache, current_turn):
        from harness_magic.core.execution.interpreter import InProcessInterpreter, make_interpreter_tools

        return make_interpreter_tools(child_cache, InProcessInterpreter(), current_turn=current_turn)

    enable_subagents(parent, adapter_factory=adapter_factory, tools_factory=tools_factory,
                     preset_connectors=(lambda: registry), **options)
    return parent, children


def child_log(result):
    event = next(r for r in read_log(result.run_file) if r.get("event") == "subagent")
    return event, read_log(event["child_run_file"])


def outcomes_of(records):
    """[{name, is_error, content}] of the child's tool calls, in order, from its run log."""
    texts = {b["tool_use_id"]: b["content"] for r in records if r.get("type") == "turn"
             for m in r["request"]["messages_appended"] for b in m["content"] if b.get("type") == "tool_result"}
    return [{**o, "content": texts.get(o["tool_use_id"], "")} for r in records if r.get("type") == "tools"
            for o in r["results"]]


def offered(records):
    """The tool names the child's first request offered."""
    return set(next(r for r in records if r.get("type") == "turn")["request"]["visible_tools"])


def test_a_metric_definition_subagent_is_given_only_its_subset(tmp_path, shop):
    path, registry = shop
    child = [turn("python_interpreter", code="open('/etc/passwd').read()"),
             turn("load_connectors", connector_name="shop"),
             turn("shop__execute", sql="delete from orders"),
             turn("shop__query", sql="select count(*) as n from orders"),
             {"text": "orders has 3 rows"}]
    parent, children = build(tmp_path, [turn(SUBAGENT_TOOL_NAME, task="define orders", preset="metric_definition"),
                                        {"text": "done"}], child, registry)
    result = parent.run_result("go")
    assert result.status == "completed"
    event, records = child_log(result)
    assert event["preset"] == "metric_definition" and records[0]["preset"] == "metric_definition"
    outcomes = outcomes_of(records)
    assert outcomes[0]["is_error"] and "'python_interpreter' does not exist" in outcomes[0]["content"]
    assert not outcomes[1]["is_error"] and "shop__execute" not in outcomes[1]["content"]
    assert outcomes[2]["is_error"] and "'shop__execute' does not exist" in outcomes[2]["content"]
    assert not outcomes[3]["is_error"]
    with sqlite3.connect(path) as db:  # the write tool was never there: nothing was deleted
        assert db.execute("select count(*) from orders").fetchone() == (3,)
    tools = offered(records)
    assert "python_interpreter" not in tools and "shop__execute" not in tools
    assert {"load_connectors", "list_variables"} <= tools
    last = [r for r in records if r.get("type") == "turn"][-1]["request"]["visible_tools"]
    assert "shop__query" in last and "shop__execute" not in last  # load_connectors revealed only the subset
    assert "metric definition subagent" in records[0]["system"]
    parent_answer = tool_results(result.messages)[0].content
    assert parent_answer.startswith("Subagent (metric_definition) completed")


def test_a_data_quality_subagent_keeps_python_and_reads_the_connector(tmp_path, shop):
    _, registry = shop
    child = [turn("python_interpreter", code="import pandas as pd\n"
                                         "save('nulls', pd.DataFrame({'n': [int(sales['amount'].isna().sum())]}))"),
             turn("load_connectors", connector_name="shop"),
             turn("shop__query", sql="select count(*) - count(total) as missing from orders", name="missing"),
             {"text": "1 order without a total"}]
    parent, _ = build(tmp_path, [turn(SUBAGENT_TOOL_NAME, task="profile", input_handles=["sales"],
                                      preset="data_quality"), {"text": "done"}], child, registry)
    result = parent.run_result("go")
    _, records = child_log(result)
    outcomes = outcomes_of(records)
    assert [o["is_error"] for o in outcomes] == [False, False, False]
    assert {"nulls", "missing"} <= set(parent.cache.names())


def test_without_a_preset_the_subagent_keeps_todays_tools_and_no_connectors(tmp_path, shop):
    _, registry = shop
    child = [turn("load_connectors", connector_name="shop"), {"text": "no"}]
    parent, children = build(tmp_path, [turn(SUBAGENT_TOOL_NAME, task="look"), {"text": "done"}], child, registry)
    result = parent.run_result("go")
    _, records = child_log(result)
    outcome = outcomes_of(records)[0]
    assert outcome["is_error"] and "'load_connectors' does not exist" in outcome["content"]
    assert "preset" not in records[0]


def test_an_unknown_preset_is_an_error_listing_the_presets(tmp_path):
    parent, children = build(tmp_path, [turn(SUBAGENT_TOOL_NAME, task="x", preset="../../etc"), {"text": "ok"}],
                             [{"text": "never"}])
    result = parent.run_result("go")
    outcome = tool_results(result.messages)[0]
    assert outcome.is_error
    assert "Unknown preset '../../etc'" in outcome.content
    for name in ("query_investigation", "metric_definition", "data_quality", "lineage_impact"):
        assert name in outcome.content
    assert children == []  # no subagent was started


def test_the_tool_schema_offers_the_presets_by_name():
    parent = Harness(scripted([{"text": "x"}]), "s", [], run_dir=None, cache=SessionCache())
    spec = enable_subagents(parent)
    preset = spec.parameters["properties"]["preset"]
    assert preset["enum"] == list(PRESETS) and "preset" not in spec.parameters["required"]
    assert all(f"- {name}: " in preset["description"] for name in PRESETS)


def test_custom_presets_replace_the_built_in_table(tmp_path):
    only = SubagentPreset(name="list_only", description="Lists handles.", prompt="List.", tools=("list_variables",))
    child = [turn("python_interpreter", code="1"), turn("list_variables"), {"text": "listed"}]
    parent, _ = build(tmp_path, [turn(SUBAGENT_TOOL_NAME, task="l", preset="list_only"), {"text": "d"}], child,
                      presets={"list_only": only})
    result = parent.run_result("go")
    _, records = child_log(result)
    outcomes = outcomes_of(records)
    assert outcomes[0]["is_error"] and not outcomes[1]["is_error"]
    assert get_preset("list_only", {"list_only": only}) is only


@pytest.mark.parametrize("fields, message", [
    ({"name": "Bad Name"}, "preset name 'Bad Name' is invalid"),
    ({"description": "two\nlines"}, "one-line description"),
    ({"tools": ()}, "non-empty tuple of tool name patterns"),
])
def test_an_invalid_preset_definition_is_refused_by_name(fields, message):
    base = {"name": "ok", "description": "One line.", "prompt": "p", "tools": ("list_variables",)}
    with pytest.raises(PresetError, match=message):
        SubagentPreset(**{**base, **fields})


def test_child_events_are_still_relayed_to_the_parent(tmp_path):
    events = []
    parent, _ = build(tmp_path, [turn(SUBAGENT_TOOL_NAME, task="l", preset="lineage_impact"), {"text": "d"}],
                      [turn("list_variables"), {"text": "nothing depends on it"}])
    parent.subscribe(events.append)
    parent.run_result("go")
    assert any(isinstance(e, SubagentEvent) for e in events)


SKILL = """---
name: null-audit
description: Count nulls before answering.
verification:
  - mention: {any: [nulls]}
---
1. Count nulls per column with python_interpreter.
2. Answer with the count and the word nulls.
"""


def test_a_presets_skill_is_loaded_into_the_subagent_and_its_rule_checks_the_answer(tmp_path):
    from harness_magic.core.control.skills import load_skills
    from harness_magic.core.transcript.events import SkillLoaded

    (tmp_path / "skills" / "null-audit").mkdir(parents=True)
    (tmp_path / "skills" / "null-audit" / "SKILL.md").write_text(SKILL)
    skills = load_skills([str(tmp_path / "skills")], builtin=False)
    assert skills.errors == [] and "null-audit" in skills
    auditor = SubagentPreset(name="auditor", description="Audits nulls.", prompt="Audit.",
                             tools=("python_interpreter",), skills=("null-audit",))
    child = [{"text": "all fine"}]
    events = []
    parent, children = build(tmp_path / "runs", [turn(SUBAGENT_TOOL_NAME, task="audit", preset="auditor"),
                                                 {"text": "d"}], child, presets={"auditor": auditor},
                             preset_skills=lambda: skills)
    parent.subscribe(events.append)
    result = parent.run_result("go")
    _, records = child_log(result)
    assert "Count nulls per column with python_interpreter" in records[0]["system"]  # the template rides in its prompt
    loaded = [e.event for e in events if isinstance(e, SubagentEvent) and isinstance(e.event, SkillLoaded)]
    assert [s.name for s in loaded] == ["null-audit"]
    assert any(r.get("name") == "skill_loaded" and r.get("skill") == "null-audit" for r in records)
    assert offered(records) == {"python_interpreter", "subagent"}  # skills__load is not in the subset
    checks = [r for r in records if r.get("name") == "verification" and r.get("tool") == "final_answer"]
    assert [c["passed"] for c in checks] == [False]  # the skill's rule rejected the answer that skipped it
    assert "nulls" in checks[0]["checks"][0]["rule"]


def test_a_preset_naming_a_missing_skill_is_an_error_naming_it(tmp_path):
    from harness_magic.core.control.skills import load_skills

    ghost = SubagentPreset(name="ghost", description="Needs a ghost.", prompt="p", tools=("list_variables",),
                           skills=("no-such-skill",))
    parent, children = build(tmp_path, [turn(SUBAGENT_TOOL_NAME, task="g", preset="ghost"), {"text": "d"}],
                             [{"text": "never"}], presets={"ghost": ghost},
                             preset_skills=lambda: load_skills([], builtin=False))
    outcome = tool_results(parent.run_result("go").messages)[0]
    assert outcome.is_error and "'no-such-skill'" in outcome.content and "ghost" in outcome.content


@pytest.mark.kernel
def test_in_a_real_kernel_a_domain_subagent_uses_only_its_subset(tmp_path, shop):
    """The notebook's own session: the preset child reads the configured SQL connector, and nothing else."""
    pytest.importorskip("jupyter_client")
    import json
    import textwrap

    from kernel_helpers import Kernel

    path, _ = shop
    turns = [turn(SUBAGENT_TOOL_NAME, task="How is order revenue defined?", preset="metric_definition"),
             turn("python_interpreter", code="print(1)"),
             turn("load_connectors", connector_name="shop"),
             turn("shop__execute", sql="delete from orders"),
             turn("shop__query", sql="select sum(total) as revenue from orders", name="revenue"),
             {"text": "revenue is the sum of orders.total: 15"},
             {"text": "Revenue is the sum of order totals (15)."}]
    (tmp_path / "presets.json").write_text(json.dumps({"turns": turns}))
    connectors = [{"type": "sql", "name": "shop", "url": f"sqlite:///{path}", "allow_writes": True}]
    k = Kernel(tmp_path)
    try:
        setup = k.run(textwrap.dedent(f"""\
            %load_ext harness_magic
            %config AgentMagics.run_dir = "runs"
            %config AgentMagics.connectors = {connectors!r}
        """))
        assert setup.ok, setup.outputs
        cell = k.run("%%agent -m scripted/presets.json\nHow is order revenue defined?")
        assert cell.ok, cell.outputs
        run_file = k.value("_.run_file")
    finally:
        k.close()
    event = next(r for r in read_log(tmp_path / run_file) if r.get("event") == "subagent")
    assert event["preset"] == "metric_definition" and event["status"] == "completed"
    records = read_log(tmp_path / event["child_run_file"])
    outcomes = outcomes_of(records)
    assert [(o["name"], o["is_error"]) for o in outcomes] == [
        ("python_interpreter", True), ("load_connectors", False), ("shop__execute", True), ("shop__query", False)]
    assert "does not exist" in outcomes[0]["content"] and "does not exist" in outcomes[2]["content"]
    assert "python_interpreter" not in offered(records)
    with sqlite3.connect(path) as db:
        assert db.execute("select count(*) from orders").fetchone() == (3,)
    assert "glossary" in records[0]["system"].lower()  # the metric-definition skill's template is in its prompt


def test_a_preset_without_python_starts_no_worker_of_its_own(tmp_path):
    from harness_magic.core.execution.interpreter import InProcessInterpreter

    started = []

    def backend_factory():
        started.append(InProcessInterpreter())
        return started[-1]

    turns = [turn(SUBAGENT_TOOL_NAME, task="a", preset="lineage_impact"), {"text": "child a"},
             turn(SUBAGENT_TOOL_NAME, task="b", preset="data_quality"), {"text": "child b"}, {"text": "done"}]
    parent = Harness(scripted(turns), "s", [], max_turns=10, run_dir=str(tmp_path), cache=SessionCache())
    enable_subagents(parent, backend=InProcessInterpreter(), backend_factory=backend_factory,
                     preset_skills=lambda: None)
    result = parent.run_result("go")
    assert [r.is_error for r in tool_results(result.messages)] == [False, False]
    assert len(started) == 1  # data_quality runs code in a worker of its own; lineage_impact needs none
