"""Skills: SKILL.md folders listed, loaded on demand, their verification rules enforced for the run.

Core tests drive a real AgentSession with scripted models (in-process
interpreter); the must-show path (listed, loaded, a rule fails a wrong answer
and the model gets the error) also runs in a real kernel through the magics.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness_magic.core.control.skills import (
    BUILTIN_SKILLS_DIR,
    MAX_SKILL_FILE_BYTES,
    SKILLS_TOOL_NAME,
    load_skills,
    parse_skill,
)
from harness_magic.core.control.skills.rules import check_answer_rule, parse_rules
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession

BUILTIN = ("data-freshness", "data-quality-profile", "kpi-discrepancy", "metric-definition", "source-of-truth")


def write_skill(root: Path, folder: str, text: str) -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": tool, "arguments": arguments}]}


def code(source: str) -> dict[str, Any]:
    return call("python_interpreter", code=source)


def session_with(tmp_path: Path, *turns: dict[str, Any], skill_dirs: tuple[str, ...] = ()) -> tuple[AgentSession, list]:
    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(list(turns)))
    session = AgentSession(AgentConfig(model="scripted/test", sandbox="inprocess", run_dir=str(tmp_path / "runs"),
                                       skill_dirs=skill_dirs), adapter=adapter)
    events: list = []
    session.subscribe(events.append)
    return session, events


def log_records(session: AgentSession) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(session.harness.run_file).read_text().splitlines()]


BREAKDOWN_WRONG = ("import pandas as pd\nsave('discrepancy', pd.DataFrame({'amount': [-800.0]}))\n"
                   "save('discrepancy_breakdown', pd.DataFrame({'cause': ['late partition'], 'amount': [-500.0]}))")
BREAKDOWN_FIXED = ("import pandas as pd\nsave('discrepancy_breakdown', pd.DataFrame({'cause': ['late partition', "
                   "'unexplained'], 'amount': [-500.0, -300.0]}))")


# -- listing and the built-in set ---------------------------------------------------------------------------------


def test_builtin_skills_all_load_with_rules_and_a_template() -> None:
    skills = load_skills()
    assert skills.errors == []
    assert skills.names() == list(BUILTIN)
    for skill in skills:
        assert skill.builtin and skill.rules and skill.template.startswith(("1.", "Work")) and skill.escalation
        assert Path(skill.directory).parent == Path(BUILTIN_SKILLS_DIR)


def test_builtin_skills_ship_as_package_data() -> None:
    """hatch's wheel target takes every file under harness_magic/ that git tracks: the SKILL.md files must be."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    tracked = subprocess.run(["git", "ls-files", "harness_magic/core/control/skills/builtin"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
    assert sorted(tracked) == [f"harness_magic/core/control/skills/builtin/{n}/SKILL.md" for n in BUILTIN]
    pyproject = (root / "pyproject.toml").read_text()
    assert 'packages = ["harness_magic"]' in pyproject


def test_a_skill_written_for_another_agent_loads_with_only_name_and_description(tmp_path: Path) -> None:
    write_skill(tmp_path, "pdf-forms", """\
        ---
        name: pdf-forms
        description: Fill PDF forms.
        license: Apache-2.0
        allowed-tools: Bash Read
        metadata: {author: someone}
        ---
        # Filling forms
        Run `scripts/fill.py` with the field values.
        """)
    (tmp_path / "pdf-forms" / "scripts").mkdir()
    skills = load_skills([tmp_path], builtin=False)
    assert skills.errors == []
    skill = skills.get("pdf-forms")
    assert (skill.description, skill.triggers, skill.rules, skill.escalation) == ("Fill PDF forms.", (), (), "")
    assert skill.template.startswith("# Filling forms") and skill.files == ("scripts",)


def test_a_user_skill_replaces_a_builtin_of_the_same_name(tmp_path: Path) -> None:
    write_skill(tmp_path, "kpi-discrepancy", "---\nname: kpi-discrepancy\ndescription: Our own KPI workflow.\n---\nSteps.\n")
    skills = load_skills([tmp_path])
    assert skills.get("kpi-discrepancy").description == "Our own KPI workflow."
    assert not skills.get("kpi-discrepancy").builtin and len(skills) == len(BUILTIN)


# -- malformed and hostile files ---------------------------------------------------------------------------------

