"""Spec (issue 31 points 2 and 4): a known number is masked whatever its format, and masking never crashes on data.

* A numeric value of a classified column (an amount classed ``financial``) is
  matched by value on the way out: ``99000.5``, ``99000.50``, ``99,000.50``,
  ``9.90005e4``, ``99_000.5`` are one value. Numbers nobody classified, sums of
  classified ones included, are never touched.
* The classifier and the masker accept every kind of the value-fidelity matrix
  (``pd.NA``, ``NaT``, nullable and pyarrow-backed dtypes, categoricals,
  MultiIndex, nested and binary values): a value they cannot read is left
  unclassified with a note, and the run goes on. Through ``AgentSession``, the
  whole matrix is saved in one sandboxed call with masking on and with it off,
  and every cached value is identical to the one built.
"""

from __future__ import annotations

import decimal
import json

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.text.masking import ColumnClass, Masker
from harness_magic.core.text.sensitivity import classify_cell, classify_column, is_missing

from value_matrix import CASES, PRELUDE, assert_identical, build


def call(tool, /, **arguments):
    return {"name": tool, "arguments": arguments}


def financial_masker(*values) -> Masker:
    masker = Masker()
    masker.learn_column("deals", "amount", ColumnClass("financial", "config"), list(values))
    return masker


# -- numbers by value ------------------------------------------------------------------------------


@pytest.mark.parametrize("printed", ["99000.5", "99000.50", "99,000.50", "9.90005e4", "9.90005e+04", "99_000.5",
                                     "-99000.5", "$99,000.50", "99000.500000"])
def test_a_known_amount_is_masked_in_any_format(printed):
    masker = financial_masker(99000.5)
    masked = masker.mask_text(f"deal closed at {printed} today")
    sign = printed[:printed.index("9")]  # "$" and "-" are not the number
    assert masked.text == f"deal closed at {sign}{masker.pseudonym('financial', '99000.5')} today"  # one value
    assert masked.counts == {"financial": 1}


def test_numbers_nobody_classified_are_never_touched():
    masker = financial_masker(99000.5, 12345, decimal.Decimal("250.00"))
    text = "sum 111345.5 mean 55672.75 count 3 rows 99000 99000.51 990005 12346 25 2.5e2x"
    assert masker.mask_text(text).text == text


def test_amounts_of_every_numeric_kind_are_learned_by_value():
    masker = financial_masker(np.float32(1234.5), np.int64(778899), decimal.Decimal("250.00"), "4500.25",
                              pd.NA, None, float("nan"), np.nan, float("inf"), 7, 0.5, True)
    masked = masker.mask_text("1234.5 778,899 250 4,500.25 | 7 0.5 1")
    assert masked.text.endswith("| 7 0.5 1")  # too few digits to track (KNOWN_VALUE_MIN_CHARS), and a boolean
    assert masked.counts == {"financial": 4}


def test_a_snapshot_cell_holding_a_known_amount_is_masked():
    masker = financial_masker(99000.5)
    snapshot = masker.mask_value({"sample": [{"amount": 99000.5, "n": 3}, {"amount": 99000.50, "n": 99000}]})
    assert "99000.5" not in json.dumps(snapshot) and snapshot["sample"][0]["n"] == 3
    assert snapshot["sample"][1]["n"] == 99000


def test_a_known_amount_is_masked_in_every_format_through_agent_session(tmp_path):
    from harness_magic.core.execution.connectors.config import connectors_from_config
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    (tmp_path / "terms.yaml").write_text(
        "tables:\n  deals.amount: {kind: dimension, definition: Deal value., sensitivity: financial}\n")
    registry = connectors_from_config([{"type": "glossary", "files": [str(tmp_path / "terms.yaml")]}])
    code = ("v = float(deals.amount[0])\n"
            "print(f'{v} {v:.2f} {v:,.2f} {v:.5e} {v:_} total={deals.amount.sum() + 1}')")
    turns = [{"tool_calls": [call("python_interpreter", code=code)]}, {"text": "done"}]
    session = AgentSession(AgentConfig(model="scripted/f", sandbox="inprocess", run_dir=str(tmp_path / "runs")),
                           adapter=ProviderAdapter("scripted/f", transport=ScriptedModel(turns)), connectors=registry)
    try:  # the frame comes in as data does (a push; a connector read is the same entry): its amounts are learned
        session.cache.put("deals", pd.DataFrame({"id": [1, 2], "amount": pd.array([99000.5, None], dtype="Float64")}),
                          tool="notebook")
        result = session.ask("how big?")
        assert session.cache.get("deals").amount[0] == 99000.5  # the worker computes on the real value
    finally:
        session.close()
    assert result.status == "completed", result.error
    sent = "\n".join(str(b.content) for m in result.messages for b in m.content if hasattr(b, "tool_use_id"))
    for form in ("99000.5", "99000.50", "99,000.50", "9.90050e+04", "99_000.5"):
        assert form not in sent, form
    assert "total=99001.5" in sent  # a computed number is not a known value: it stays exact


# -- never crash on data ---------------------------------------------------------------------------


