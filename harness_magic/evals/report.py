"""``report results.json``: one self-contained HTML file (no scripts, no external assets).

Shows the pass rate with a 95 % Wilson interval, pass^k over repeats, failure
classes, cost / tokens / time per task, and two inline SVG plots (pass rate per
task, wall time per task). Every value from the results file is HTML-escaped.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import quote

from harness_magic.evals.stats import pass_hat_k, wilson_interval

__all__ = ["render_report", "summarise"]


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
<h2>Failure classes</h2><table><tr><th>class</th><th>attempts</th></tr>{failures}</table>
<h2>Plots</h2>{rate_plot}<br>{time_plot}
<h2>Tasks</h2><table><tr><th>task</th><th>passed</th><th>failure classes</th><th>turns</th><th>tokens</th>
<th>cached</th><th>cost</th><th>wall</th><th>grades (last attempt)</th><th>run log</th></tr>
{''.join(rows)}</table></body></html>
"""
