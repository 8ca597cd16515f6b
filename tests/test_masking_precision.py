"""Spec (issue 36; issue 31 point 3): masking never changes a number the model needs, and a cut value is still
masked.

Free-text detection takes only what it is sure of: a phone in international
form or in the region's national grouping, a card with Luhn, length and a
card's grouping, an IBAN with its checksum, an SSN with its dashes. Numbers
printed by Python and pandas side by side (``call 3 100000``) are never a
phone. Recall belongs to classification at entry: values learned from a
classified column are masked wherever they appear, also cut by pandas
(``...``) or a snapshot (``…``). Whatever masking replaces is marked on the
tool call it happened in (live view, exports, run log).

Not covered, by design (docs/guarantees.md): values spelled out with spaces or
zero-width characters between their characters, a value cut without a mark
(``s[:20]``) whose start no pattern recognises and no classified column holds,
and a known value cut to fewer than ``KNOWN_PREFIX_MIN_CHARS`` characters.
"""

from __future__ import annotations

import io
import json
import random
import uuid

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.text.masking import KNOWN_PREFIX_MIN_CHARS, ColumnClass, Masker, denied_text
from harness_magic.core.text.sensitivity import classify_column, find_sensitive

CORPUS_MIN_LINES = 10_000


def call(tool, /, **arguments):
    return {"name": tool, "arguments": arguments}


def scripted_run(tmp_path, turns, *subscribers):
    """One ``AgentSession`` run (default masking, in-process interpreter) against a scripted model: the result,
    and the tool results' text the model read."""
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    session = AgentSession(AgentConfig(model="scripted/p", sandbox="inprocess", run_dir=str(tmp_path / "runs")),
                           adapter=ProviderAdapter("scripted/p", transport=ScriptedModel(turns)))
    for subscriber in subscribers:
        session.subscribe(subscriber)
    try:
        result = session.ask("go")
    finally:
        session.close()
    assert result.status == "completed", result.error
    return result, "\n".join(str(b.content) for m in result.messages for b in m.content if hasattr(b, "tool_use_id"))


# -- the false-positive corpus -------------------------------------------------------------------


def _frames(rng: np.random.Generator, n_frames: int) -> list[str]:
    """Texts pandas prints for ordinary frames: ``print(df)``, ``to_string``, ``describe``, ``value_counts``,
    ``groupby`` sums and counts, ``info``-like listings."""
    texts = []
    regions = ["north", "south", "east", "west", "central"]
    for i in range(n_frames):
        rows = int(rng.integers(20, 120))
        df = pd.DataFrame({
            "order_id": rng.integers(1, 10**9, rows),
            "count": rng.integers(0, 10**7, rows),
            "small": rng.integers(0, 10, rows),
            "amount": np.round(rng.random(rows) * 10**int(rng.integers(2, 8)), 2),
            "ratio": rng.random(rows),
            "day": pd.date_range("2020-01-01", periods=rows, freq=f"{int(rng.integers(1, 40))}D"),
            "ts": pd.Timestamp("2024-01-01 08:00") + pd.to_timedelta(rng.integers(0, 10**8, rows), unit="s"),
            "region": rng.choice(regions, rows),
            "qty": pd.array(np.where(rng.random(rows) < 0.1, None, rng.integers(0, 500, rows)), dtype="Int64"),
        })
        texts.append(str(df))  # cut with "..." at 60 rows: the default print
        texts.append(df.head(25).to_string())
        texts.append(str(df.describe()))
        texts.append(str(df["region"].value_counts()))
        texts.append(str(df["small"].value_counts().sort_index()))
        texts.append(str(df.groupby("region")[["count", "amount"]].sum()))
        texts.append(str(df.groupby(["region", "small"])["count"].agg(["sum", "mean", "count"]).head(20)))
        texts.append(str(df.set_index("day")["amount"].resample("MS").sum().head(12)))
        texts.append(f"<class 'pandas.DataFrame'>\nRangeIndex: {rows} entries, 0 to {rows - 1}\n"
                     f"memory usage: {df.memory_usage(deep=True).sum()} bytes")
        texts.append(str(df[["count", "amount"]].to_numpy()[:8]))
        texts.append(str(df.shape) + " " + str(len(df)) + " " + str(df["count"].sum()))
        if i % 5 == 0:
            texts.append(str(df.pivot_table(index="region", columns="small", values="count", aggfunc="sum")))
    return texts