def test_missing_values_of_every_kind_are_recognised_without_raising():
    for value in (None, float("nan"), np.nan, pd.NA, pd.NaT, np.datetime64("NaT"), decimal.Decimal("NaN")):
        assert is_missing(value), value
    for value in ("", 0, "x", np.array([np.nan, 1.0]), [None], {"a": pd.NA}, b"\x00", pd.Timestamp("2024-01-01")):
        assert not is_missing(value), value


class BrokenStr(int):
    def __str__(self):
        raise RuntimeError("no text for you")


class Ambiguous:
    def __ne__(self, other):
        raise ValueError("ambiguous")

    def __str__(self):
        return "2125550187"


def test_the_classifier_reads_hostile_and_exotic_cells_without_raising():
    cells = [pd.NA, pd.NaT, np.array([1, 2]), [1, [2]], {"a": None}, b"\xff", BrokenStr(5), Ambiguous(),
             pd.Interval(0, 1), pd.Period("2024Q1"), decimal.Decimal("sNaN"), 1 + 2j, ("a", 1)]
    assert all(classify_cell(cell) is None for cell in cells)
    assert classify_column(cells) is None
    assert classify_column(pd.array(["ann@x.com", None, "bo@y.org"], dtype="string").tolist()) == "email"
    assert classify_column(pd.array([2125550187, None], dtype="Int64").tolist()) == "phone"
    assert classify_column(pd.array(["ann@x.com", None], dtype="string[pyarrow]").tolist()) == "email"


def test_the_masker_learns_hostile_and_exotic_cells_without_raising():
    masker = Masker()
    masker.learn_column("h", "notes", ColumnClass("restricted", "config"),
                        [pd.NA, pd.NaT, None, np.nan, [1, 2], {"k": "v"}, b"bytes", BrokenStr(123456), Ambiguous(),
                         "vault 77", pd.Timestamp("2024-01-02"), decimal.Decimal("sNaN")])
    assert masker.unread == 4  # the list, the dict, the bytes and the int that cannot be printed
    assert masker.mask_text("vault 77 and 2125550187").text == "[denied restricted] and [denied restricted]"


def test_a_frame_with_unreadable_columns_is_classified_column_by_column_with_a_note():
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.control.masking import SessionMasking, sensitivity_report

    frame = pd.DataFrame({"email": pd.array(["ann@x.com", None, "bo@y.org"], dtype="string"),
                          "flag": pd.array([True, None, False], dtype="boolean"),
                          "n": pd.array([1, None, 3], dtype="Int64"),
                          "blob": pd.Series([b"a", [1], None], dtype=object),
                          "cat": pd.Categorical([3, None, 1])})
    cache = SessionCache()
    name = cache.put("people", frame)
    masking = SessionMasking(lambda: {}, lambda: {"blob": ColumnClass("restricted", "config")})
    masking.observe(cache, [name])
    assert {c: k.cls for c, k in masking.column_classes(name).items()} == {"email": "pii", "blob": "restricted"}
    assert masking.notes == ["people.blob: 2 value(s) not one value (lists, bytes...): not tracked"]
    assert "note: people.blob" in sensitivity_report(masking, None)
    shown = json.dumps(masking.mask_snapshot(cache.snapshot(name)))
    assert "ann@x.com" not in shown and "bo@y.org" not in shown


# -- the value-fidelity matrix through AgentSession, masking on and off ----------------------------


def _confined() -> bool:
    from harness_magic.core.execution.sandbox import probe_confinement

    return bool(probe_confinement()["confined"])


@pytest.mark.parametrize("masking", [None, {"pii": "allow", "financial": "allow", "restricted": "allow"}],
                         ids=["masking-on", "masking-off"])
def test_the_whole_value_matrix_is_saved_through_agent_session_exactly(masking, server, tmp_path):
    if not _confined():
        pytest.skip("no OS confinement here: the sandboxed worker cannot start")
    from harness_magic import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    code = PRELUDE + "".join(f"save({case!r}, {expr})\n" for case, expr in CASES.items())
    code += ("emails = pd.DataFrame({'email': pd.array(['ann.lee@acme-mail.com', None], dtype='string'),"
             " 'n': pd.array([1, None], dtype='Int64')})\nsave('emails', emails)\nprint(emails)\n")
    server.replies = [{"tool_calls": [{"id": "c1", **call("python_interpreter", code=code)}]}, {"text": "done"}]
    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", sleep=lambda s: None)
    config = AgentConfig(model="openai/test-model", run_dir=str(tmp_path / "runs"), planner=False, reminders=False,
                         **({"masking": masking} if masking is not None else {}))
    session = AgentSession(config, adapter=adapter)
    try:
        result = session.ask("save them all")
        assert result.status == "completed", result.error
        different = []
        for case in CASES:
            try:
                assert_identical(build(case), session.cache.get(case))
            except Exception as exc:  # collected: one run shows every kind that fails
                different.append(f"{case}: {type(exc).__name__}: {str(exc)[:200]}")
        assert different == []
    finally:
        session.close()
    results = json.dumps([m for m in server.requests[-1]["messages"] if m["role"] == "tool"])
    assert ("ann.lee@acme-mail.com" in results) == (masking is not None)  # the control: masking did act