MALFORMED = {
    "no-front": ("# just markdown\n", "front matter: missing"),
    "unclosed": ("---\nname: unclosed\ndescription: x\n", "front matter: no closing"),
    "no-name": ("---\ndescription: x\n---\nbody\n", "name: missing"),
    "no-desc": ("---\nname: no-desc\n---\nbody\n", "description: missing"),
    "bad-yaml": ("---\nname: bad-yaml\ndescription: [unclosed\n---\n", "front matter: invalid YAML on line"),
    "bad-kind": ("---\nname: bad-kind\ndescription: x\nverification:\n  - run_python: {code: 'import os'}\n---\n",
                 "verification: rule 1: unknown kind 'run_python'"),
    "bad-param": ("---\nname: bad-param\ndescription: x\nverification:\n  - cite_sources: {min: two}\n---\n",
                  "verification: rule 1 (cite_sources): min must be a whole number"),
    "bad-tol": ("---\nname: bad-tol\ndescription: x\nverification:\n  - totals_reconcile: {handles: [a, b], "
                "tolerance: 5}\n---\n", "tolerance must be a fraction"),
    "bad-triggers": ("---\nname: bad-triggers\ndescription: x\ntriggers: {a: 1}\n---\n", "triggers: expected a list"),
}


def test_each_malformed_file_gives_one_line_naming_file_and_field_and_the_others_load(tmp_path: Path) -> None:
    for folder, (text, _) in MALFORMED.items():
        write_skill(tmp_path, folder, text)
    write_skill(tmp_path, "good", "---\nname: good\ndescription: fine\n---\nok\n")
    skills = load_skills([tmp_path], builtin=False)
    assert skills.names() == ["good"]
    assert len(skills.errors) == len(MALFORMED)
    for folder, (_, expected) in MALFORMED.items():
        line = next(e for e in skills.errors if f"/{folder}/SKILL.md: " in e)
        assert "\n" not in line and expected in line, line


def test_yaml_tags_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    write_skill(tmp_path, "tagged", f"""\
        ---
        name: tagged
        description: !!python/object/apply:os.system ["touch {marker}"]
        ---
        """)
    write_skill(tmp_path, "local-tag", "---\nname: local-tag\ndescription: !secret x\n---\n")
    skills = load_skills([tmp_path], builtin=False)
    assert len(skills) == 0 and not marker.exists()
    assert all("YAML tag on line" in e for e in skills.errors), skills.errors


def test_an_alias_bomb_is_refused_before_expansion(tmp_path: Path) -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
               for i in range(8)]
    write_skill(tmp_path, "bomb", "---\nname: bomb\ndescription: boom\n" + "\n".join(levels) + "\n---\n")
    skills = load_skills([tmp_path], builtin=False)
    assert len(skills) == 0 and "YAML anchor on line 4 refused" in skills.errors[0], skills.errors


def test_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "huge", "---\nname: huge\ndescription: big\n---\n")
    with open(path, "a") as handle:
        handle.write("x" * MAX_SKILL_FILE_BYTES)
    skills = load_skills([tmp_path], builtin=False)
    assert len(skills) == 0 and f"huge/SKILL.md: size: {path.stat().st_size} bytes, more than" in skills.errors[0]


def test_symlinks_out_of_the_skill_dir_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_skill(outside, "secret", "---\nname: secret\ndescription: from outside\n---\n")
    root = tmp_path / "skills"
    root.mkdir()
    os.symlink(outside / "secret", root / "linked-folder")
    (root / "linked-file").mkdir()
    os.symlink(outside / "secret" / "SKILL.md", root / "linked-file" / "SKILL.md")
    skills = load_skills([root], builtin=False)
    assert len(skills) == 0
    assert len(skills.errors) == 2 and all("path: a symbolic link to" in e and "outside the skills directory" in e
                                           for e in skills.errors), skills.errors


@pytest.mark.parametrize("name", ["../escape", "a/b", "UPPER", "has space", "-lead", "x" * 65, "dots.."])
def test_names_with_path_or_odd_characters_are_refused(name: str) -> None:
    from harness_magic.core.control.skills import SkillFileError

    with pytest.raises(SkillFileError, match=r"^SKILL.md: name: .* is not lowercase letters"):
        parse_skill(f"---\nname: {json.dumps(name)}\ndescription: x\n---\n")


def test_a_missing_skill_dir_is_one_line_and_builtins_still_load(tmp_path: Path) -> None:
    skills = load_skills([tmp_path / "nowhere"])
    assert skills.names() == list(BUILTIN) and skills.errors == [f"{tmp_path / 'nowhere'}: skill_dirs: not a directory"]


# -- the rule vocabulary -----------------------------------------------------------------------------------------