def _python_lines(rng: random.Random, n: int) -> list[str]:
    """What ``print`` and logging write: counts beside small integers, ids, dates, decimals, amounts, logs."""
    levels = ["INFO", "DEBUG", "WARNING"]
    makers = [
        lambda: f"call {rng.randint(1, 9)} {rng.randint(100_000, 9_999_999)}",
        lambda: f"rows {rng.randint(1, 99)} {rng.randint(10_000, 99_999_999)}",
        lambda: f"{rng.randint(1, 999)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}",  # print(a, b, c)
        lambda: f"{rng.randint(100, 999)} {rng.randint(1_000_000, 9_999_999)}",
        lambda: f"({rng.randint(1, 999)}, {rng.randint(100_000, 9_999_999)})",
        lambda: f"[{rng.randint(1, 9)}, {rng.randint(100, 999)}, {rng.randint(1000, 9999)}]",
        lambda: f"id={rng.randint(1, 10**10)} order_id={rng.randint(1, 10**9)} user={uuid.UUID(int=rng.getrandbits(128))}",
        lambda: f"ORD-{rng.randint(2019, 2025)}-{rng.randint(0, 999999):06d} batch {rng.randint(1, 60)}",
        lambda: f"sha {rng.getrandbits(160):040x} run {rng.getrandbits(48):012x}",
        lambda: f"{rng.randint(2000, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
        lambda: f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1990, 2030)} and "
                f"{rng.randint(1, 28):02d}.{rng.randint(1, 12):02d}.{rng.randint(1990, 2030)}",
        lambda: f"epoch {rng.randint(1_500_000_000, 1_800_000_000)} ms {rng.randint(1_500_000_000_000, 1_800_000_000_000)} "
                f"ns {rng.randint(1_500_000_000 * 10**9, 1_800_000_000 * 10**9)}",
        lambda: f"{rng.random() * 10**rng.randint(0, 9):.{rng.randint(0, 6)}f}",
        lambda: f"{rng.random() * 10**rng.randint(5, 15):.6e} {rng.random():.17g}",
        lambda: f"total ${rng.random() * 10**rng.randint(3, 10):,.2f} ({rng.randint(1, 10**9):,} units)",
        lambda: f"revenue {rng.random() * 10**rng.randint(3, 10):,.0f} EUR, {rng.randint(1, 10**8):_} items",
        lambda: f"{rng.randint(0, 99)}.{rng.randint(0, 99)}.{rng.randint(0, 99)} version, range "
                f"{rng.randint(1, 999)}-{rng.randint(1000, 99999)}",
        lambda: f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d},{rng.randint(0, 999):03d} "
                f"{rng.choice(levels)} worker-{rng.randint(1, 16)} processed {rng.randint(1, 10**7)} rows in "
                f"{rng.random() * 100:.1f} s ({rng.random() * 10**6:.1f} rows/s)",
        lambda: f"Traceback line {rng.randint(1, 9999)}: KeyError: {rng.randint(1, 10**7)}",
        lambda: f"mean={rng.random() * 1000:.4f} std={rng.random() * 100:.4f} n={rng.randint(1, 10**6)} "
                f"p={rng.random() / 100:.2e}",
        lambda: f"{rng.randint(1, 9)} {rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
        lambda: f"shape ({rng.randint(1, 10**6)}, {rng.randint(1, 99)}) -> {rng.randint(1, 10**12)} cells",
    ]
    return [rng.choice(makers)() for _ in range(n)]


