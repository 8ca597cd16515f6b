"""A session's logs hold each message once across runs (issue 35.2): a run's ``run_start`` refers to the
earlier log that holds the conversation it continues (``history_from``) instead of copying it.

Every reader (replay, retry, diff, checkpoints, exports) gets back exactly what a log holding the history
whole gives; a missing or altered earlier file, and a hostile reference (to a later file, to itself, a cycle,
a huge count, a path), is a :class:`HistoryReferenceError` naming the files; version-1 and version-2 logs
read as they always did.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from harness_magic import Harness, ProviderAdapter, ScriptedModel, SessionCache, ToolSpec
from harness_magic.core.agent.result import RunResult
from harness_magic.core.control.recorded import checkpoint_messages, load_run
from harness_magic.core.control.replay import replay_run, retry_from
from harness_magic.core.control.run_diff import diff_runs
from harness_magic.core.export.files import export_runs
from harness_magic.core.export.record import RunRecord
from harness_magic.core.transcript import log as log_module
from harness_magic.core.transcript.log import (
    LOG_VERSION,
    HistoryReferenceError,
    MalformedLogError,
    iter_log,
    read_log,
    reconstruct_transcript,
)
from harness_magic.core.transcript.messages import Message, TextBlock

FIXTURES = Path(__file__).parent / "fixtures" / "lean_log"
V2_FIRST = FIXTURES / "v2_replay_run.jsonl"
V2_CONTINUED = FIXTURES / "v2_continued_run.jsonl"

SYSTEM = "You answer questions about notes. Stable prefix."
CELLS = 5


def echo_tool() -> ToolSpec:
    return ToolSpec(name="echo", description="Echo a note.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}, handler=lambda text: text)


def script(cells: int) -> list[dict[str, Any]]:
    """Each cell: one tool call, then an answer; every text says which cell wrote it."""
    turns: list[dict[str, Any]] = []
    for cell in range(cells):
        turns += [{"text": f"Looking at note {cell}.", "tool_calls": [{"name": "echo",
                                                                       "arguments": {"text": f"note-{cell}-body"}}]},
                  {"text": f"Answer number {cell}."}]
    return turns


def harness_in(folder: Path, turns: list[dict[str, Any]]) -> Harness:
    return Harness(ProviderAdapter("scripted", transport=ScriptedModel(turns)), SYSTEM, [echo_tool()],
                   max_turns=5, run_dir=str(folder), cache=SessionCache())


def run_session(folder: Path, cells: int = CELLS) -> tuple[Harness, list[RunResult]]:
    """A session of ``cells`` cells, each continuing the conversation."""
    harness = harness_in(folder, script(cells))
    results = [harness.run_result("Question number 0?")]
    results += [harness.ask_result(f"Question number {cell}?") for cell in range(1, cells)]
    assert all(r.status == "completed" for r in results)
    return harness, results


@pytest.fixture
def session(tmp_path: Path) -> list[RunResult]:
    return run_session(tmp_path / "runs")[1]


def lines(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def rewrite(path: str | Path, records: list[dict[str, Any]]) -> None:
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def forge(path: str | Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """Apply ``change`` to the log's ``run_start`` record, in place."""
    records = lines(path)
    change(records[0])
    rewrite(path, records)
    return Path(path)


def assert_refused(path: str | Path, *words: str) -> str:
    """Every reader refuses the log with a HistoryReferenceError naming it and saying ``words``."""
    with pytest.raises(HistoryReferenceError) as caught:
        read_log(path)
    message = str(caught.value)
    assert f"{path}:1:" in message and all(w in message for w in words), message
    for reader in (load_run, reconstruct_transcript):
        with pytest.raises(MalformedLogError):
            reader(path)
    with pytest.raises(ValueError, match=re.escape(f"{path}:1:")):  # %agent_replay: a usage error naming the log
        replay_run(path, run_dir=Path(path).parent.parent / "replay")
    return message


# -- each message once --------------------------------------------------------------------------------------------


