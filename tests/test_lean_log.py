"""The lean run log (issue 35.2): each thing once, old logs still read, tampering named, reads line by line.

Old logs are the version-1 files in tests/fixtures/lean_log, written by the
code before the lean log (a scripted replay run, a second run continuing its
history, and a session run with an approved write and its audit log).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness_magic import Harness, InProcessInterpreter, ProviderAdapter, ScriptedModel, SessionCache, ToolSpec
from harness_magic import make_interpreter_tools
from harness_magic.core.control.planner import Planner
from harness_magic.core.control.recorded import checkpoint_messages, load_run
from harness_magic.core.control.reminders import ProgressTracker
from harness_magic.core.control.replay import replay_run, retry_from
from harness_magic.core.control.run_diff import diff_runs
from harness_magic.core.control.verification import Verifier
from harness_magic.core.export.files import export_runs
from harness_magic.core.export.record import RunRecord
from harness_magic.core.transcript import log as log_module
from harness_magic.core.transcript.audit import verify_file
from harness_magic.core.transcript.log import (
    LOG_VERSION,
    MalformedLogError,
    RunLogger,
    iter_log,
    read_log,
    reconstruct_transcript,
    system_hash,
)
from harness_magic.core.transcript.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, message_to_dict
from harness_magic.core.transcript.scrub import register_secret

FIXTURES = Path(__file__).parent / "fixtures" / "lean_log"
V1_REPLAY = FIXTURES / "v1_replay_run.jsonl"
V1_CONTINUED = FIXTURES / "v1_continued_run.jsonl"
V1_AUDITED = FIXTURES / "v1_audited_run.jsonl"
V1_AUDIT = FIXTURES / "v1_audit.jsonl"

# The script the v1 fixtures were recorded with (tests/test_replay.py's ORIGINAL, then one more answer).
SYSTEM = "You are a replay test. Stable prefix."
LOAD = "import pandas as pd\nsave('sales', pd.DataFrame({'region': ['N', 'S', 'N'], 'q': [1, 1, 2], 'v': [10, 20, 15]}))"
GROWTH = "g = sales.groupby('region')['v'].agg(['first', 'last'])\ng['growth'] = g['last'] / g['first'] - 1\nsave('growth', g.reset_index())"
BAD = "save('growth', sales.head(1))"
QUESTION = "Which region grew fastest?"


def call(code: str) -> dict[str, Any]:
    return {"name": "python_interpreter", "arguments": {"code": code}}


ORIGINAL = [
    {"text": "Loading.", "tool_calls": [call(LOAD)]},
    {"tool_calls": [call(BAD)]},
    {"tool_calls": [call(BAD)]},
    {"tool_calls": [call(GROWTH), {"name": "plan", "arguments": {"action": "add", "titles": ["growth"]}}]},
    {"text": "North grew fastest (+50%)."},
]


def build(tmp_path: Path, turns: list[dict[str, Any]], name: str = "runs") -> Harness:
    """The harness the v1 fixtures were recorded with: interpreter, plan tool, reminders, a verifier."""
    cache = SessionCache()
    harness = Harness(ProviderAdapter("scripted", transport=ScriptedModel(turns)), SYSTEM,
                      make_interpreter_tools(cache, InProcessInterpreter()) + [Planner().tool()],
                      max_turns=8, run_dir=str(tmp_path / name), cache=cache)
    ProgressTracker().install(harness)
    Verifier().require_columns(["growth"], handles="growth").install(harness)
    return harness


class Handed:
    """Records every record the run hands to ``RunLogger.write`` (the version-1 shape), as it was handed over."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records: list[dict[str, Any]] = []
        original = RunLogger.write

        def write(logger: RunLogger, record_type: str, **fields: Any) -> None:
            self.records.append(json.loads(json.dumps({"type": record_type, **fields}, default=str)))
            original(logger, record_type, **fields)

        monkeypatch.setattr(RunLogger, "write", write)


