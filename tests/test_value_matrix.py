"""Spec (issue 12): every kind of the value matrix crosses every boundary exactly, or is refused clearly.

Boundaries: spill, checkpoint loaded in a fresh process, worker in, worker
back, worker round trip, subagent copy and publish. (push/pull and --in/--out
in a real kernel: tests/test_magics_integration.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement

from value_matrix import CASES, DESCRIBE, PRELUDE, assert_identical, build, describe

HERE = Path(__file__).resolve().parent
confined = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")


def test_matrix_has_at_least_70_kinds() -> None:
    assert len(CASES) >= 70


@pytest.mark.parametrize("case", sorted(CASES))
def test_spill_carries_the_kind_exactly(case, tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        handle = cache.put("value", build(case))
        cache.put("newer", 0)
        assert cache.location(handle) == "disk"
        assert_identical(build(case), cache.get(handle))


def test_checkpoint_loaded_in_a_fresh_process_carries_every_kind(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        handles = {case: cache.put(case, build(case)) for case in CASES}
        cache.save(tmp_path / "ckpt")
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "from value_matrix import build, assert_identical, CASES\n"
        "from harness_magic.core.cache import SessionCache\n"
        f"handles = json.loads({json.dumps(json.dumps(handles))})\n"
        f"cache = SessionCache.load({str(tmp_path / 'ckpt')!r}, spill_dir={str(tmp_path / 'fresh')!r})\n"
        "bad = []\n"
        "for case, handle in handles.items():\n"
        "    try:\n"
        "        assert_identical(build(case), cache.get(handle))\n"
        "    except Exception as exc:\n"
        "        bad.append(f'{case}: {type(exc).__name__}: {str(exc)[:300]}')\n"
        "print(json.dumps(bad))\n"
    )
    # the fresh process never touched Period/Interval before reading: pandas registers them lazily
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_subagent_copy_and_publish_carry_the_kind_exactly(case, tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path / "parent") as parent, \
            SessionCache(hot_count=0, spill_dir=tmp_path / "child") as child:
        parent.put("value", build(case))
        copied = parent.copy_to(child, ["value"])["value"]
        child.put("other", 0)
        published = child.copy_to(parent, [copied])[copied]
        parent.put("other", 0)
        assert_identical(build(case), child.get(copied))
        assert_identical(build(case), parent.get(published))


@pytest.fixture(scope="module")
def sandbox():
    backend = SandboxedInterpreter(timeout=60.0)
    yield backend
    backend.close()


@confined
def test_worker_in_back_and_round_trip_carry_every_kind(sandbox) -> None:
    """One call per kind and direction; the failures are collected so one run shows them all."""
    bad = []
    for case in sorted(CASES):
        expected = build(case)
        # worker in: the worker's fingerprint of the input equals the kernel's
        result = sandbox.execute(DESCRIBE + "describe(v)", {"v": build(case)}, ["v"])
        if result.error is not None or result.value != describe(expected):
            bad.append(f"in {case}: {result.error or result.value}")
        # worker back: built inside the worker, saved, compared here
        result = sandbox.execute(PRELUDE + f"save('made', {CASES[case]})", {}, [])
        try:
            assert result.error is None, result.error
            assert_identical(expected, result.saved[0][1])
        except AssertionError as exc:
            bad.append(f"back {case}: {str(exc)[:300]}")
        # round trip: in, then saved back unchanged
        result = sandbox.execute("save('again', v)", {"v": build(case)}, ["v"])
        try:
            assert result.error is None, result.error
            assert_identical(expected, result.saved[0][1])
        except AssertionError as exc:
            bad.append(f"round trip {case}: {str(exc)[:300]}")
    assert bad == []