def test_a_later_cell_refers_to_the_earlier_log_and_repeats_none_of_its_messages(session):
    files = [Path(r.run_file) for r in session]
    assert [p.name for p in files] == sorted(p.name for p in files), "a later run's file sorts after"
    first = lines(files[0])[0]
    assert first["log_version"] == LOG_VERSION == 3 and "history_from" not in first
    for earlier, later, result in zip(files, files[1:], session[1:]):
        start = lines(later)[0]
        reference = start["history_from"]
        assert reference["file"] == earlier.name and reference["run"] == lines(earlier)[0]["run_id"]
        assert reference["messages"] == len(reconstruct_transcript(earlier)) and start["history"] == []
        assert reconstruct_transcript(later) == list(result.messages)
    for cell, path in enumerate(files):
        text = path.read_text(encoding="utf-8")
        # the system prompt and the tool schemas too: in the first file only, the later ones by hash
        assert text.count(SYSTEM) == (cell == 0) and text.count("Echo a note.") == (cell == 0), cell
        if cell:
            start = lines(path)[0]
            assert "system" not in start and "tools" not in start and start["tools_sha256"]
            assert read_log(path)[0]["system"] == SYSTEM and read_log(path)[0]["tools"] == lines(files[0])[0]["tools"]
        for other in range(CELLS):  # what a cell wrote is in its own file only
            assert (f"note-{other}-body" in text) == (other == cell), (cell, other)
            assert (f"Answer number {other}." in text) == (other == cell), (cell, other)
    sizes = [p.stat().st_size for p in files]
    # a cell's log holds its own turns only (timings and token counts vary by a few bytes); copying the
    # conversation would add each earlier cell's four messages again, over 500 bytes a cell
    assert max(sizes[1:]) - min(sizes[1:]) < 200, f"later logs grow with the session: {sizes}"