def test_answer_rules_pass_and_fail_on_the_text() -> None:
    cite, define, mention, term = parse_rules([{"cite_sources": {"min": 2}}, {"name_definition": {}},
                                               {"mention": {"any": ["lag", "stale"]}},
                                               {"name_definition": {"term": "active user"}}])
    assert check_answer_rule(cite, "See [doc:a.md] and [term:wau].") is None
    assert "cites 1 source(s) (doc:a.md); at least 2 needed" == check_answer_rule(cite, "See [doc:a.md].")
    assert check_answer_rule(define, "WAU is defined as users with an event.") is None
    assert check_answer_rule(define, "WAU fell 8%.") is not None
    assert check_answer_rule(mention, "Orders is 30 hours stale.") is None
    assert check_answer_rule(mention, "All good.") == "mentions none of lag, stale"
    assert check_answer_rule(term, "An active user means one event in the week.") is None
    assert check_answer_rule(term, "Active users fell. Revenue means money.") is not None


# -- skills__load in a run -----------------------------------------------------------------------------------------


def test_the_model_sees_names_and_triggers_in_the_tool_not_the_system_prompt(tmp_path: Path) -> None:
    write_skill(tmp_path, "mine", "---\nname: mine\ndescription: My flow.\ntriggers: [when it rains]\n---\nSECRET STEP\n")
    plain, _ = session_with(tmp_path / "a")
    session, _ = session_with(tmp_path / "b", skill_dirs=(str(tmp_path),))
    assert session.harness.system == plain.harness.system
    tool = next(t for t in session.harness.tools if t.name == SKILLS_TOOL_NAME)
    assert "- mine: My flow. (when: when it rains)" in tool.description
    assert all(f"- {n}: " in tool.description for n in BUILTIN)
    assert "SECRET STEP" not in tool.description and "SECRET STEP" not in session.harness.system


