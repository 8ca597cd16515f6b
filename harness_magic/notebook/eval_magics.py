"""``%agent_eval SUITE [--model M] [--repeat N] [--jobs K]``: run an evaluation suite from a cell.

Glue only: the work is :func:`harness_magic.evals.runner.run_suite`'s. Progress
is one live bar over attempts with pass/fail as they finish (an ipywidgets bar,
or a display updated in place without ipywidgets); the cell's value is an :class:`EvalView` (summary and per-task table),
which also holds the results document (``view.data``) and writes the HTML
report (``view.save_report(path)``).
"""

from __future__ import annotations

import html
import json
from harness_magic.core.text.counts import count
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

__all__ = ["EvalMagics", "EvalView"]


class EvalView:
    """The outcome of ``%agent_eval``: summary, per-task rows, the results document."""

    def __init__(self, data: dict[str, Any]) -> None:
        from harness_magic.evals.report import summarise

        self.data = data
        self.summary = summarise(data)

    def save(self, path: str) -> Path:
        """Write the results document (the input of ``report`` and ``compare``)."""
        out = Path(path)
        out.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        return out

    def save_report(self, path: str) -> Path:
        from harness_magic.evals.report import render_report

        out = Path(path)
        out.write_text(render_report(self.data, base=str(out.resolve().parent)), encoding="utf-8")
        return out

    def _lines(self) -> list[tuple[str, str, str]]:
        rows = []
        for r in self.data["results"]:
            verdict = "PASS" if r["passed"] else f"FAIL ({r['failure']})"
            rows.append((f"{r['task_id']} r{r['repeat']}", verdict, f"{r['turns']} turns"))
        return rows

    def __repr__(self) -> str:
        s = self.summary
        low, high = s["ci95"]
        head = (f"{self.data['suite']} with {self.data['model']}: {s['passed']}/{s['attempts']} passed "
                f"({s['pass_rate']:.0%}, 95% CI {low:.0%}-{high:.0%})")
        return "\n".join([head] + [f"  {a:<36} {b:<24} {c}" for a, b, c in self._lines()])

    def _repr_html_(self) -> str:
        e = html.escape
        s = self.summary
        low, high = s["ci95"]
        rows = "".join(f"<tr><td>{e(a)}</td><td style='color:{'#2e7d32' if b == 'PASS' else '#c62828'}'>{e(b)}</td>"
                       f"<td>{e(c)}</td></tr>" for a, b, c in self._lines())
        return (f"<b>{e(self.data['suite'])} with {e(self.data['model'])}</b>: {s['passed']}/{s['attempts']} passed "
                f"({s['pass_rate']:.0%}, 95% CI {low:.0%}-{high:.0%})<table>{rows}</table>")


def _bar(done: int, total: int, passed: int, last: str) -> str:
    pct = 100 * done / total if total else 100
    return (f"<div style='font-family:monospace'>{done}/{count(total, 'attempt')}, {passed} passed "
            f"<div style='width:300px;background:#eee;height:10px'><div style='width:{pct:.0f}%;background:#1565c0;"
            f"height:10px'></div></div>{html.escape(last)}</div>")


def _progress(total: int) -> Any:
    """Show a progress bar; returns ``update(done, total, passed, last)``.

    With ipywidgets the bar is a widget updated through its traits (the cell's
    stored output stays the same as it first was); without, a display updated in place.
    """
    from IPython.display import HTML, display

    try:
        import ipywidgets as widgets
    except ImportError:
        handle = display(HTML(_bar(0, total, 0, "")), display_id=True)

        def update_display(done: int, total_: int, passed: int, last: str) -> None:
            if handle is not None:
                handle.update(HTML(_bar(done, total_, passed, last)))

        return update_display
    bar = widgets.IntProgress(value=0, min=0, max=max(total, 1), description="tasks")
    label = widgets.HTML(value=f"0/{total}")
    finished = widgets.HTML(value="")
    display(widgets.VBox([widgets.HBox([bar, label]), finished]))
    lines: list[str] = []

    def update_widget(done: int, total_: int, passed: int, last: str) -> None:
        bar.value = done
        bar.bar_style = "success" if passed == done else "warning"
        label.value = html.escape(f"{done}/{total_} done, {passed} passed; last: {last}")
        colour = "#2e7d32" if last.endswith("PASS") else "#c62828"
        lines.append(f"<span style='color:{colour}'>{html.escape(last)}</span>")
        finished.value = "<div style='font-family:monospace;font-size:12px'>" + "<br>".join(lines) + "</div>"

    return update_widget


@magics_class
class EvalMagics(Magics):
    """``%agent_eval`` next to the ``%%agent`` magics (their model and sandbox are the defaults)."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    @no_var_expand
    @magic_arguments()
    @argument("suite", help="A suite directory or a built-in suite name (core).")
    @argument("--model", "-m", default=None, help="Model id (default: %%agent's model); suite:reference runs "
                                                      "each task's reference script.")
    @argument("--repeat", type=int, default=1, help="Attempts per task.")
    @argument("--jobs", type=int, default=1, help="Attempts run in parallel.")
    @argument("--task", action="append", default=None, help="Only this task id (repeatable).")
    @argument("--out", default=None, help="Also write the results document to this JSON file.")
    @argument("--runs-dir", default="./eval_runs", help="Where the run logs go.")
    @line_magic
    def agent_eval(self, line: str) -> EvalView:
        """Run an evaluation suite, one fresh session per task, with live progress."""
        from harness_magic.evals.runner import ALL_WRONG, MAX_JOBS, SUITE_MODEL_PREFIX, run_suite
        from harness_magic.evals.schema import SuiteError, load_suite

        args = parse_argstring(self.agent_eval, line)
        if args.repeat < 1:
            raise UsageError(f"%agent_eval: --repeat must be at least 1, got {args.repeat}")
        if not 1 <= args.jobs <= MAX_JOBS:
            raise UsageError(f"%agent_eval: --jobs must be from 1 to {MAX_JOBS}, got {args.jobs}")
        model: str = args.model or self._agent.model  # AgentMagics.model: a str setting, always set
        try:
            suite = load_suite(args.suite)
            tasks = suite.select(args.task)
            if model.startswith(SUITE_MODEL_PREFIX) and model != ALL_WRONG:
                for task in tasks:  # every task has the script, before anything is shown
                    task.script(model[len(SUITE_MODEL_PREFIX):])
            total = args.repeat * (sum(len(t.wrong) for t in tasks) if model == ALL_WRONG else len(tasks))
        except SuiteError as exc:
            raise UsageError(f"%agent_eval: {exc}") from None
        options = {"sandbox": getattr(self._agent, "sandbox", "worker"),
                   "api_base": getattr(self._agent, "api_base", None) or None}
        update = _progress(total)
        passed = [0]

        def progress(result: Any, done: int, total_: int) -> None:
            passed[0] += result.passed
            mark = "PASS" if result.passed else f"FAIL ({result.failure})"
            update(done, total_, passed[0], f"{result.task_id} r{result.repeat}: {mark}")

        try:
            data = run_suite(suite, model, repeat=args.repeat, jobs=args.jobs, tasks=args.task, out_dir=args.runs_dir,
                             options=options, on_result=progress)
        except (SuiteError, ValueError) as exc:
            raise UsageError(f"%agent_eval: {exc}") from None
        view = EvalView(data)
        if args.out:
            view.save(args.out)
        return view