def ordinary_output() -> list[str]:
    """At least :data:`CORPUS_MIN_LINES` lines of ordinary output, generated deterministically."""
    lines = [line for text in _frames(np.random.default_rng(36), 24) for line in text.splitlines()]
    lines += _python_lines(random.Random(36), max(CORPUS_MIN_LINES - len(lines), 0) + 4_000)
    return lines


def test_ten_thousand_lines_of_ordinary_output_pass_through_masking_byte_identical():
    lines = ordinary_output()
    assert len(lines) >= CORPUS_MIN_LINES
    masker = Masker()  # the default policy, nothing learned
    changed = [(line, masker.mask_text(line).text) for line in lines if masker.mask_text(line).text != line]
    assert changed == []
    text = "\n".join(lines)  # as one streamed text too: what stands side by side across lines is not a value
    assert masker.mask_text(text).text == text


TRUE_POSITIVES = {
    "email": ["ann.lee@acme-mail.com", "person.7@acme-mail.com", "a@b.net"],
    "phone": ["+1 212-555-0187", "+44 20 7946 0958", "+49 30 901820", "+33 1 42 68 53 00", "+49 89 636 48018",
              "+12125550187", "(212) 555-0134", "212-555-0134", "212.555.0134"],
    "card": ["4111 1111 1111 1111", "4111-1111-1111-1111", "3400 0000 0000 009", "4111111111111111",
             "5500005555555559", "3782 822463 10005"],
    "iban": ["GB82 WEST 1234 5698 7654 32", "DE89370400440532013000"],
    "national_id": ["123-45-6789"],
    "ip": ["192.168.1.20", "2001:db8::1"],
}


@pytest.mark.parametrize("kind", sorted(TRUE_POSITIVES))
def test_the_true_positive_corpus_is_still_masked(kind):
    masker = Masker()
    for value in TRUE_POSITIVES[kind]:
        for line in (value, f"customer {value} updated", f" 3  {value}  north"):
            masked = masker.mask_text(line)
            assert value not in masked.text and masked.total == 1, (line, masked)
        assert [f.kind for f in find_sensitive(f"x {value} y")] == [kind]


def test_learned_values_are_masked_wherever_they_appear_even_bare_numbers():
    masker = Masker()
    masker.learn_column("people", "phone", ColumnClass("pii", "detected", "phone"), ["3100000", "2125550187"])
    masker.learn_column("people", "note", ColumnClass("restricted", "config"), ["vault 77"])
    masked = masker.mask_text("call 3100000 or 2125550187; KeyError: 'vault 77'")
    assert "3100000" not in masked.text and "2125550187" not in masked.text
    assert denied_text("restricted") in masked.text and masked.counts == {"pii": 2, "restricted": 1}


# -- precision, one rule at a time -----------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "rows 3 100000", "call 3 100000", "3 100000", "310-0000",  # a count beside a small integer; a local number
    "212 555 0134",  # three numbers printed side by side are not a national phone (no grouping character)
    "1704067200000 1704067200000000000",  # epoch milliseconds and nanoseconds
    "4222222222222", "4111111111111111111",  # 13 and 19 digits: sums and hashes far more often than cards
    "4111111111111111.0", "0.4111111111111111",  # a decimal, not a card
    "4111 1111-1111 1111", "41111 11111 11111 1",  # a card keeps one separator and its groups
    "4111 1111 1111 1112",  # Luhn fails
    "123456789", "123 45 6789",  # an SSN has its dashes
    "GB82 WEST 1234 5698 7654 33",  # IBAN checksum fails
    "12.05.2024 2024-05-12 05/12/2024 12:30:45",
    "1,234,567.89 $99,000.50 1.234568e+06 99_000.5",
])
def test_ordinary_numbers_are_not_sensitive_in_text(text):
    assert list(find_sensitive(text)) == []
    assert Masker().mask_text(text).text == text