def test_a_loaded_rule_fails_a_wrong_result_the_model_gets_the_error_and_the_run_shows_it(tmp_path: Path) -> None:
    session, events = session_with(
        tmp_path, call(SKILLS_TOOL_NAME, name="kpi-discrepancy"), code(BREAKDOWN_WRONG), code(BREAKDOWN_FIXED),
        {"text": "Revenue (defined as gross bookings) fell 800: a late partition explains 500."})
    result = session.ask("Why did revenue drop 800?")
    assert result.status == "completed"
    loaded = [e for e in events if e.kind == "skill_loaded"]
    assert [(e.name, e.tool_use_id) for e in loaded] == [("kpi-discrepancy", "call_1")]
    assert "totals_reconcile(discrepancy, discrepancy_breakdown: amount)" in loaded[0].rules
    results = [b for m in session.harness.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    assert "# Skill: kpi-discrepancy" in str(results[0].content)
    wrong = results[1]
    assert wrong.is_error and "totals_reconcile(discrepancy, discrepancy_breakdown: amount): totals differ: " \
        "`discrepancy` -800 vs `discrepancy_breakdown` -500" in str(wrong.content)
    assert not results[2].is_error
    checked = [e for e in events if e.kind == "verification_checked"]
    assert [c.passed for c in checked] == [False, True, True]
    assert checked[-1].tool == "final_answer" and checked[-1].checks[0]["rule"] == "name_definition()"
    records = log_records(session)
    assert any(r.get("name") == "skill_loaded" and r["skill"] == "kpi-discrepancy" for r in records)
    failed = [r for r in records if r.get("name") == "verification" and not r["passed"]]
    assert [c["rule"] for c in failed[0]["checks"] if not c["ok"]] == [
        "totals_reconcile(discrepancy, discrepancy_breakdown: amount)"]


def test_answer_rules_report_a_failed_final_answer(tmp_path: Path) -> None:
    session, events = session_with(tmp_path, call(SKILLS_TOOL_NAME, name="source-of-truth"),
                                   {"text": "Use the finance number."})
    session.ask("Finance and product disagree on revenue.")
    checked = [e for e in events if e.kind == "verification_checked"]
    assert len(checked) == 1 and not checked[0].passed
    assert {c["rule"]: c["ok"] for c in checked[0].checks} == {
        "cite_sources(min=2)": False, "mention(source of truth, authoritative, system of record)": False}
    assert any(e.kind == "notice" and "cite_sources(min=2): cites 0 source(s)" in e.text for e in events)


def test_rules_last_for_the_run_that_loaded_them(tmp_path: Path) -> None:
    session, events = session_with(tmp_path, call(SKILLS_TOOL_NAME, name="data-quality-profile"),
                                   {"text": "Loaded."}, code("save('profile', __import__('pandas').DataFrame())"),
                                   {"text": "No checks now."})
    session.ask("Profile it.")
    assert session.skills.loaded == () and session.verifier.rules == []
    session.ask("Again, no skill.")
    assert [e for e in events if e.kind == "verification_checked"] == []


def test_an_unknown_skill_is_a_tool_error_listing_the_available_ones(tmp_path: Path) -> None:
    session, events = session_with(tmp_path, call(SKILLS_TOOL_NAME, name="../etc/passwd"), {"text": "ok"})
    session.ask("Load something.")
    finished = next(e for e in events if e.kind == "tool_call_finished")
    assert finished.result.is_error
    assert f"no skill named '../etc/passwd'; available: {', '.join(BUILTIN)}" in str(finished.result.content)
    assert not [e for e in events if e.kind == "skill_loaded"]


# -- the magics in a real kernel -------------------------------------------------------------------------------


@pytest.mark.kernel
def test_skills_listed_shown_loaded_and_a_rule_fails_a_wrong_answer_in_a_kernel(tmp_path: Path) -> None:
    pytest.importorskip("jupyter_client")
    from kernel_helpers import Kernel, usage_error

    skills_dir = tmp_path / "team_skills"
    write_skill(skills_dir, "churn-check", """\
        ---
        name: churn-check
        description: Check churn numbers.
        triggers: [why did churn rise]
        verification:
          - require_columns: {columns: [month, churned], handles: churn}
        ---
        1. Count churn <script>alert(1)</script> ![x](http://evil.example/?q=1)
        """)
    write_skill(skills_dir, "broken", "---\nname: broken\n---\n")
    (tmp_path / "s.json").write_text(json.dumps({"turns": [
        call(SKILLS_TOOL_NAME, name="kpi-discrepancy"), code(BREAKDOWN_WRONG), code(BREAKDOWN_FIXED),
        {"text": "Revenue is defined as gross bookings; a late partition explains 500 of the 800 drop."}]}))
    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(f'%load_ext harness_magic\n%config AgentMagics.sandbox = "inprocess"\n'
                           f'%config AgentMagics.skill_dirs = [{str(skills_dir)!r}]')
        assert setup.ok, setup.outputs
        listing = kernel.run("%agent_skills")
        assert listing.ok, listing.outputs
        table = listing.data("text/plain")[0]
        assert "churn-check" in table and str(skills_dir / "churn-check") in table and "why did churn rise" in table
        assert all(n in table for n in BUILTIN) and "require_columns(month, churned)" in table
        assert "skipped: " in listing.stderr and "broken/SKILL.md: description: missing" in listing.stderr
        shown = kernel.run("%agent_skills churn-check")
        assert shown.ok
        page = shown.data("text/html")[0]
        assert "<script>" not in page and "&lt;script&gt;" in page and 'src="http' not in page
        assert "no skill named 'nope'; available: churn-check, data-freshness" in usage_error(
            kernel.run("%agent_skills nope"))
        run = kernel.run("%%agent -m scripted/s.json\nWhy did revenue drop 800?")
        assert run.ok, run.outputs
        state = kernel.value(
            "[(b.is_error, str(b.content)[:2000]) for m in get_ipython().magics_manager.registry['AgentMagics']"
            ".session.harness.messages for b in m.content if getattr(b, 'type', '') == 'tool_result']")
        assert "# Skill: kpi-discrepancy" in state[0][1]
        assert state[1][0] and "totals_reconcile(discrepancy, discrepancy_breakdown: amount): totals differ" in state[1][1]
        assert not state[2][0]
        log = kernel.value("get_ipython().magics_manager.registry['AgentMagics'].session.harness.run_file")
        records = [json.loads(line) for line in (tmp_path / log).read_text().splitlines()]
        assert any(r.get("name") == "skill_loaded" for r in records)
        assert [r["passed"] for r in records if r.get("name") == "verification"] == [False, True, True]
    finally:
        kernel.close()


def test_the_reference_example_skill_parses_as_documented() -> None:
    import re

    reference = (Path(__file__).resolve().parent.parent / "docs" / "reference.md").read_text()
    example = re.search(r"## Skills.*?```yaml\n(.*?)```", reference, re.S).group(1)
    skill = parse_skill(example, "docs/reference.md")
    assert (skill.name, skill.triggers) == ("churn-check", ("why did churn rise",))
    assert skill.rule_names == ("require_columns(month, churned)", "cite_sources(min=1)")
    assert skill.escalation.startswith("- The churn definition") and skill.template.startswith("1. Count churned")
