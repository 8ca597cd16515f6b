"""Questions in a real JupyterLab in headless Chromium: nothing that waits for the person blocks the front end.

* A question nobody answers: its widget is withdrawn in place when the wait
  runs out (every control disabled, the reason and then the agent's assumption
  shown), and the next cell, queued by Run All, runs.
* A question answered by clicking an option; a hostile option label shows as text.
* An interrupt during a question withdraws it; the run and the next cell go on.

Never a stdin box (``.jp-Stdin-input``): JupyterLab refuses every other cell
while one is open. A write approved by clicking is in ``test_browser.py``
(the approval's wait on the status line). Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

from browser_lab import lab, lab_shared  # noqa: F401 - the fixtures this module's tests use
from test_browser import ARTIFACTS, RUN_TIMEOUT_MS, _notebook, _open_and_run_all

pytestmark = pytest.mark.browser

SETUP = "%load_ext harness_magic\n%config AgentMagics.sandbox = 'inprocess'"
HOSTILE = "<img src=x onerror=alert(1)>"


def ask(question: str, options: list[str]) -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"name": "ask_user", "arguments": {"question": question, "options": options}}]}


def sleep_call(seconds: float) -> dict[str, Any]:
    """A call that keeps the live view on screen long enough to look at the withdrawn question."""
    return {"text": "", "tool_calls": [{"name": "python_interpreter",
                                        "arguments": {"code": f"import time\ntime.sleep({seconds})"}}]}


def _output_with(page: Any, text: str) -> None:
    page.wait_for_function(
        "(t) => [...document.querySelectorAll('.jp-OutputArea-output')].some(o => o.innerText.includes(t))",
        arg=text, timeout=RUN_TIMEOUT_MS)


@contextmanager
def running(lab: Any, name: str, script: dict[str, Any], *cells: str, height: int = 1000) -> Iterator[Any]:
    """JupyterLab on ``name``.ipynb (``cells``) with the scripted model ``name``.json; Run All; yields the page."""
    url, browser, root = lab({f"{name}.ipynb": _notebook(*cells), f"{name}.json": json.dumps(script)})
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": height})
        _open_and_run_all(page, url, root / f"{name}.ipynb")
        yield page
    finally:
        browser.close()


def _no_stdin_box(page: Any) -> None:
    assert page.locator(".jp-Stdin-input").count() == 0, "never a stdin box: it would lock every other cell"


def test_an_unanswered_question_is_withdrawn_in_place_and_the_next_cell_runs(lab) -> None:
    script = {"turns": [
        ask("Which week counts as **last week**?", ["Monday-based", "Sunday-based"]),
        {"text": "", "tool_calls": [{"name": "remember", "arguments": {
            "kind": "assumption", "text": "weeks start on Monday (ISO)"}}]},
        sleep_call(4),
        {"text": "Weekly active users fell 8% in the Monday-based week 47."},
    ]}
    with running(lab, "wait", script, SETUP + "\n%config AgentMagics.question_timeout_s = 3.0",
                 "%%agent -m scripted/wait.json\nWhy did weekly active users drop last week?",
                 "print('next cell ran:', _.status)", height=1100) as page:
        box = page.locator(".agent-run-view .agent-prompt-question").first
        box.wait_for(state="visible", timeout=RUN_TIMEOUT_MS)
        assert "agent-prompt-open" in box.get_attribute("class")
        assert "No answer within 3 s" in box.locator(".agent-prompt-note").inner_text()
        _no_stdin_box(page)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-open.png"), full_page=False)

        withdrawn = page.locator(".agent-run-view .agent-prompt-withdrawn").first
        withdrawn.wait_for(state="visible", timeout=10_000)
        note = withdrawn.locator(".agent-prompt-note")
        assert "withdrawn: no answer within 3 s" in note.inner_text()
        buttons = withdrawn.locator("button")
        assert buttons.count() == 3 and all(buttons.nth(i).is_disabled() for i in range(3))
        assert withdrawn.locator(".agent-prompt-text input").is_disabled()
        page.wait_for_selector(".agent-run-view .agent-prompt-assumed", timeout=10_000)
        assert "assumed: weeks start on Monday (ISO)" in note.inner_text()
        withdrawn.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-withdrawn.png"), full_page=False)

        _output_with(page, "next cell ran: completed")
        _no_stdin_box(page)
        state = page.locator(".agent-final .agent-state").inner_text()
        assert "(withdrawn: no answer in time)" in state and "weeks start on Monday (ISO)" in state, state
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-withdrawn-settled.png"), full_page=False)


def test_a_question_is_answered_by_clicking_an_option_and_its_labels_are_text(lab) -> None:
    script = {"turns": [ask("Which **week** start?", ["Monday", "Sunday", HOSTILE]),
                        {"text": "Using Sunday-based weeks."}]}
    with running(lab, "click", script, SETUP, "%%agent -m scripted/click.json\nWhy did weekly active users drop?",
                 "print('after', _.status)") as page:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        options = page.locator(".agent-run-view .agent-prompt-option")
        options.first.wait_for(state="visible", timeout=RUN_TIMEOUT_MS)
        assert options.all_inner_texts() == ["Monday", "Sunday", HOSTILE], "a label is text, not HTML"
        assert page.locator(".agent-prompt img").count() == 0
        assert page.locator(".agent-prompt .agent-question strong").inner_text() == "week"
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-options.png"), full_page=False)
        options.nth(1).click()
        _output_with(page, "after completed")
        _no_stdin_box(page)
        final = page.locator(".agent-final")
        assert "start? → Sunday (user" in final.locator(".agent-state").inner_text()
        final.locator(".agent-transcript > summary").click()
        final.locator(".agent-tool > summary").first.click()
        assert "The user answered: Sunday" in final.inner_text()
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-clicked.png"), full_page=False)
        assert dialogs == [], "nothing in the question ran"


def test_an_interrupt_during_a_question_withdraws_it_and_the_run_and_the_next_cell_go_on(lab) -> None:
    script = {"turns": [ask("Which region first?", ["North", "South"]), sleep_call(3),
                        {"text": "Went on without an answer: all regions."}]}
    with running(lab, "stop", script, SETUP, "%%agent -m scripted/stop.json\nCompare the regions.",
                 "print('after', _.status)") as page:
        page.locator(".agent-run-view .agent-prompt-open").first.wait_for(state="visible",
                                                                           timeout=RUN_TIMEOUT_MS)
        page.evaluate("window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
        withdrawn = page.locator(".agent-run-view .agent-prompt-withdrawn").first
        withdrawn.wait_for(state="visible", timeout=10_000)
        assert "withdrawn: interrupted" in withdrawn.locator(".agent-prompt-note").inner_text()
        assert all(withdrawn.locator("button").nth(i).is_disabled() for i in range(3))
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-interrupted.png"), full_page=False)
        _output_with(page, "after completed")
        _no_stdin_box(page)
        final = page.locator(".agent-final")
        assert "Went on without an answer" in final.locator(".agent-answer").inner_text()
        assert "(withdrawn: interrupted)" in final.locator(".agent-state").inner_text()