def test_columns_are_still_classified_from_bare_digits():
    # classification at entry checks a cell as a whole: bare digits and spaced numbers can be a phone column
    assert classify_column(["2125550187", "2125550188", None, ""]) == "phone"
    assert classify_column(["212 555 0187", "212 555 0188"]) == "phone"
    assert classify_column(["4222222222222", "4111111111111111111"]) == "card"
    assert classify_column([3100000, 3100001, 3100002]) is None  # local numbers without an area code: counts


def test_a_signed_number_beside_a_count_is_not_an_international_phone_unless_valid():
    assert list(find_sensitive("delta +3 100000")) == []


# -- cut values (issue 31 point 3) -----------------------------------------------------------------

LONG_EMAIL = "alexandra.konstantinopoulou-vanderbilt@exampledomain-longname.com"
LONG_LOCAL = "alexandra.konstantinopoulou-vanderbilt-and-the-rest-of-the-name@acme.com"


def test_an_email_cut_by_pandas_is_masked_without_its_name():
    printed = str(pd.DataFrame({"email": [LONG_EMAIL, "a@b.com"], "n": [1, 2]}))
    assert "alexandra.konstantinopoulou-vanderbilt@example..." in printed  # what pandas does at 50 characters
    masked = Masker().mask_text(printed)
    assert "alexandra" not in masked.text and "konstantinopoulou" not in masked.text
    assert masked.counts == {"pii": 2} and "..." in masked.text


def test_an_email_whose_name_alone_fills_the_cut_is_masked_when_its_column_was_classified():
    masker = Masker()
    masker.learn_column("people", "email", ColumnClass("pii", "detected", "email"), [LONG_LOCAL])
    printed = str(pd.DataFrame({"email": [LONG_LOCAL]}))
    assert "@" not in printed  # no pattern can see an e-mail here: only the known value's prefix
    masked = masker.mask_text(printed)
    assert "konstantinopoulou" not in masked.text and masked.counts == {"pii": 1}
    assert masked.text.rstrip().endswith("...")


def test_a_cut_phone_and_card_are_recognised():
    masked = Masker().mask_text("tel +44 20 7946 09... card 4111 1111 1111 11… fine 3 100000...")
    assert "7946" not in masked.text and "4111 1111 1111 11" not in masked.text
    assert masked.counts == {"pii": 1, "financial": 1} and masked.text.endswith("fine 3 100000...")


def test_a_known_value_cut_by_a_snapshot_is_masked_at_every_cell_limit(tmp_path):
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.cache.snapshot import _TIGHTER, SNAPSHOT_CELL_CHARS, _describe
    from harness_magic.core.control.masking import SessionMasking

    note = "vault code 7781 for the north warehouse, rotate after the audit in May " * 2
    frame = pd.DataFrame({"id": [1, 2], "secret_note": [note, note.upper()], "email": [LONG_LOCAL, "bo@x.org"]})
    cache = SessionCache()
    name = cache.put("customers", frame)
    masking = SessionMasking(lambda: {}, lambda: {"secret_note": ColumnClass("restricted", "config")})
    masking.observe(cache, [name])
    limits = [SNAPSHOT_CELL_CHARS] + [lim.cell_chars for lim in _TIGHTER]
    assert limits == [60, 30, 16]
    for snapshot in [cache.snapshot(name)] + [_describe(frame, lim) for lim in _TIGHTER]:
        shown = json.dumps(masking.mask_snapshot(snapshot))
        assert "vault code" not in shown and "VAULT CODE" not in shown, shown
        assert "alexandra" not in shown and "bo@x.org" not in shown
        assert denied_text("restricted") in shown


def test_a_known_value_cut_shorter_than_the_named_minimum_is_not_guessed():
    masker = Masker()
    masker.learn_column("c", "name", ColumnClass("pii", "config"), ["Northwind Traders Ltd"])
    assert KNOWN_PREFIX_MIN_CHARS == 8
    assert masker.mask_text("North... is a region").text == "North... is a region"
    assert "Northwind" not in masker.mask_text("Northwind Tra... bought").text


