"""The lean run log through the magics a person uses: %agent_replay, %agent_retry, %agent_diff and
%agent_export read old (version 1) and new logs alike, and a tampered log is a one-line usage error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

pytestmark = pytest.mark.kernel

from kernel_helpers import Kernel, agent_kernel, answer, code_turn, script, usage_error  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "lean_log"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    cwd = tmp_path_factory.mktemp("kernel")
    shutil.copytree(FIXTURES, cwd / "old")
    with agent_kernel(cwd, run_dir="runs", model="offline/quickstart") as k:
        yield k


def test_an_old_log_replays_retries_and_diffs_against_a_new_one_in_a_kernel(kernel: Kernel) -> None:
    replayed = kernel.run("%agent_replay old/v1_replay_run.jsonl")
    assert replayed.ok and "transcript identical to the recording" in replayed.stdout, replayed.outputs
    new_log = kernel.value("_.run_file")
    first = json.loads(Path(kernel.cwd, new_log).read_text().splitlines()[0])
    assert first["log_version"] == 3 and "log_version" not in (kernel.cwd / "old/v1_replay_run.jsonl").read_text()
    diff = kernel.run(f"d = %agent_diff old/v1_replay_run.jsonl {new_log}\n"
                      "print(sorted({c.op for c in d.calls}), d.answer_changed, d.a.messages == d.b.messages)")
    assert diff.ok and "['same'] False True" in diff.stdout, diff.outputs
    model = script(kernel, answer("Retried."))
    retried = kernel.run(f"%agent_retry --from-turn 4 --log old/v1_replay_run.jsonl {model}")
    assert retried.ok and kernel.value("_.text") == "Retried.", retried.outputs


def test_a_tampered_log_is_a_one_line_usage_error_naming_its_line(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('t', 1)"), answer("Fine."))
    assert kernel.run(f"%%agent --reset {model}\nA question.").ok
    log = Path(kernel.cwd, kernel.value("_.run_file"))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    turn = next(r for r in records if r["type"] == "turn" and r["turn"] == 2)
    turn["request"]["system_sha256"] = "0" * 64
    bad = kernel.cwd / "tampered.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in records))
    line = records.index(turn) + 1
    for magic in ("%agent_replay tampered.jsonl", f"%agent_diff tampered.jsonl {log}"):
        error = usage_error(kernel.run(magic))
        assert f"tampered.jsonl:{line}: malformed" in error and "refers to no system prompt" in error, error


def test_an_export_of_a_new_run_reads_back_with_the_same_transcript(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('e', [1, 2])"), answer("Exported."))
    assert kernel.run(f"%%agent --reset {model}\nExport me.").ok
    run_file = kernel.value("_.run_file")
    assert kernel.run("%agent_export out.jsonl").ok
    check = kernel.run("from harness_magic.core.transcript.log import reconstruct_transcript as r\n"
                       f"print(r('out.jsonl') == r({run_file!r}) == list(_.messages))")
    assert check.ok and check.stdout.strip().endswith("True"), check.outputs


def test_a_later_cells_log_refers_to_the_earlier_one_and_the_magics_read_it_alike(kernel: Kernel) -> None:
    first = script(kernel, code_turn("save('c1', 1)"), answer("First."))
    second = script(kernel, code_turn("save('c2', 2)"), answer("Second."))
    assert kernel.run(f"%%agent --reset {first}\nThe first cell.").ok
    earlier = Path(kernel.cwd, kernel.value("_.run_file"))
    assert kernel.run(f"%%agent {second}\nThe second cell.").ok
    later = Path(kernel.cwd, kernel.value("_.run_file"))
    start = json.loads(later.read_text().splitlines()[0])
    assert start["history_from"]["file"] == earlier.name and "The first cell." not in later.read_text()
    replayed = kernel.run(f"%agent_replay {later.relative_to(kernel.cwd)}")
    assert replayed.ok and "transcript identical to the recording" in replayed.stdout, replayed.outputs
    diff = kernel.run(f"d = %agent_diff {later.relative_to(kernel.cwd)} {kernel.value('_.run_file')}\n"
                      "print(sorted({c.op for c in d.calls}), d.answer_changed, d.a.messages == d.b.messages)")
    assert diff.ok and "['same'] False True" in diff.stdout, diff.outputs
    hidden = kernel.cwd / "moved.jsonl"
    earlier.rename(hidden)
    try:
        error = usage_error(kernel.run(f"%agent_replay {later.relative_to(kernel.cwd)}"))
        assert earlier.name in error and "missing" in error, error
    finally:
        hidden.rename(earlier)
