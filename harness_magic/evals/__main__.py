"""Command line: ``python -m harness_magic.evals run|report|compare|list|import``.

Exit status: 0 success; 1 ``run`` had an attempt that did not do what was
expected (a failed task, or with ``suite:`` models a script that did not get
its declared class), ``compare`` found B worse, or ``import`` skipped a question
or an input line; 2 a usage or file error (or ``import`` wrote no task).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness_magic.core.text.cli_args import positive_int
from harness_magic.evals.schema import SuiteError, load_suite


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness_magic.evals", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a suite (a directory or a built-in name such as 'core')")
    run.add_argument("suite")
    run.add_argument("--model", required=True, help="a model id (openai/..., offline/...) or suite:reference, suite:all-wrong, "
                                                    "suite:wrong, suite:<wrong-script-name>")
    run.add_argument("--repeat", type=positive_int, default=1)
    run.add_argument("--jobs", type=positive_int, default=1)
    run.add_argument("--out", default="results.json")
    run.add_argument("--runs-dir", default=None, help="where run logs go (default: <out>.runs/)")
    run.add_argument("--task", action="append", help="run only this task id (repeatable)")
    run.add_argument("--api-base", default=None)
    run.add_argument("--judge-model", default=None)
    run.add_argument("--sandbox", choices=("worker", "inprocess"), default="worker")
    run.add_argument("--no-stream", action="store_true", help="ask the provider for whole responses")
    run.add_argument("--quiet", action="store_true")
    report = sub.add_parser("report", help="write an HTML report of a results file")
    report.add_argument("results")
    report.add_argument("--out", default=None, help="default: the results path with .html")
    compare = sub.add_parser("compare", help="per-task diff; exit 1 when B is worse than A beyond noise")
    compare.add_argument("a")
    compare.add_argument("b")
    compare.add_argument("--alpha", type=float, default=0.05)
    compare.add_argument("--cost-tolerance", type=float, default=0.20)
    compare.add_argument("--time-tolerance", type=float, default=0.50)
    compare.add_argument("--min-time-delta", type=float, default=1.0)
    listing = sub.add_parser("list", help="list the tasks of a suite")
    listing.add_argument("suite")
    importing = sub.add_parser("import", help="write a suite from a public benchmark's published files")
    benchmarks = importing.add_subparsers(dest="benchmark", required=True)
    dabench = benchmarks.add_parser("dabench", help="InfiAgent-DABench: questions JSONL, labels JSONL, tables folder")
    dabench.add_argument("questions")
    dabench.add_argument("labels")
    dabench.add_argument("tables")
    dabench.add_argument("--out", required=True, help="the suite folder to write (new or empty)")
    dabstep = benchmarks.add_parser("dabstep", help="DABstep-style tasks JSONL and its context folder")
    dabstep.add_argument("tasks")
    dabstep.add_argument("context")
    dabstep.add_argument("--out", required=True, help="the suite folder to write (new or empty)")
    return parser


def _import(args: argparse.Namespace) -> int:
    from harness_magic.evals.importers import BenchmarkImportError

    try:
        if args.benchmark == "dabench":
            from harness_magic.evals.importers.dabench import import_dabench

            report = import_dabench(args.questions, args.labels, args.tables, args.out)
        else:
            from harness_magic.evals.importers.dabstep import import_dabstep

            report = import_dabstep(args.tasks, args.context, args.out)
    except BenchmarkImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    if not report.imported:
        print("error: no task was written", file=sys.stderr)
        return 2
    return 1 if report.skipped or report.problems else 0


def _run(args: argparse.Namespace) -> int:
    from harness_magic.evals.runner import run_suite

    suite = load_suite(args.suite)
    runs_dir = args.runs_dir or f"{args.out}.runs"
    options: dict[str, Any] = {"api_base": args.api_base, "judge_model": args.judge_model, "sandbox": args.sandbox,
                               "stream": not args.no_stream}
    if args.api_base:
        options["judge_options"] = {"api_base": args.api_base}

    def progress(result: Any, done: int, total: int) -> None:
        if not args.quiet:
            mark = "PASS" if result.passed else f"FAIL ({result.failure})"
            print(f"[{done}/{total}] {result.task_id} r{result.repeat}: {mark} {result.wall_s:.2f} s", flush=True)

    data = run_suite(suite, args.model, repeat=args.repeat, jobs=args.jobs, tasks=args.task, out_dir=runs_dir,
                     options=options, on_result=progress)
    Path(args.out).write_text(json.dumps(data, indent=1), encoding="utf-8")
    from harness_magic.evals.report import summarise

    s = summarise(data)
    unexpected = [r for r in data["results"] if not (
        r["passed"] if r.get("expect") is None else (not r["passed"] and r["failure"] == r["expect"]))]
    low, high = s["ci95"]
    print(f"{s['passed']}/{s['attempts']} passed ({s['pass_rate']:.1%}, 95% CI {low:.1%}-{high:.1%}); "
          f"wall {data['wall_s']:.1f} s; results in {args.out}")
    for r in unexpected:
        want = "pass" if r.get("expect") is None else f"fail as {r['expect']}"
        got = "passed" if r["passed"] else f"failed as {r['failure']}"
        print(f"  UNEXPECTED {r['task_id']} r{r['repeat']}: should {want}, {got}; "
              + "; ".join(g["detail"] for g in r["grades"] if not g["passed"])[:300]
              + (f" [{r['error']}]" if r.get("error") else ""))
    return 1 if unexpected else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "import":
            return _import(args)
        if args.command == "list":
            suite = load_suite(args.suite)
            for task in suite.tasks:
                print(f"{task.id:<32} {', '.join(task.tags):<28} {', '.join(k for k, _ in task.graders)}")
            return 0
        from harness_magic.evals.stats import load_results

        if args.command == "report":
            from harness_magic.evals.report import render_report

            data = load_results(args.results)
            out = args.out or os.path.splitext(args.results)[0] + ".html"
            Path(out).write_text(render_report(data, base=os.path.dirname(os.path.abspath(out))), encoding="utf-8")
            print(f"report written to {out}")
            return 0
        from harness_magic.evals.compare import GateOptions, compare_results, format_comparison

        options = GateOptions(alpha=args.alpha, cost_tolerance=args.cost_tolerance,
                              time_tolerance=args.time_tolerance, min_time_delta_s=args.min_time_delta)
        comparison = compare_results(load_results(args.a), load_results(args.b), options)
        print(format_comparison(comparison, os.path.basename(args.a), os.path.basename(args.b)))
        return 1 if comparison.worse else 0
    except (SuiteError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
