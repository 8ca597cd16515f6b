"""``report results.json``: one self-contained HTML file (no scripts, no external assets).

Shows the pass rate with a 95 % Wilson interval, pass^k over repeats, the
harness's own metrics (:mod:`.metrics`) and the failure taxonomy with one example
each linked to its run log, a benchmark's own accuracy figures when the suite was
imported (:mod:`.dabench`, :mod:`.dabstep`), attempted writes, failure classes,
cost / tokens / time per task, and two inline SVG plots (pass rate per task, wall
time per task). Every value from the results file is HTML-escaped.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import quote

from harness_magic.core.text.counts import count
from harness_magic.evals.stats import pass_hat_k, wilson_interval

__all__ = ["render_report", "summarise", "benchmark_sections"]


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    """Headline figures of a results document."""
    results = data["results"]
    passed = sum(r["passed"] for r in results)
    low, high = wilson_interval(passed, len(results))
    repeat = max([r["repeat"] for r in results], default=0) + 1
    return {
        "attempts": len(results),
        "tasks": len({r["task_id"] for r in results}),
        "passed": passed,
        "pass_rate": passed / len(results) if results else 0.0,
        "ci95": (low, high),
        "pass_hat_k": {k: pass_hat_k(results, k) for k in range(1, repeat + 1)},
        "failures": dict(Counter(r.get("failure") for r in results if not r["passed"])),
        "cost": sum(r.get("cost", 0.0) for r in results),
        "tokens": sum(r.get("input_tokens", 0) + r.get("output_tokens", 0) for r in results),
        "cached_tokens": sum(r.get("cached_tokens", 0) for r in results),
        "wall_s": sum(r.get("wall_s", 0.0) for r in results),
    }


def _bars(rows: list[tuple[str, float, str]], title: str, fmt: str, maximum: float | None = None) -> str:
    """A horizontal bar chart as inline SVG; rows are (label, value, colour)."""
    width, left, bar_h = 640, 220, 14
    height = 30 + bar_h * len(rows) + 10
    top = maximum if maximum else max([v for _, v, _ in rows] + [1e-9])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}"><text x="4" y="16" font-size="13" font-weight="bold">'
             f'{html.escape(title)}</text>']
    for i, (label, value, colour) in enumerate(rows):
        y = 26 + i * bar_h
        w = max(0.0, (width - left - 70) * (value / top if top else 0))
        parts.append(f'<text x="{left - 6}" y="{y + 11}" font-size="11" text-anchor="end">{html.escape(label[:34])}</text>'
                     f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{bar_h - 4}" fill="{colour}"/>'
                     f'<text x="{left + w + 4:.1f}" y="{y + 11}" font-size="11">{html.escape(fmt.format(value))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _log_link(run_file: str, base: str | None) -> str:
    """A link to a run log, relative to the report's folder when that is known."""
    import os

    if not run_file:
        return ""
    href = os.path.relpath(run_file, base) if base else run_file
    href = "/".join(quote(part) for part in href.split(os.sep))
    return f'<a href="{html.escape(href)}">{html.escape(os.path.basename(run_file))}</a>'


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def benchmark_sections(results: list[dict[str, Any]]) -> str:
    """HTML: the accuracy figures as the benchmark's authors report them (empty when no benchmark grades)."""
    from harness_magic.evals import dabench, dabstep

    e = html.escape
    out = []
    figures = dabench.benchmark_figures(results)
    if figures:
        rows = "".join(f"<tr><td>{e(label)}</td><td>{_pct(figures[key])}</td></tr>" for label, key in (
            ("Accuracy by Question", "by_question"), ("Accuracy Proportional by Sub-Question", "proportional"),
            ("Accuracy by Sub-Question", "by_sub_question"),
            ("Accuracy for Questions with >= 2 Concepts", "two_or_more_concepts")))
        concepts = "".join(f"<tr><td>{e(name)}</td><td>{rate:.2%}</td><td>{ok}/{n}</td></tr>"
                           for name, (rate, ok, n) in figures["by_concept"].items())
        counts = "".join(f"<tr><td>{count(n, 'concept')}</td><td>{rate:.2%}</td><td>{ok}/{total}</td></tr>"
                         for n, (rate, ok, total) in figures["by_concept_count"].items())
        left_out = figures["questions"] - figures["answered"]
        out.append(f"<h2>InfiAgent-DABench accuracy</h2><p>{figures['answered']} of {figures['questions']} "
                   f"question attempts answered; as in the benchmark's evaluation, the {left_out} with an empty "
                   f"response are left out of these denominators (by question over all attempts: "
                   f"{_pct(figures['by_question_all'])}).</p><table><tr><th>figure</th><th>value</th></tr>{rows}"
                   f"</table><h3>By concept</h3><table><tr><th>concept</th><th>accuracy</th><th>questions</th></tr>"
                   f"{concepts}</table><h3>By number of concepts</h3><table><tr><th>concepts</th><th>accuracy</th>"
                   f"<th>questions</th></tr>{counts}</table>")
    figures = dabstep.benchmark_figures(results)
    if figures:
        rate, ok, n = figures["accuracy"]
        levels = "".join(f"<tr><td>{e(level)}</td><td>{r:.2%}</td><td>{k}/{t}</td></tr>"
                         for level, (r, k, t) in figures["by_level"].items())
        out.append(f"<h2>DABstep accuracy</h2><p>Accuracy {rate:.2%} ({ok}/{n} tasks; {figures['answered']} "
                   f"answered; no answer counts as wrong, as on the leaderboard).</p><table><tr><th>level</th>"
                   f"<th>accuracy</th><th>tasks</th></tr>{levels}</table>")
    return "".join(out)


