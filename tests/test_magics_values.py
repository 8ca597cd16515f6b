"""Spec (issue 12): push/pull and --in/--out in a real kernel carry every kind of the matrix exactly.

--in/--out go through the default worker sandbox: the notebook value is
copied into the cache, exported to the worker, saved back from there under a
new handle, and bound into the notebook.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kernel_helpers import Kernel, agent_kernel, answer, code_turn, script
from value_matrix import CASES

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    setup = textwrap.dedent(f"""\
        import sys, json
        sys.path.insert(0, {str(HERE)!r})
        from value_matrix import CASES, build, assert_identical
        names = sorted(CASES)
        def check(pairs):
            bad = []
            for case, value in pairs:
                try:
                    assert_identical(build(case), value)
                except Exception as exc:
                    bad.append(f"{{case}}: {{type(exc).__name__}}: {{str(exc)[:200]}}")
            return bad
    """)
    with agent_kernel(tmp_path_factory.mktemp("kernel"), setup, run_dir="runs", model="offline/quickstart") as k:
        yield k


def test_push_then_pull_carries_every_kind(kernel: Kernel) -> None:
    cell = kernel.run(textwrap.dedent("""\
        ip = get_ipython()
        for i, case in enumerate(names):
            globals()[f"v{i}"] = build(case)
            ip.run_line_magic("agent_push", f"v{i} h{i}")
            ip.run_line_magic("agent_pull", f"h{i} back{i}")
        print(json.dumps(check((case, globals()[f"back{i}"]) for i, case in enumerate(names))))
    """))
    assert cell.ok, cell.outputs
    assert json.loads(cell.stdout.strip().splitlines()[-1]) == []


def test_in_and_out_through_the_worker_carry_every_kind(kernel: Kernel) -> None:
    n = len(CASES)
    saves = "\n".join(f"save('r{i}', v{i})" for i in range(n))
    model = script(kernel, code_turn(saves), answer("Saved them back."))
    ins = " ".join(f"--in v{i}" for i in range(n))
    outs = " ".join(f"--out r{i}=out{i}" for i in range(n))
    kernel.run(textwrap.dedent("""\
        for i, case in enumerate(names):
            globals()[f"v{i}"] = build(case)
    """))
    cell = kernel.run(f"%%agent --reset {ins} {outs} {model}\nSend them back.")
    assert cell.ok, (cell.stderr[-3000:], cell.errors)
    check = kernel.run("print(json.dumps(check((case, globals()[f'out{i}']) for i, case in enumerate(names))))")
    assert check.ok, check.outputs
    assert json.loads(check.stdout.strip().splitlines()[-1]) == []