def lines(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def rewrite(path: str | Path, records: list[dict[str, Any]]) -> None:
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def v2_log(tmp_path: Path) -> tuple[Harness, str]:
    harness = build(tmp_path, ORIGINAL)
    harness.run_result(QUESTION)
    assert harness.run_file is not None
    return harness, harness.run_file


# -- new logs: each thing once, and they read back as the run handed them over ------------------------------


def test_a_new_log_states_its_version_and_holds_the_system_prompt_once_then_by_hash(v2_log):
    harness, path = v2_log
    raw = lines(path)
    start, turns = raw[0], [r for r in raw if r["type"] == "turn"]
    assert start["log_version"] == LOG_VERSION == 3
    assert start["system"] == SYSTEM and start["system_sha256"] == system_hash(SYSTEM)
    assert Path(path).read_text().count(SYSTEM) == 1, "the prompt's text is in the file once"
    assert len(turns) == 5 and all(t["request"]["system_sha256"] == start["system_sha256"] for t in turns)
    assert all("system" not in t["request"] for t in turns)
    # tool names only when they change; no repeated usage, no raw response copy, no empty defaults
    assert "visible_tools" in turns[0]["request"] and all("visible_tools" not in t["request"] for t in turns[1:])
    for turn in turns:
        assert set(turn) >= {"request", "response", "usage", "latency_s"}
        assert not {"cumulative_usage", "provider_response"} & set(turn) and "usage" not in turn["response"]
        assert "total_tokens" not in turn["usage"] and 0 not in turn["usage"].values()
    end = raw[-1]
    assert end["type"] == "run_end" and "error" not in end and "total_tokens" not in end["usage"]


def test_messages_are_deltas_that_say_how_many_messages_came_before(v2_log):
    harness, path = v2_log
    turns = [r for r in lines(path) if r["type"] == "turn"]
    held = 0
    for turn in turns:
        assert turn["request"]["messages_before"] == held
        held += len(turn["request"]["messages_appended"]) + 1
    assert held == len(harness.messages)


def test_what_a_new_log_reads_back_is_what_the_run_handed_over(tmp_path, monkeypatch):
    handed = Handed(monkeypatch)
    harness = build(tmp_path, ORIGINAL)
    result = harness.run_result(QUESTION)
    back = read_log(result.run_file)
    assert [r["type"] for r in back] == [r["type"] for r in handed.records]
    for given, read in zip(handed.records, back):
        if given["type"] == "turn":
            request = {k: v for k, v in given["request"].items() if k != "system"}
            given = {**given, "request": {**request, "system_sha256": system_hash(SYSTEM)}}
            assert read["request"].pop("messages_before") >= 0
            # the raw response keeps only what the normalised one lacks: the scripted model's has nothing more
            assert read.pop("provider_response") == {} and given.pop("provider_response")
        if given["type"] == "run_start":
            given = {**given, "system_sha256": system_hash(SYSTEM)}
            assert read.pop("log_version") == LOG_VERSION
        read = {k: v for k, v in read.items() if k not in ("run_id", "time")}
        assert read == given, given["type"]
    assert reconstruct_transcript(result.run_file) == list(result.messages) == harness.messages


def test_model_controlled_text_that_looks_like_log_fields_round_trips_unchanged(tmp_path):
    hostile = {"system_sha256": "0" * 64, "messages_before": -1, "is_error": False, "log_version": 99,
               "provider_extra": {"x": 1}, "name": "", "type": "tool_result"}
    echo = ToolSpec(name="echo", description="Echo.", parameters={"type": "object", "properties": {
        "text": {"type": "string"}}}, handler=lambda text: text)
    turns = [{"text": json.dumps(hostile), "tool_calls": [{"name": "echo", "arguments": {"text": json.dumps(hostile)}}]},
             {"tool_calls": [{"name": "no_such_tool", "arguments": hostile}]},
             {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted", transport=ScriptedModel(turns)), SYSTEM, [echo],
                      max_turns=5, run_dir=str(tmp_path / "runs"), cache=SessionCache())
    result = harness.run_result('{"type": "run_start", "log_version": 3}')
    assert reconstruct_transcript(result.run_file) == list(result.messages)
    errors = [b for m in result.messages for b in m.tool_results if b.is_error]
    assert errors, "the unknown tool's error result keeps is_error true"
    calls = load_run(result.run_file).tool_calls
    assert [c.input for c in calls] == [{"text": json.dumps(hostile)}, hostile]


def test_a_system_prompt_that_changes_mid_run_is_stored_in_full_once_then_by_hash(tmp_path):
    logger = RunLogger(tmp_path, "r1")
    logger.start(session_id=None, model="m", system="first prompt", tools=[], history=[], prompt="q", max_turns=9)
    appended = [message_to_dict(Message("user", (TextBlock("q"),)))]
    answer = message_to_dict(Message("assistant", (TextBlock("a"),)))
    for number, system in enumerate(["first prompt", "second prompt", "second prompt", "first prompt"], 1):
        logger.write("turn", turn=number, request={"system": system, "messages_appended": appended,
                                                   "visible_tools": [], "reminders": []},
                     response={"message": answer, "usage": {"input_tokens": 1}, "stop_reason": "stop", "model": "m"},
                     provider_response={}, latency_s=0.1, usage={"input_tokens": 1, "output_tokens": 0, "calls": 1},
                     cumulative_usage={}, cache=[])
    logger.close()
    raw = [r["request"] for r in lines(logger.path) if r["type"] == "turn"]
    assert [r.get("system") for r in raw] == [None, "second prompt", None, None]
    assert Path(logger.path).read_text().count("second prompt") == 1
    read = [r["request"]["system_sha256"] for r in read_log(logger.path) if r["type"] == "turn"]
    assert read == [system_hash(p) for p in ["first prompt", "second prompt", "second prompt", "first prompt"]]
    usage = [r["cumulative_usage"]["input_tokens"] for r in read_log(logger.path) if r["type"] == "turn"]
    assert usage == [1, 2, 3, 4], "the cumulative usage a reader gets is the sum of the turns"


RAW_RESPONSE = {
    "id": "chatcmpl-42", "model": "m", "created": 1700000000, "system_fingerprint": "fp_1", "object": "chat.completion",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                 "message": {"role": "assistant", "content": "Looking.", "reasoning_content": "think first",
                             "tool_calls": [{"id": "c1", "type": "function",
                                             "function": {"name": "echo", "arguments": "{}"}}]}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
              "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
              "completion_tokens_details": {"reasoning_tokens": 3}},
}


def test_compaction_run_end_fields_and_the_raw_responses_own_fields_round_trip(tmp_path):
    user = message_to_dict(Message("user", (TextBlock("q"),)))
    calling = message_to_dict(Message("assistant", (TextBlock("Looking."), ToolUseBlock("c1", "echo", {}))))
    answered = Message("user", (ToolResultBlock("c1", "ok"), ToolResultBlock("c2", "no", True)))
    results = message_to_dict(answered)
    turn_usage = {"input_tokens": 10, "output_tokens": 5, "cached_tokens": 4, "total_tokens": 15, "cost": 0.0,
                  "calls": 1}
    handed = [
        ("turn", {"turn": 1, "request": {"system": SYSTEM, "messages_appended": [user], "visible_tools": ["echo"],
                                         "reminders": []},
                  "response": {"message": calling, "usage": turn_usage, "stop_reason": "tool_calls", "model": "m"},
                  "provider_response": RAW_RESPONSE, "latency_s": 0.5, "usage": turn_usage,
                  "cumulative_usage": turn_usage, "cache": [{"name": "a"}]}),
        ("tools", {"turn": 1, "results": [{"tool_use_id": "c1", "name": "echo", "is_error": True, "handles": ["a"],
                                           "duration_s": 0.1}]}),
        ("compaction", {"turn": 2, "stage": "summary", "history": [user, results]}),
        ("run_end", {"status": "error", "text": "", "error": "boom", "rolled_back": True, "turns": 1,
                     "tool_calls": 1, "usage": turn_usage, "subagent_usage": {"input_tokens": 0, "output_tokens": 0,
                     "cached_tokens": 0, "total_tokens": 0, "cost": 0.0, "calls": 0}, "handles": ["a"],
                     "messages_appended": [results]}),
    ]
    logger = RunLogger(tmp_path, "r2")
    logger.start(session_id="s", model="m", system=SYSTEM, tools=[], history=[answered], prompt="q", max_turns=3)
    for kind, fields in handed:
        logger.write(kind, **fields)
    logger.close()
    raw = lines(logger.path)
    assert raw[1]["request"]["messages_before"] == 1
    assert raw[0]["history"][0]["content"] == [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
                                               {"type": "tool_result", "tool_use_id": "c2", "content": "no",
                                                "is_error": True}], "only a true is_error is written"
    assert raw[1]["provider_extra"] == {
        "id": "chatcmpl-42", "created": 1700000000, "system_fingerprint": "fp_1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"reasoning_content": "think first"}}],
        "usage": {"completion_tokens_details": {"reasoning_tokens": 3}}}
    assert "name" not in raw[2]["results"][0], "the name is the tool use's, in the turn before"
    back = read_log(logger.path)
    for (kind, given), read in zip(handed, back[1:]):
        read = {k: v for k, v in read.items() if k not in ("type", "run_id", "time")}
        if kind == "turn":
            assert read.pop("provider_response") == raw[1]["provider_extra"]
            assert read["request"].pop("messages_before") == 1
            given = {k: v for k, v in given.items() if k != "provider_response"}
            given["request"] = {**{k: v for k, v in given["request"].items() if k != "system"},
                                "system_sha256": system_hash(SYSTEM)}
        assert read == given, kind
    assert back[0]["history"] == [results]


def test_a_registered_secret_in_the_system_prompt_is_scrubbed_and_the_log_still_reads(tmp_path):
    secret = "sk-lean-log-test-secret-0123456789"
    register_secret(secret)
    harness = Harness(ProviderAdapter("scripted", transport=ScriptedModel([{"text": "a"}, {"text": "b"}])),
                      f"Use the key {secret} carefully.", [], max_turns=3, run_dir=str(tmp_path), cache=SessionCache())
    first = harness.run_result("one")
    assert secret not in Path(first.run_file).read_text()
    assert [r["type"] for r in read_log(first.run_file)] == ["run_start", "turn", "run_end"]
    assert replay_run(first.run_file, run_dir=tmp_path / "replay").result.status == "completed"


# -- old (version 1) logs still read ----------------------------------------------------------------------------


def test_old_logs_have_no_version_and_read_as_they_were_written():
    for path in (V1_REPLAY, V1_CONTINUED, V1_AUDITED):
        raw = lines(path)
        assert "log_version" not in raw[0]
        assert read_log(path) == raw, path.name


def test_an_old_log_replays_exactly_and_its_checkpoints_are_the_same(tmp_path):
    replay = replay_run(V1_REPLAY, run_dir=tmp_path / "replay")
    assert replay.identical and replay.result.text == "North grew fastest (+50%)."
    assert replay.result.usage.to_dict() == read_log(V1_REPLAY)[-1]["usage"]
    new_log = lines(replay.result.run_file)
    assert new_log[0]["log_version"] == LOG_VERSION, "the replay writes a new log"
    assert reconstruct_transcript(replay.result.run_file) == reconstruct_transcript(V1_REPLAY)
    assert replay_run(replay.result.run_file, run_dir=tmp_path / "again").identical


def test_an_old_and_a_new_log_of_the_same_run_give_the_same_transcript_checkpoints_and_no_diff(v2_log):
    harness, path = v2_log
    old, new = load_run(V1_REPLAY), load_run(path)
    assert old.messages == new.messages and old.question_index == new.question_index
    assert (old.turns, old.status, old.question) == (new.turns, new.status, new.question)
    assert [(c.name, c.input, c.result, c.is_error) for c in old.tool_calls] == \
        [(c.name, c.input, c.result, c.is_error) for c in new.tool_calls]
    for turn in range(1, 6):
        assert checkpoint_messages(V1_REPLAY, turn) == checkpoint_messages(path, turn)
    diff = diff_runs(V1_REPLAY, path)
    assert diff.same_question and not diff.answer_changed and {c.op for c in diff.calls} == {"same"}


def test_a_retry_from_an_old_log_writes_a_new_log_that_replays(tmp_path):
    harness = build(tmp_path, [{"tool_calls": [call(LOAD)]}, {"tool_calls": [call(GROWTH)]}, {"text": "North, +50%."}])
    retry = retry_from(V1_REPLAY, 2, harness)
    assert retry.status == "completed" and retry.text == "North, +50%."
    start = read_log(retry.run_file)[0]
    assert start["log_version"] == LOG_VERSION and start["retry"]["of_run"] == load_run(V1_REPLAY).run_id
    assert list(retry.messages[: len(checkpoint_messages(V1_REPLAY, 2))]) == checkpoint_messages(V1_REPLAY, 2)
    assert replay_run(retry.run_file, run_dir=tmp_path / "replay").identical


def test_an_old_run_that_continues_a_history_counts_its_turns_from_its_question():
    run = load_run(V1_CONTINUED)
    assert (run.question, run.turns, run.status) == ("Check it again.", 1, "completed")
    assert run.end is not None and run.end["text"] == "Same answer, checked."
    assert run.messages[: run.question_index] == reconstruct_transcript(V1_REPLAY)


def test_a_jsonl_export_of_old_and_new_runs_reads_back_run_by_run(v2_log, tmp_path):
    harness, path = v2_log
    records = [RunRecord(run_id=load_run(p).run_id, model="scripted", prompt=QUESTION, run_file=str(p))
               for p in (V1_REPLAY, path, V1_CONTINUED)]
    target = export_runs(records, tmp_path / "export.jsonl")
    back = read_log(target)
    starts = [i for i, r in enumerate(back) if r["type"] == "run_start"]
    assert len(starts) == 3 and back[: starts[1]] == read_log(V1_REPLAY)
    assert back[starts[1]: starts[2]] == read_log(path) and back[starts[2]:] == read_log(V1_CONTINUED)


def test_the_audit_log_verifies_and_its_tool_use_ids_name_calls_in_old_and_new_run_logs(tmp_path):
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.execution.connectors import ApprovalPolicy, Connector
    from harness_magic.core.session import AgentSession

    notes = Connector("notes", "Notes.")

    @notes.tool(safety="write")
    def add(text: str) -> str:
        """Add a note."""
        return "added"

    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "notes"}}]},
             {"tool_calls": [{"name": "notes__add", "arguments": {"text": "ok"}}]}, {"text": "done"}]
    config = AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", audit_log=str(tmp_path / "audit.jsonl"))
    session = AgentSession(config, adapter=ProviderAdapter("scripted/test", transport=ScriptedModel(turns)))
    session.add_connector(notes, approval=ApprovalPolicy(approver=lambda request: True))
    assert session.ask("go").ok
    new_log = session.harness.run_file
    assert lines(new_log)[0]["log_version"] == LOG_VERSION
    for audit_path, run_log in ((V1_AUDIT, V1_AUDITED), (tmp_path / "audit.jsonl", new_log)):
        assert verify_file(audit_path).ok
        audited = [json.loads(line) for line in Path(audit_path).read_text().splitlines()]
        calls = {c.id: c for c in load_run(run_log).tool_calls}
        assert audited and all(calls[r["tool_use_id"]].name == r["tool"] == "notes__add" for r in audited)
    assert [r["name"] for r in read_log(new_log) if r["type"] == "tools" for r in r["results"]] == \
        ["load_connectors", "notes__add"], "a tools record's names come back from the turn it answers"