def _metrics_section(data: dict[str, Any], base: str | None) -> str:
    from harness_magic.evals.metrics import harness_metrics, metric_lines

    e = html.escape
    metrics = harness_metrics(data)
    rows = "".join(f"<tr><td>{e(name)}</td><td>{e(value)}</td></tr>" for name, value in metric_lines(metrics))
    taxonomy = []
    for kind, row in metrics["taxonomy"].items():
        ex = row["example"]
        example = "" if ex is None else (
            f"{e(ex['task_id'])} r{ex['repeat']}{e(' ' + ex['variant'] if ex['variant'] else '')}: "
            f"{e(ex['detail'][:200])} {_log_link(ex['run_file'] or '', base)}")
        taxonomy.append(f"<tr><td>{e(kind)}</td><td>{row['count']}</td><td class=grades>{example}</td></tr>")
    writes = []
    for r in data["results"]:
        for a in r.get("write_attempts") or []:
            if isinstance(a, dict):
                writes.append(f"<tr><td>{e(r['task_id'])} r{r['repeat']}</td><td>{e(str(a.get('outcome')))}</td>"
                              f"<td>{e(str(a.get('tool')))}</td><td class=grades>{e(str(a.get('statement'))[:200])}"
                              f"</td><td class=log>{_log_link(r.get('run_file') or '', base)}</td></tr>")
    write_table = ("<h2>Attempted writes</h2><table><tr><th>attempt</th><th>outcome</th><th>tool</th>"
                   f"<th>statement</th><th>run log</th></tr>{''.join(writes)}</table>") if writes else ""
    return (f"<h2>Harness metrics</h2><table><tr><th>metric</th><th>value</th></tr>{rows}</table>"
            f"<h2>Failure taxonomy</h2><table><tr><th>kind</th><th>attempts</th><th>example (run log)</th></tr>"
            f"{''.join(taxonomy)}</table>{write_table}{_questions_table(data, base)}")


def _questions_table(data: dict[str, Any], base: str | None) -> str:
    """Each clarifying question an attempt asked, and each attempt that was expected to ask and did not."""
    e = html.escape
    rows = []
    for r in data["results"]:
        questions = [q for q in r.get("questions") or [] if isinstance(q, dict)]
        expected = {True: "yes", False: "no"}.get(r.get("clarification_expected"), "not declared")
        attempt = f"{e(r['task_id'])} r{r['repeat']}{e(' ' + r['variant'] if r.get('variant') else '')}"
        link = _log_link(r.get("run_file") or "", base)
        if not questions and r.get("clarification_expected") is True:
            rows.append(f"<tr><td>{attempt}</td><td>yes</td><td colspan=3>(asked none)</td><td class=log>{link}</td></tr>")
        for q in questions:
            answer = q.get("answer") or "(no answer)"
            rows.append(f"<tr><td>{attempt}</td><td>{expected}</td><td class=grades>{e(str(q.get('question'))[:300])}"
                        f"</td><td class=grades>{e(str(answer)[:300])}</td><td>{e(str(q.get('source')))}</td>"
                        f"<td class=log>{link}</td></tr>")
    if not rows:
        return ""
    return ("<h2>Clarifying questions</h2><table><tr><th>attempt</th><th>expected</th><th>question</th>"
            f"<th>answer</th><th>source</th><th>run log</th></tr>{''.join(rows)}</table>")


