"""%agent_eval in an IPython shell: live progress, the results view, usage errors."""

from __future__ import annotations

import json

import pytest

IPython = pytest.importorskip("IPython")
from IPython.core.error import UsageError  # noqa: E402


@pytest.fixture(scope="module")
def shell():
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython() or get_ipython()  # start_ipython returns None once another test module started it
    ip.run_line_magic("load_ext", "harness_magic")
    yield ip


@pytest.fixture
def shown(monkeypatch):
    """What the magic displays; widget value changes are recorded as they happen."""
    import IPython.display

    items: list = []
    changes: list = []

    def fake_display(obj, **kw):
        items.append(obj)
        for child in obj.children[0].children:
            if hasattr(child, "max"):
                child.observe(lambda change: changes.append(change["new"]), names="value")

    monkeypatch.setattr(IPython.display, "display", fake_display)
    return items, changes


def test_agent_eval_runs_with_live_progress(shell, shown, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    items, changes = shown
    view = shell.run_line_magic("agent_eval", "core -m suite:reference --task total_revenue --task median_units "
                                              "--task unique_orders --jobs 2 --out r.json")
    assert changes == [1, 2, 3]  # the bar moved as each attempt finished
    (bar, label), finished = items[0].children[0].children, items[0].children[1]
    assert bar.max == 3 and "3/3 done, 3 passed" in label.value
    assert finished.value.count("PASS") == 3 and "median_units r0: PASS" in finished.value
    assert view.summary["passed"] == 3
    assert "core with suite:reference: 3/3 passed" in repr(view)
    assert "<table>" in view._repr_html_()
    saved = json.loads((tmp_path / "r.json").read_text())
    assert [r["task_id"] for r in saved["results"]] == ["total_revenue", "median_units", "unique_orders"]
    assert all((tmp_path / "eval_runs").glob("*/*.jsonl"))


def test_agent_eval_wrong_scripts_show_failures(shell, shown, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    view = shell.run_line_magic("agent_eval", "core -m suite:wrong --task cancelled_orders_read_only")
    assert "FAIL (policy_violation)" in repr(view)
    label = shown[0][0].children[0].children[1]
    assert "0 passed" in label.value and "policy_violation" in label.value
    assert "FAIL (policy_violation)" in shown[0][0].children[1].value


@pytest.mark.parametrize("line, message", [
    ("no_such_suite -m suite:reference", "neither a directory nor a built-in suite"),
    ("core -m suite:reference --repeat 0", "--repeat must be at least 1"),
    ("core -m suite:reference --jobs 99", "--jobs must be from 1 to"),
    ("core -m suite:reference --task nope", "has no task 'nope'"),
    ("core -m suite:bogus --task total_revenue", "has no script 'bogus'"),
])
def test_agent_eval_usage_errors(shell, shown, line, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        shell.run_line_magic("agent_eval", line)
    assert not shown[0]  # refused before anything ran or was shown