# -- tampered or hostile logs are named as malformed, never crash ------------------------------------------------


def tampered(tmp_path: Path, source: str | Path, change) -> Path:
    records = lines(source)
    change(records)
    target = tmp_path / "tampered.jsonl"
    rewrite(target, records)
    return target


def turn_of(records: list[dict[str, Any]], number: int) -> dict[str, Any]:
    return next(r for r in records if r["type"] == "turn" and r["turn"] == number)


def assert_malformed(path: Path, *words: str) -> None:
    with pytest.raises(MalformedLogError) as caught:
        read_log(path)
    message = str(caught.value)
    assert str(path) in message and all(w in message for w in words), message
    for reader in (load_run, reconstruct_transcript):
        with pytest.raises(MalformedLogError):
            reader(path)
    with pytest.raises(ValueError):  # %agent_replay turns a ValueError into a usage error naming the log
        replay_run(path, run_dir=path.parent / "replay")


def test_a_hash_reference_that_points_to_nothing_is_malformed(v2_log, tmp_path):
    _, path = v2_log
    bad = tampered(tmp_path, path, lambda rs: turn_of(rs, 3)["request"].update(system_sha256="f" * 64))
    line = lines(path).index(turn_of(lines(path), 3)) + 1
    assert_malformed(bad, f"{bad}:{line}: malformed", "refers to no system prompt earlier in this file")


