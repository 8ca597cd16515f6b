"""``compare A.json B.json``: per-task diff and the regression gate.

B is *worse* than A (exit status 1) when any of these holds:

* **pass rate**: attempts are paired by (task, repeat, variant); with ``b`` pairs where A
  passed and B failed and ``c`` the other way round, the exact one-sided McNemar
  test gives p = P(X >= b), X ~ Binomial(b + c, 1/2). B is worse when
  p < ``alpha`` (0.05). A paired test: the same tasks on both sides, so task
  difficulty cancels out; a single flipped task (p = 0.5) is noise.
* **cost**: mean cost per paired attempt of B exceeds A's by more than
  ``cost_tolerance`` (20 %) *and* by more than ``min_cost_delta`` (USD 0.0001).
* **time**: mean wall time per paired attempt of B exceeds A's by more than
  ``time_tolerance`` (50 %) *and* by more than ``min_time_delta_s`` (1 s) —
  wall time on a shared machine is noisy, hence the wide margin.
* **coverage**: a task A has is missing from B.

Beside the gate, the comparison shows the harness's own metrics for A and B
(:mod:`.metrics`: completion, verification, clarification, write prevention, time
to a correct answer, grounding, the failure taxonomy) and, for imported
benchmarks, the benchmark's own accuracy figures. They inform; they do not gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness_magic.core.text.counts import count
from harness_magic.evals.stats import mcnemar_one_sided

__all__ = ["GateOptions", "Comparison", "compare_results", "format_comparison", "benchmark_lines"]


@dataclass
class GateOptions:
    alpha: float = 0.05
    cost_tolerance: float = 0.20
    min_cost_delta: float = 0.0001
    time_tolerance: float = 0.50
    min_time_delta_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be between 0 and 1, got {self.alpha!r}")
        for name in ("cost_tolerance", "min_cost_delta", "time_tolerance", "min_time_delta_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass
class Comparison:
    rows: list[dict[str, Any]] = field(default_factory=list)
    b_worse_pairs: int = 0
    b_better_pairs: int = 0
    p_value: float = 1.0
    pass_rate_a: float = 0.0
    pass_rate_b: float = 0.0
    cost_a: float = 0.0
    cost_b: float = 0.0
    wall_a: float = 0.0
    wall_b: float = 0.0
    missing_in_b: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    metrics_a: dict[str, Any] = field(default_factory=dict)
    """:func:`~harness_magic.evals.metrics.harness_metrics` of A."""
    metrics_b: dict[str, Any] = field(default_factory=dict)
    benchmark_a: list[tuple[str, str]] = field(default_factory=list)
    """(figure, value) of the benchmark's own accuracy figures for A (imported suites)."""
    benchmark_b: list[tuple[str, str]] = field(default_factory=list)

    @property
    def worse(self) -> bool:
        return bool(self.reasons)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def benchmark_lines(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(figure, value) rows of the benchmark accuracy figures (DABench, DABstep) found in ``results``."""
    from harness_magic.evals import dabench, dabstep

    rows: list[tuple[str, str]] = []
    figures = dabench.benchmark_figures(results)
    if figures:
        for label, key in (("DABench accuracy by question", "by_question"),
                           ("DABench accuracy proportional by sub-question", "proportional"),
                           ("DABench accuracy by sub-question", "by_sub_question")):
            rows.append((label, "n/a" if figures[key] is None else f"{figures[key]:.2%}"))
        rows += [(f"DABench concept {name}", f"{rate:.2%} ({ok}/{n})")
                 for name, (rate, ok, n) in figures["by_concept"].items()]
    figures = dabstep.benchmark_figures(results)
    if figures:
        rate, ok, n = figures["accuracy"]
        rows.append(("DABstep accuracy", f"{rate:.2%} ({ok}/{n})"))
        rows += [(f"DABstep {level}", f"{r:.2%} ({k}/{t})") for level, (r, k, t) in figures["by_level"].items()]
    return rows


def compare_results(a: dict[str, Any], b: dict[str, Any], options: GateOptions | None = None) -> Comparison:
    from harness_magic.evals.metrics import harness_metrics

    options = options or GateOptions()
    index_a = {(r["task_id"], r["repeat"], r.get("variant", "")): r for r in a["results"]}
    index_b = {(r["task_id"], r["repeat"], r.get("variant", "")): r for r in b["results"]}
    pairs = sorted(set(index_a) & set(index_b))
    out = Comparison()
    out.missing_in_b = sorted({k[0] for k in index_a} - {k[0] for k in index_b})
    per_task: dict[str, dict[str, Any]] = {}
    for key in pairs:
        ra, rb = index_a[key], index_b[key]
        if ra["passed"] and not rb["passed"]:
            out.b_worse_pairs += 1
        elif rb["passed"] and not ra["passed"]:
            out.b_better_pairs += 1
        row = per_task.setdefault(key[0], {"task_id": key[0], "a_pass": 0, "b_pass": 0, "n": 0, "a_cost": 0.0,
                                           "b_cost": 0.0, "a_wall": 0.0, "b_wall": 0.0, "b_failures": []})
        row["n"] += 1
        row["a_pass"] += ra["passed"]
        row["b_pass"] += rb["passed"]
        row["a_cost"] += ra.get("cost", 0.0)
        row["b_cost"] += rb.get("cost", 0.0)
        row["a_wall"] += ra.get("wall_s", 0.0)
        row["b_wall"] += rb.get("wall_s", 0.0)
        if not rb["passed"] and rb.get("failure"):
            row["b_failures"].append(rb["failure"])
    out.rows = list(per_task.values())
    out.metrics_a, out.metrics_b = harness_metrics(a), harness_metrics(b)
    out.benchmark_a, out.benchmark_b = benchmark_lines(a["results"]), benchmark_lines(b["results"])
    out.p_value = mcnemar_one_sided(out.b_worse_pairs, out.b_better_pairs)
    n = len(pairs)
    out.pass_rate_a = _mean([float(index_a[k]["passed"]) for k in pairs])
    out.pass_rate_b = _mean([float(index_b[k]["passed"]) for k in pairs])
    out.cost_a = _mean([index_a[k].get("cost", 0.0) for k in pairs])
    out.cost_b = _mean([index_b[k].get("cost", 0.0) for k in pairs])
    out.wall_a = _mean([index_a[k].get("wall_s", 0.0) for k in pairs])
    out.wall_b = _mean([index_b[k].get("wall_s", 0.0) for k in pairs])
    if n == 0:
        variants = sorted(({k[2] for k in index_a} ^ {k[2] for k in index_b}) - {""})
        hint = (f"; attempts pair by task, repeat and variant, and only one file has variants "
                f"({', '.join(variants[:5])}{', ...' if len(variants) > 5 else ''}: a suite:all-wrong run; "
                "compare it with another suite:all-wrong run)") if variants else ""
        out.reasons.append(f"no task attempt is in both files{hint}")
    if out.p_value < options.alpha:
        out.reasons.append(f"pass rate: {count(out.b_worse_pairs, 'attempt')} regressed vs {out.b_better_pairs} improved, "
                           f"one-sided exact McNemar p={out.p_value:.4g} < alpha={options.alpha}")
    if out.cost_b > out.cost_a * (1 + options.cost_tolerance) and out.cost_b - out.cost_a > options.min_cost_delta:
        out.reasons.append(f"cost: ${out.cost_b:.4f} vs ${out.cost_a:.4f} per attempt "
                           f"(more than +{options.cost_tolerance:.0%} and +${options.min_cost_delta})")
    if out.wall_b > out.wall_a * (1 + options.time_tolerance) and out.wall_b - out.wall_a > options.min_time_delta_s:
        out.reasons.append(f"time: {out.wall_b:.2f} s vs {out.wall_a:.2f} s per attempt "
                           f"(more than +{options.time_tolerance:.0%} and +{options.min_time_delta_s} s)")
    if out.missing_in_b:
        out.reasons.append(f"coverage: B has no result for {', '.join(out.missing_in_b[:10])}")
    return out


def format_comparison(comp: Comparison, name_a: str = "A", name_b: str = "B") -> str:
    lines = [f"{'task':<32} {name_a[:12]:>12} {name_b[:12]:>12}  change"]
    for row in sorted(comp.rows, key=lambda r: (r["b_pass"] - r["a_pass"], r["task_id"])):
        change = row["b_pass"] - row["a_pass"]
        mark = "REGRESSED" if change < 0 else ("improved" if change > 0 else "")
        fails = f" ({', '.join(sorted(set(row['b_failures'])))})" if change < 0 and row["b_failures"] else ""
        lines.append(f"{row['task_id']:<32} {row['a_pass']:>7}/{row['n']:<4} {row['b_pass']:>7}/{row['n']:<4}  "
                     f"{mark}{fails}")
    lines.append("")
    lines.append(f"pass rate {comp.pass_rate_a:.1%} -> {comp.pass_rate_b:.1%}; regressed pairs {comp.b_worse_pairs}, "
                 f"improved {comp.b_better_pairs}; one-sided exact McNemar p={comp.p_value:.4g}")
    lines.append(f"cost/attempt ${comp.cost_a:.4f} -> ${comp.cost_b:.4f}; wall/attempt {comp.wall_a:.2f} s -> "
                 f"{comp.wall_b:.2f} s")
    if comp.metrics_a and comp.metrics_b:
        from harness_magic.evals.metrics import metric_lines

        lines.append("")
        lines.append(f"{'metric':<58} {name_a[:26]:<26} {name_b[:26]}")
        for (metric, va), (_, vb) in zip(metric_lines(comp.metrics_a), metric_lines(comp.metrics_b)):
            lines.append(f"{metric:<58} {va:<26} {vb}")
        counts = [(kind, comp.metrics_a["taxonomy"][kind]["count"], comp.metrics_b["taxonomy"][kind]["count"])
                  for kind in comp.metrics_a["taxonomy"]]
        lines.append("failure taxonomy (attempts): " + ", ".join(f"{k} {x} -> {y}" for k, x, y in counts if x or y)
                     if any(x or y for _, x, y in counts) else "failure taxonomy: no failed attempt on either side")
    bench_b = dict(comp.benchmark_b)
    for figure, va in comp.benchmark_a:
        lines.append(f"{figure:<58} {va:<26} {bench_b.get(figure, 'n/a')}")
    if comp.worse:
        lines.append("GATE: FAIL — B is worse than A:")
        lines.extend(f"  - {reason}" for reason in comp.reasons)
    else:
        lines.append("GATE: PASS — B is not worse than A beyond noise")
    return "\n".join(lines)