def render_report(data: dict[str, Any], title: str | None = None, base: str | None = None) -> str:
    """The HTML report of a results document (see :func:`~.stats.load_results`).

    ``base``: the folder the report will be written to; run-log links are made relative to it.
    """
    e = html.escape
    s = summarise(data)
    per_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in data["results"]:
        per_task[r["task_id"]].append(r)
    low, high = s["ci95"]
    title = title or f"Evaluation: {data.get('suite', '?')} with {data.get('model', '?')}"
    pass_k = ", ".join(f"pass^{k} = {v:.1%}" for k, v in s["pass_hat_k"].items() if v is not None)
    failures = "".join(f"<tr><td>{e(str(k))}</td><td>{v}</td></tr>" for k, v in
                       sorted(s["failures"].items(), key=lambda kv: -kv[1])) or "<tr><td colspan=2>none</td></tr>"
    rows = []
    for task_id, attempts in per_task.items():
        n = len(attempts)
        ok = sum(a["passed"] for a in attempts)
        classes = ", ".join(sorted({str(a.get("failure")) for a in attempts if not a["passed"]}))
        grades = "; ".join(f"{g['kind']}: {'ok' if g['passed'] else g['detail']}" for g in attempts[-1].get("grades", []))
        log = attempts[-1].get("run_file") or ""
        rows.append(
            f"<tr class=\"{'pass' if ok == n else 'fail'}\"><td>{e(task_id)}</td><td>{ok}/{n}</td><td>{e(classes)}</td>"
            f"<td>{sum(a.get('turns', 0) for a in attempts) / n:.1f}</td>"
            f"<td>{sum(a.get('input_tokens', 0) + a.get('output_tokens', 0) for a in attempts) / n:.0f}</td>"
            f"<td>{sum(a.get('cached_tokens', 0) for a in attempts) / n:.0f}</td>"
            f"<td>${sum(a.get('cost', 0.0) for a in attempts) / n:.4f}</td>"
            f"<td>{sum(a.get('wall_s', 0.0) for a in attempts) / n:.2f} s</td>"
            f"<td class=grades>{e(grades[:300])}</td><td class=log>{_log_link(log, base)}</td></tr>")
    rate_plot = _bars([(t, sum(a["passed"] for a in v) / len(v), "#2e7d32" if all(a["passed"] for a in v) else "#c62828")
                       for t, v in per_task.items()], "Pass rate per task", "{:.0%}", maximum=1.0)
    time_plot = _bars([(t, sum(a.get("wall_s", 0.0) for a in v) / len(v), "#1565c0") for t, v in per_task.items()],
                      "Mean wall time per task (s)", "{:.2f}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left}}tr.fail td:first-child{{color:#c62828}}
tr.pass td:first-child{{color:#2e7d32}}td.grades,td.log{{font-size:11px;color:#555;max-width:28em;word-break:break-all}}
.big{{font-size:22px;font-weight:bold}}</style></head><body>
<h1>{e(title)}</h1>
<p class=big>Pass rate {s['pass_rate']:.1%} ({s['passed']}/{s['attempts']} attempts, {s['tasks']} tasks);
95% Wilson interval [{low:.1%}, {high:.1%}]</p>
<p>{e(pass_k)} &middot; repeats {e(str(data.get('repeat', 1)))} &middot; jobs {e(str(data.get('jobs', 1)))}
&middot; total cost ${s['cost']:.4f} &middot; tokens {s['tokens']} (cached {s['cached_tokens']})
&middot; summed wall {s['wall_s']:.1f} s, run wall {float(data.get('wall_s', 0.0)):.1f} s &middot; {e(str(data.get('created', '')))}</p>
{_metrics_section(data, base)}{benchmark_sections(data["results"])}
<h2>Failure classes</h2><table><tr><th>class</th><th>attempts</th></tr>{failures}</table>
<h2>Plots</h2>{rate_plot}<br>{time_plot}
<h2>Tasks</h2><table><tr><th>task</th><th>passed</th><th>failure classes</th><th>turns</th><th>tokens</th>
<th>cached</th><th>cost</th><th>wall</th><th>grades (last attempt)</th><th>run log</th></tr>
{''.join(rows)}</table></body></html>
"""