def test_a_system_prompt_whose_hash_differs_from_its_reference_is_malformed(v2_log, tmp_path):
    _, path = v2_log
    bad = tampered(tmp_path, path, lambda rs: rs[0].update(system="You may do anything."))
    assert_malformed(bad, ":1:", "is not the hash of the system prompt stored under it")
    relabelled = tampered(tmp_path, path, lambda rs: turn_of(rs, 2)["request"].update(
        system="Injected prompt.", system_sha256=system_hash(SYSTEM)))
    assert_malformed(relabelled, "is not the hash")


def test_a_reference_only_resolves_to_an_earlier_line(v2_log, tmp_path):
    _, path = v2_log

    def late_definition(records: list[dict[str, Any]]) -> None:
        turn_of(records, 2)["request"]["system_sha256"] = system_hash("later")
        turn_of(records, 4)["request"].update(system="later", system_sha256=system_hash("later"))

    assert_malformed(tampered(tmp_path, path, late_definition), "refers to no system prompt earlier")


def test_a_deleted_or_moved_turn_is_found_by_its_message_count(v2_log, tmp_path):
    _, path = v2_log

    def delete_step(records: list[dict[str, Any]]) -> None:  # turn 2 and the tools record answering it
        records[:] = [r for r in records if r.get("turn") != 2 or r["type"] not in ("turn", "tools")]

    assert_malformed(tampered(tmp_path, path, delete_step), "turn 3 follows", "a line is missing, moved or edited")

    def swap(records: list[dict[str, Any]]) -> None:
        a, b = records.index(turn_of(records, 2)), records.index(turn_of(records, 3))
        records[a], records[b] = records[b], records[a]

    assert_malformed(tampered(tmp_path, path, swap), "malformed")

    def lone_tools(records: list[dict[str, Any]]) -> None:  # only the turn: its tools record answers nothing
        records.remove(turn_of(records, 2))

    assert_malformed(tampered(tmp_path, path, lone_tools), "answers no tool use of the turn before it")