def test_a_long_email_printed_cut_reaches_the_model_without_its_name(tmp_path):
    code = ("import pandas as pd\n"
            f"df = pd.DataFrame({{'email': [{LONG_EMAIL!r}, {LONG_LOCAL!r}], 'n': [1, 2]}})\n"
            "save('people', df)\nprint(df)\nprint(df.email.str[:20] + '...')")
    turns = [{"tool_calls": [call("python_interpreter", code=code)]},
             {"tool_calls": [call("python_interpreter", code="print(people)")]}, {"text": "done"}]
    _, sent = scripted_run(tmp_path, turns)
    assert "..." in sent
    for name_part in ("alexandra", "konstantinopoulou", "vanderbilt"):
        assert name_part not in sent


# -- the whole path: a sandboxed call, litellm over HTTP, the scripted server -----------------------


def test_a_count_beside_a_small_integer_reaches_the_model_unchanged(server, tmp_path):
    from harness_magic import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    server.replies = [{"tool_calls": [{"id": "c1", **call("python_interpreter",
                                                          code="print('call', 3, 100000)\nprint(3, 100000)")}]},
                      {"text": "done"}]
    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", sleep=lambda s: None)
    session = AgentSession(AgentConfig(model="openai/test-model", run_dir=str(tmp_path / "runs"), planner=False,
                                       reminders=False), adapter=adapter)  # the default masking and sandbox
    try:
        result = session.ask("count them")
    finally:
        session.close()
    assert result.status == "completed", result.error
    assert session.masking.masker.active
    tool_message = json.dumps(server.requests[-1]["messages"][-1])
    assert "call 3 100000" in tool_message and "\\n3 100000" in tool_message
    log = "\n".join(p.read_text() for p in (tmp_path / "runs").rglob("*.jsonl"))
    assert '"masking_applied"' not in log


# -- a visible mark (issue 36 point 2) --------------------------------------------------------------


def test_a_masked_tool_result_is_marked_with_class_and_count_in_the_live_view_and_the_log(tmp_path):
    pytest.importorskip("ipywidgets")
    from rich.console import Console

    from harness_magic.core.export import RunRecorder, export_runs
    from harness_magic.core.export.views import tool_summary
    from harness_magic.notebook.render import TerminalRenderer
    from harness_magic.notebook.render.widgets import WidgetRunView

    turns = [{"tool_calls": [call("python_interpreter", code="print('ann.lee@acme-mail.com', 'bo@x.org', "
                                                             "'4111 1111 1111 1111')")]},
             {"tool_calls": [call("python_interpreter", code="print('call', 3, 100000)")]},
             {"text": "done"}]
    recorder, screen = RunRecorder(), io.StringIO()
    view = WidgetRunView()  # the notebook's live view
    try:
        scripted_run(tmp_path, turns, recorder,
                     TerminalRenderer(Console(file=screen, force_terminal=False, color_system=None, width=160)), view)
        titles = [accordion.get_title(0) for accordion, _, _ in view.transcript.tools.values()]
    finally:
        view.close()
    assert "masked: 1 financial, 2 pii" in titles[0] and "masked" not in titles[1]
    masked_call, plain_call = recorder.records[-1].tools
    assert masked_call.masked == {"pii": 2, "financial": 1} and plain_call.masked == {}
    assert "masked: 1 financial, 2 pii" in tool_summary(masked_call)
    assert "masked" not in tool_summary(plain_call)
    shown = screen.getvalue()
    assert "masked: 1 financial, 2 pii" in shown and shown.count("masked:") == 1  # the live view, on that call
    html = export_runs(recorder.records, tmp_path / "run.html").read_text()
    assert "masked: 1 financial, 2 pii" in html
    events = [json.loads(line) for p in (tmp_path / "runs").rglob("*.jsonl") for line in p.read_text().splitlines()]
    applied = [e for e in events if e.get("name") == "masking_applied"]
    assert [(e["tool_use_id"], e["counts"]) for e in applied] == [(masked_call.id, {"financial": 1, "pii": 2})]