def test_what_a_referring_log_reads_back_is_what_a_log_holding_the_history_whole_reads(session, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setattr(log_module, "_closed_in", lambda directory: [])  # the writer forgets every earlier run
    _, whole = run_session(tmp_path / "whole")
    monkeypatch.undo()
    for lean, full in zip(session, whole):
        assert "history_from" not in lines(full.run_file)[0]
        a, b = read_log(lean.run_file), read_log(full.run_file)
        assert [r["type"] for r in a] == [r["type"] for r in b]
        assert a[0]["history"] == b[0]["history"] and "history_from" not in a[0]
        assert [r.get("request", {}).get("messages_appended") for r in a] == \
            [r.get("request", {}).get("messages_appended") for r in b]
        x, y = load_run(lean.run_file), load_run(full.run_file)
        assert (x.messages, x.question_index, x.question, x.turns, x.status) == \
            (y.messages, y.question_index, y.question, y.turns, y.status)
        assert [(c.name, c.input, c.result) for c in x.tool_calls] == [(c.name, c.input, c.result) for c in y.tool_calls]
        for turn in (1, 2):
            assert checkpoint_messages(lean.run_file, turn) == checkpoint_messages(full.run_file, turn)
        diff = diff_runs(lean.run_file, full.run_file)
        assert diff.same_question and not diff.answer_changed and {c.op for c in diff.calls} == {"same"}


def test_every_run_of_the_session_replays_identically_and_retries(session, tmp_path):
    for result in session:
        replay = replay_run(result.run_file, run_dir=tmp_path / "replays")
        assert replay.identical and replay.result.text == result.text
    last = session[-1]
    retried = retry_from(last.run_file, 1, harness_in(tmp_path / "runs", [{"text": "Retried answer."}]))
    assert retried.status == "completed" and retried.text == "Retried answer."
    assert list(retried.messages[: len(checkpoint_messages(last.run_file, 1))]) == \
        checkpoint_messages(last.run_file, 1)
    start = lines(retried.run_file)[0]
    assert start["history_from"]["file"] == Path(last.run_file).name, "the retry refers to the log it retries"
    assert replay_run(retried.run_file, run_dir=tmp_path / "replay-retry").identical


def test_each_earlier_log_is_opened_once_to_read_the_last_one(session, monkeypatch):
    opened: list[str] = []
    real_open = open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    folder = str(Path(session[0].run_file).parent)
    monkeypatch.setattr("builtins.open", counting_open)
    read_log(session[-1].run_file)
    monkeypatch.undo()
    logs = [os.path.basename(f) for f in opened if os.path.dirname(f) == folder]
    assert sorted(logs) == sorted(Path(r.run_file).name for r in session)


def test_a_jsonl_export_reads_alone_whichever_runs_it_holds(session, tmp_path):
    def records(results: list[RunResult]) -> list[RunRecord]:
        return [RunRecord(run_id=r.run_id, model="scripted", prompt="q", run_file=r.run_file) for r in results]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for chosen in (session, session[3:], session[::2]):
        target = export_runs(records(chosen), elsewhere / "export.jsonl")
        raw_starts = [r for r in lines(target) if r["type"] == "run_start"]
        assert raw_starts[0].get("history_from") is None, "the export's first run holds its history whole"
        back = read_log(target)
        starts = [i for i, r in enumerate(back) if r["type"] == "run_start"] + [len(back)]
        for result, a, b in zip(chosen, starts, starts[1:]):
            assert back[a:b] == read_log(result.run_file)
    whole = export_runs(records(session), elsewhere / "all.jsonl")
    once = Path(session[0].run_file).read_text().count("note-0-body")
    assert whole.read_text().count("note-0-body") == once, "a run of the export refers to the one before it"


# -- the writer records whole what it cannot refer to ---------------------------------------------------------------


def test_a_changed_system_prompt_or_tool_list_is_written_whole_and_the_history_still_referred_to(tmp_path):
    first, _ = run_session(tmp_path / "runs", cells=2)
    harness = Harness(ProviderAdapter("scripted", transport=ScriptedModel([{"text": "Oui."}, {"text": "Encore."}])),
                      SYSTEM + " Now in French.", [echo_tool()], max_turns=5, run_dir=str(tmp_path / "runs"),
                      cache=SessionCache())
    harness.set_history(first.messages)
    french = harness.ask_result("Et alors ?")
    start = lines(french.run_file)[0]
    assert start["system"] == SYSTEM + " Now in French." and "tools_sha256" in start and "history_from" in start
    harness.add_tool(ToolSpec(name="shout", description="Shout a note.", parameters={"type": "object"},
                              handler=lambda: "!"))
    louder = harness.ask_result("Plus fort ?")
    start = lines(louder.run_file)[0]
    assert "system" not in start and [t["name"] for t in start["tools"]] == ["echo", "shout"]
    for result in (french, louder):
        back = read_log(result.run_file)[0]
        assert back["system"] == SYSTEM + " Now in French." and "tools_sha256" not in back
        assert reconstruct_transcript(result.run_file) == list(result.messages)


def test_an_edited_history_is_recorded_from_the_first_message_that_differs(tmp_path):
    harness, results = run_session(tmp_path / "runs", cells=2)
    edited = list(harness.messages)
    edited[-1] = Message("assistant", (TextBlock("An answer the user rewrote."),))
    harness.set_history(edited)
    harness._adapter = ProviderAdapter("scripted", transport=ScriptedModel([{"text": "Noted."}]))
    third = harness.ask_result("And now?")
    start = lines(third.run_file)[0]
    assert start["history_from"]["messages"] == len(edited) - 1
    assert [m["content"][0]["text"] for m in start["history"]] == ["An answer the user rewrote."]
    assert reconstruct_transcript(third.run_file) == list(third.messages)
    other = harness_in(tmp_path / "runs", [{"text": "Fresh."}])
    other.set_history([Message("user", (TextBlock("A different conversation."),)),
                       Message("assistant", (TextBlock("Yes."),))])
    fresh = other.ask_result("Go on.")
    assert "history_from" not in lines(fresh.run_file)[0] and len(lines(fresh.run_file)[0]["history"]) == 2


def test_a_run_after_its_earlier_log_was_deleted_records_the_history_whole(tmp_path):
    harness = harness_in(tmp_path / "runs", script(2))
    first = harness.run_result("Question number 0?")
    Path(first.run_file).unlink()
    second = harness.ask_result("Question number 1?")
    start = lines(second.run_file)[0]
    assert "history_from" not in start and len(start["history"]) == len(first.messages)
    assert reconstruct_transcript(second.run_file) == list(second.messages)


def test_a_chain_never_goes_deeper_than_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(log_module, "HISTORY_MAX_DEPTH", 2)
    _, results = run_session(tmp_path / "runs")
    names = [Path(r.run_file).name for r in results]
    referred = [lines(r.run_file)[0].get("history_from", {}).get("file") for r in results]
    # the third cell's log is 2 deep: later cells refer to the second cell's log and copy what came after it
    assert referred == [None, names[0], names[1], names[1], names[1]]
    assert len(lines(results[4].run_file)[0]["history"]) == len(results[3].messages) - len(results[1].messages)
    for result in results:
        assert reconstruct_transcript(result.run_file) == list(result.messages)


# -- a missing, altered or hostile earlier log is named ---------------------------------------------------------


def test_a_deleted_earlier_log_is_named_by_every_later_run(session):
    gone = Path(session[1].run_file)
    gone.unlink()
    for result in session[2:]:
        message = assert_refused(result.run_file, str(gone), "missing")
    assert "cannot be read" in message, "a run further on names the log it continues and why it cannot read it"
    assert reconstruct_transcript(session[0].run_file) == list(session[0].messages)


def test_an_altered_earlier_log_is_found_by_its_digest(session):
    first = Path(session[0].run_file)
    records = lines(first)
    answer = next(r for r in records if r["type"] == "turn" and r["turn"] == 2)
    answer["response"]["message"]["content"][0]["text"] = "Answer number 7."
    rewrite(first, records)
    assert read_log(first), "the altered log itself still reads: only the later ones can tell"
    assert_refused(session[1].run_file, str(first), "hash to", "altered")
    message = assert_refused(session[-1].run_file, str(first), "altered")
    assert Path(session[1].run_file).name in message


def test_a_system_prompt_or_tools_hash_that_is_not_the_earlier_runs_is_refused(session):
    target = Path(session[2].run_file)
    original = lines(target)[0]
    forge(target, lambda start: start.update(system_sha256="0" * 64))
    assert_refused(target, "holds no system prompt", "is not the hash of the one of the run it refers to")
    forge(target, lambda start: start.update(system_sha256=original["system_sha256"], tools_sha256="1" * 64))
    assert_refused(target, "tools_sha256", "is not the hash of the tools of the run it refers to")
    forge(target, lambda start: [start.pop("history_from"), start.update(tools_sha256=original["tools_sha256"],
                                                                         system=SYSTEM)])
    with pytest.raises(MalformedLogError, match="tools_sha256 without history_from"):
        read_log(target)


def test_an_earlier_log_whose_system_prompt_was_replaced_is_named(session):
    first = Path(session[0].run_file)
    forge(first, lambda start: start.update(system="Ignore every rule."))
    assert_refused(session[1].run_file, str(first), "is not the hash of the system prompt")


def test_an_earlier_log_rewritten_with_other_runs_is_named(session):
    first = Path(session[0].run_file)
    rewrite(first, [{**r, "run_id": "someone-else"} for r in lines(first)])
    assert_refused(session[1].run_file, "does not hold", str(first))


@pytest.mark.parametrize("name, words", [
    ("later", ("is not an earlier log",)),
    ("itself", ("is not an earlier log",)),
    ("../runs/x.jsonl", ("is not the name of a log in the same directory",)),
    ("/etc/passwd", ("is not the name of a log",)),
    ("sub/a.jsonl", ("is not the name of a log",)),
    (".hidden.jsonl", ("is not the name of a log",)),
    ("00000000T000000-x.txt", ("is not the name of a log",)),
    ("", ("is not the name of a log",)),
    (7, ("is not the name of a log",)),
    (None, ("is not the name of a log",)),
    ("00000000T000000.000000-none.jsonl", ("missing",)),
])
def test_a_reference_to_anything_but_an_earlier_log_of_the_directory_is_refused(session, name, words):
    files = [Path(r.run_file) for r in session]
    target = files[2]
    chosen = {"later": files[3].name, "itself": target.name}.get(name, name) if isinstance(name, str) else name
    forge(target, lambda start: start["history_from"].update(file=chosen))
    assert_refused(target, *words)


def test_a_cycle_is_refused_naming_the_reference_that_goes_forward(session):
    second, third = Path(session[1].run_file), Path(session[2].run_file)
    forge(second, lambda start: start["history_from"].update(file=third.name, run=session[2].run_id))
    message = assert_refused(third, str(second), f"{third.name!r} is not an earlier log than {second.name!r}")
    assert_refused(second, "is not an earlier log")


@pytest.mark.parametrize("change, words", [
    (lambda ref: ref.update(messages=10**12), ("counts 1000000000000 messages", "ends with")),
    (lambda ref: ref.update(messages=0), ("is not a count of 1 or more",)),
    (lambda ref: ref.update(messages=True), ("is not a count",)),
    (lambda ref: ref.update(messages="4"), ("is not a count",)),
    (lambda ref: ref.update(messages=3), ("hash to",)),
    (lambda ref: ref.update(sha256="0" * 64), ("hash to", "altered")),
    (lambda ref: ref.update(sha256="../x"), ("is not a SHA-256",)),
    (lambda ref: ref.update(run=""), ("names no run",)),
    (lambda ref: ref.update(run="another-run"), ("does not hold",)),
    (lambda ref: ref.clear(), ("names no run",)),
], ids=["huge-count", "zero", "bool", "string-count", "fewer-messages", "other-digest", "bad-digest", "no-run",
        "unknown-run", "empty"])
def test_a_forged_reference_is_refused_by_name(session, change, words):
    target = Path(session[2].run_file)
    forge(target, lambda start: change(start["history_from"]))
    assert_refused(target, *words)


def test_a_reference_that_is_not_an_object_or_a_link_is_refused(session):
    files = [Path(r.run_file) for r in session]
    forge(files[4], lambda start: start.update(history_from=files[3].name))
    assert_refused(files[4], "not an object")
    link = files[2].parent / ("0" + files[2].name)  # sorts before every log of the directory
    link.symlink_to(files[2])
    forge(files[3], lambda start: start["history_from"].update(file=link.name))
    assert_refused(files[3], "is not a regular file")


def test_a_chain_deeper_than_the_limit_is_refused(session, monkeypatch):
    monkeypatch.setattr(log_module, "HISTORY_MAX_DEPTH", 2)
    assert read_log(session[2].run_file), "two earlier files: within the limit"
    assert_refused(session[3].run_file, "deeper than 2 earlier files")


# -- older versions read as before ---------------------------------------------------------------------------------


def test_version_2_logs_read_as_they_were_written():
    first, continued = lines(V2_FIRST), lines(V2_CONTINUED)
    assert first[0]["log_version"] == continued[0]["log_version"] == 2
    assert "history_from" not in continued[0] and len(continued[0]["history"]) == 10, "version 2 copied it"
    back = read_log(V2_CONTINUED)
    assert back[0]["log_version"] == 2 and len(back[0]["history"]) == 10
    assert reconstruct_transcript(V2_CONTINUED)[:10] == reconstruct_transcript(V2_FIRST)
    assert load_run(V2_CONTINUED).question == "Check it again."
    assert [r["type"] for r in iter_log(V2_CONTINUED)] == [r["type"] for r in continued]


def test_version_2_logs_replay_identically(tmp_path):
    for path in (V2_FIRST, V2_CONTINUED):
        assert replay_run(path, run_dir=tmp_path / "replay").identical


def test_a_version_2_log_cannot_refer_to_another(tmp_path, session):
    path = tmp_path / "v2.jsonl"
    records = lines(V2_CONTINUED)
    records[0]["history_from"] = lines(session[1].run_file)[0]["history_from"]
    rewrite(path, records)
    with pytest.raises(MalformedLogError, match="history_from and tools_sha256 are not fields of a version-2 log"):
        read_log(path)
    records = lines(V2_CONTINUED)
    records[0]["tools_sha256"] = "0" * 64
    rewrite(path, records)
    with pytest.raises(MalformedLogError, match="are not fields of a version-2 log"):
        read_log(path)


# -- through a session, with secrets and reruns --------------------------------------------------------------------


def test_a_secret_in_the_conversation_is_scrubbed_in_every_log_and_the_references_still_hold(tmp_path):
    from harness_magic.core.transcript.scrub import register_secret

    secret = "sk-history-ref-secret-0123456789abcdef"
    register_secret(secret)
    turns = [{"tool_calls": [{"name": "echo", "arguments": {"text": f"the key is {secret}"}}]}, {"text": "Got it."},
             {"text": f"Still {secret}."}, {"text": "Third."}]
    harness = harness_in(tmp_path / "runs", turns)
    results = [harness.run_result("Remember the key."), harness.ask_result("Again?"), harness.ask_result("More?")]
    for result in results:
        assert secret not in Path(result.run_file).read_text(encoding="utf-8")
        assert len(reconstruct_transcript(result.run_file)) == len(result.messages)
    assert all("history_from" in lines(r.run_file)[0] for r in results[1:])
    assert replay_run(results[-1].run_file, run_dir=tmp_path / "replay").result.status == "completed"


def test_a_session_with_a_rerun_cell_refers_across_its_logs_and_every_log_reads(tmp_path):
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    turns = [{"text": f"Cell answer {i}."} for i in range(4)]
    config = AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess")
    session = AgentSession(config, adapter=ProviderAdapter("scripted/test", transport=ScriptedModel(turns)))
    try:
        first = session.ask("First cell.", run_key="c1")
        second = session.ask("Second cell.", run_key="c2")
        third = session.ask("Third cell.", run_key="c3")
        rerun = session.ask("Second cell, edited.", run_key="c2")
    finally:
        session.close()
    assert [len(r.messages) for r in (first, second, third, rerun)] == [2, 4, 6, 4]
    for result in (second, third, rerun):
        start = lines(result.run_file)[0]
        assert start["history_from"]["messages"] == len(result.messages) - 2 and start["history"] == []
    for result in (first, second, third, rerun):
        assert load_run(result.run_file).messages == list(result.messages)
    assert [r["type"] for r in read_log(second.run_file)][-1] == "superseded"


def test_the_audit_logs_tool_use_ids_name_calls_in_logs_that_refer_to_earlier_ones(tmp_path):
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.execution.connectors import ApprovalPolicy, Connector
    from harness_magic.core.session import AgentSession
    from harness_magic.core.transcript.audit import verify_file

    notes = Connector("notes", "Notes.")

    @notes.tool(safety="write")
    def add(text: str) -> str:
        """Add a note."""
        return "added"

    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "notes"}}]},
             {"tool_calls": [{"name": "notes__add", "arguments": {"text": "one"}}]}, {"text": "done"},
             {"tool_calls": [{"name": "notes__add", "arguments": {"text": "two"}}]}, {"text": "done again"}]
    config = AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", audit_log=str(tmp_path / "audit.jsonl"))
    session = AgentSession(config, adapter=ProviderAdapter("scripted/test", transport=ScriptedModel(turns)))
    session.add_connector(notes, approval=ApprovalPolicy(approver=lambda request: True))
    try:
        first, second = session.ask("Note one."), session.ask("Note two.")
    finally:
        session.close()
    assert "history_from" in lines(second.run_file)[0]
    assert verify_file(tmp_path / "audit.jsonl").ok
    audited = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    # the second cell's log names both calls: the first cell's through the log it refers to
    uses = {u.id: u.name for m in load_run(second.run_file).messages for u in m.tool_uses}
    assert len(audited) == 2 and all(uses[r["tool_use_id"]] == r["tool"] == "notes__add" for r in audited)
    assert [c.id for c in load_run(second.run_file).tool_calls] == [audited[1]["tool_use_id"]]