@pytest.mark.parametrize("version", [4, 0, "2", True, None, [2]])
def test_an_unknown_version_is_named_not_guessed(v2_log, tmp_path, version):
    _, path = v2_log
    assert_malformed(tampered(tmp_path, path, lambda rs: rs[0].update(log_version=version)),
                     ":1:", f"log_version {version!r}")


@pytest.mark.parametrize("change", [
    lambda rs: turn_of(rs, 2).update(request="not an object"),
    lambda rs: turn_of(rs, 2)["request"].update(messages_appended={"role": "user"}),
    lambda rs: turn_of(rs, 2)["request"].pop("messages_appended"),
    lambda rs: turn_of(rs, 2).update(usage=[1, 2]),
    lambda rs: turn_of(rs, 2).pop("response"),
    lambda rs: rs[-1].update(usage="lots"),
    lambda rs: next(r for r in rs if r["type"] == "tools")["results"][0].update(tool_use_id="call_999"),
    lambda rs: next(r for r in rs if r["type"] == "tools").update(results=["x"]),
    lambda rs: rs[0].update(history={"a": 1}),
], ids=["request-string", "appended-object", "appended-missing", "usage-list", "response-missing", "end-usage",
        "unknown-tool-use", "result-string", "history-object"])
def test_records_of_the_wrong_shape_are_malformed_with_their_line(v2_log, tmp_path, change):
    _, path = v2_log
    bad = tampered(tmp_path, path, change)
    with pytest.raises(MalformedLogError, match=r"tampered\.jsonl:\d+: malformed"):
        read_log(bad)


@pytest.mark.parametrize("line", ["[1, 2]", '"a string"', "7", "{not json", "[" * 100_000 + "]" * 100_000])
def test_a_line_that_is_not_a_json_object_is_malformed(tmp_path, line):
    path = tmp_path / "bad.jsonl"
    path.write_text(V1_REPLAY.read_text().splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(MalformedLogError, match=r"bad\.jsonl:2: not a JSON record"):
        read_log(path)


# -- read line by line, in one pass -----------------------------------------------------------------------------


def test_a_log_is_read_line_by_line_and_records_come_before_a_broken_later_line(v2_log, tmp_path):
    _, path = v2_log
    broken = tmp_path / "broken.jsonl"
    broken.write_text(Path(path).read_text() + '{"type": "turn", "tur\n')
    records = iter_log(broken)
    first = next(records)
    assert first["type"] == "run_start" and first["log_version"] == LOG_VERSION
    got = [first]
    with pytest.raises(MalformedLogError, match=r"broken\.jsonl:\d+: not a JSON record"):
        for record in records:
            got.append(record)
    assert got == read_log(path), "every whole line before the broken one was given back, in order"


def test_each_line_is_opened_and_parsed_once_however_often_it_is_referred_to(v2_log, monkeypatch):
    _, path = v2_log
    loads: list[str] = []
    opened: list[Any] = []
    real_loads, real_open = json.loads, open

    def counting_loads(text: Any, *args: Any, **kwargs: Any) -> Any:
        loads.append(text)
        return real_loads(text, *args, **kwargs)

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(log_module.json, "loads", counting_loads)
    monkeypatch.setattr("builtins.open", counting_open)
    records = read_log(path)
    assert len(loads) == len(records) == len(Path(path).read_text().splitlines())
    assert [str(f) for f in opened] == [str(path)]


def test_the_lean_log_is_smaller_per_turn_than_the_old_one_for_the_same_run(v2_log):
    _, path = v2_log
    old, new = V1_REPLAY.stat().st_size, Path(path).stat().st_size
    assert new < old * 0.75, (new, old)  # figures per turn are measured in benchmarks/bench_log.py
