"""Spec (issue 35 point 4): masking's slow paths are gone without losing a value.

* **Printed output is scanned line by line where it can hold a value.** A line
  with no ``@``, no run of seven digits and separators, no IBAN start and no
  two colons holds nothing :func:`find_sensitive` validates, so only the other
  lines get the full pattern; what is found is exactly what a scan of the whole
  text finds, whatever the text (hostile compositions included).
* **Known values are found by one structure.** Span lookups in a dict for a
  short text right after learning, one Aho-Corasick automaton otherwise: both
  give the same spans — whole words only, the longest of those starting at one
  place, left to right — for values inside words, prefixes of each other,
  overlapping, next to letters of other scripts, or edged with punctuation.
* **A frame is classified from a sample.** At most ``CLASSIFY_SAMPLE_ROWS``
  rows spread over the frame decide the classes (so a column empty at the top
  is still classified); the values of the first ``SCAN_ROWS`` rows of each
  classified column are tracked, as before. A sensitive value only in rows
  outside the sample leaves its column unclassified: a pattern still masks it
  (an e-mail), a name is not tracked (pseudonyms at entry are the layer that
  covers it by construction).

Performance is measured in ``benchmarks/bench_masking.py``, never here.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.control.masking import CLASSIFY_SAMPLE_ROWS, SCAN_ROWS, SessionMasking
from harness_magic.core.text.masking import DIRECT_SCAN_MAX, ColumnClass, Masker
from harness_magic.core.text.sensitivity import _hinted_lines, _scan, find_sensitive

VALUES = ["a@b.co", "x.y+z@mail.example.org", "+44 20 7946 0958", "212-555-0134", "(212) 555-0134",
          "4111 1111 1111 1111", "4111111111111111", "378282246310005", "123-45-6789", "10.0.0.1", "fe80::1:2:3",
          "2001:db8::1", "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "5500 0000 0000 0004"]
GLUE = ["...", "…", "\n", "\r\n", " ", "-", ".", "(", ")", "+", ":", "2024-01-05", "12:30", "99,000.50", "ann", "é",
        "_", "@", "12", "1234567", "0", "person.3@acme-mail.", "+1 212", "\t", "x" * 70]


def as_tuples(found) -> list[tuple]:
    return [(f.start, f.end, f.kind, f.value, f.cut) for f in found]


def test_the_hinted_scan_finds_exactly_what_a_whole_text_scan_finds():
    rng = random.Random(35)
    texts = ["".join(rng.choice(VALUES + GLUE) for _ in range(rng.randint(1, 30))) for _ in range(3_000)]
    texts += ["", "\n\n", "call +44 20 7946 0958\nmail a@b.co", "a@b.co\n4111 1111 1111 1111\n"]
    for text in texts:
        assert as_tuples(find_sensitive(text)) == as_tuples(_scan(text, [(0, len(text))])), text


def test_lines_of_counts_and_amounts_are_not_scanned_but_a_value_among_them_is_found():
    table = "".join(f"{i:>8} order ok amount={i * 7 % 1000}.{i % 100:02d} items={i % 13}\n" for i in range(2_000))
    values = {"email": "jane.doe@corp-mail.com", "phone": "+44 20 7946 0958", "card": "4111 1111 1111 1111",
              "iban": "DE89 3704 0044 0532 0130 00", "ip": "2001:db8::1", "national_id": "123-45-6789"}
    lines = table.splitlines(keepends=True)
    for offset, value in enumerate(values.values()):
        lines.insert(300 * offset + 7, f"customer {value} updated\n")
    text = "".join(lines)
    assert len(_hinted_lines(text)) == len(values)  # only the customer lines are scanned in full
    assert {(f.kind, f.value) for f in find_sensitive(text)} == {(k, v) for k, v in values.items()}


def known_masker(values: list[str]) -> Masker:
    masker = Masker()
    masker.learn_column("people", "name", ColumnClass("restricted", "config"), values)
    return masker


HOSTILE_KNOWN = ["Ann", "Ann Lee", "Lee Ann", "Ann Smith", "(212) 555", "-x-", "Åsa", "snake_case_id",
                 "O'Brien", "vault-code-0000001", "vault-code-00000012", "日本語テキスト"]
HOSTILE_TEXTS = ["Annette met Ann and Ann Lee", "Lee Ann Smith", "éAnn Ann_ Ann. _Ann",
                 "call (212) 555 or (212) 5555", "a-x-b -x- x-x-x", "Åsa Åsaa bÅsa", "snake_case_id snake_case_ids", "O'Brien's O'Briens",
                 "vault-code-00000012 vault-code-0000001 vault-code-000000123", "日本語テキスト。日本語テキストだ",
                 "Ann Lee Ann Smith", "AnnAnn Ann\nAnn", ""]


def test_known_values_are_found_alike_by_span_lookups_and_by_the_automaton():
    masker = known_masker(HOSTILE_KNOWN)
    known = masker._known
    for text in HOSTILE_TEXTS + [" ".join(HOSTILE_TEXTS)]:
        assert known.spans(text, direct=True) == known.spans(text, direct=False), text
    assert [v for _, _, v in known.spans("Lee Ann Smith", direct=False)] == ["Lee Ann"]  # leftmost, then longest
    assert [v for _, _, v in known.spans("Annette met Ann and Ann Lee")] == ["Ann", "Ann Lee"]  # never in a word
    assert [v for _, _, v in known.spans("日本語テキスト。日本語テキストだ")] == ["日本語テキスト"]  # だ is a letter


def test_values_learned_after_the_automaton_was_built_are_found_in_a_long_text():
    masker = known_masker([f"vault-code-{i:07d}" for i in range(1_000)])
    filler = "ordinary words and numbers 12 34\n" * 2_000  # long: the automaton, not span lookups
    assert len(filler) * 2 > DIRECT_SCAN_MAX
    assert "vault-code-0000999" not in masker.mask_text(filler + "vault-code-0000999\n").text
    masker.learn_column("people", "name", ColumnClass("restricted", "config"), ["Zebulon Quirke"])
    masked = masker.mask_text(filler + "signed by Zebulon Quirke\n")
    assert "Zebulon" not in masked.text and masked.counts == {"restricted": 1}


def test_bulk_learning_strips_values_and_skips_pseudonyms_and_short_ones():
    masker = Masker()
    masker.register_pseudonym("real.person@corp-mail.com", "user-1234abcd@abcdef.com", "pii")
    masker.learn_column("h", "c", ColumnClass("pii", "config"),
                        ["  Ann Lee  ", "Ann Lee", "xy", "user-1234abcd@abcdef.com", None, float("nan")])
    assert "Ann Lee" in masker._known.values and "xy" not in masker._known.values
    assert "user-1234abcd@abcdef.com" not in masker._known.values
    assert "user-1234abcd@abcdef.com" in masker.mask_text("to user-1234abcd@abcdef.com").text


# -- classification from a sample ---------------------------------------------------------------------

ROWS = 250_000


def sample_positions(rows: int) -> set[int]:
    step = (rows - 1) / (CLASSIFY_SAMPLE_ROWS - 1)
    return {round(i * step) for i in range(CLASSIFY_SAMPLE_ROWS)}


@pytest.fixture(scope="module")
def big_frame() -> pd.DataFrame:
    outside = next(i for i in range(SCAN_ROWS // 2, ROWS) if i not in sample_positions(ROWS))
    comment = ["fine"] * ROWS
    comment[outside] = "jane.doe@corp-mail.com"
    late = [None] * SCAN_ROWS + [f"late.{i}@corp-mail.com" for i in range(ROWS - SCAN_ROWS)]
    frame = pd.DataFrame({
        "id": range(ROWS),
        "email": [f"person.{i}@acme-mail.com" for i in range(ROWS)],
        "note": [f"Given{i} Family{i}" for i in range(ROWS)],
        "comment": comment,
        "late_email": late,
        "city": ["Lisbon", "Porto"] * (ROWS // 2),
    })
    frame.attrs["outside"] = outside
    return frame


def observed(frame: pd.DataFrame) -> tuple[SessionMasking, str]:
    cache = SessionCache()
    name = cache.put("customers", frame)
    masking = SessionMasking(lambda: {}, lambda: {"customers.note": ColumnClass("restricted", "config")})
    masking.observe(cache, [name])
    return masking, name


def test_a_huge_frame_is_classified_right_from_a_sample(big_frame):
    masking, name = observed(big_frame)
    classes = masking.column_classes(name)
    assert {column: (c.cls, c.source, c.kind) for column, c in classes.items()} == {
        "email": ("pii", "detected", "email"),
        "note": ("restricted", "config", None),
        "late_email": ("pii", "detected", "email"),  # empty at the top: the sample is spread over the frame
    }
    # the first SCAN_ROWS rows of a classified column are tracked, as before the sample
    text, counts = masking.mask(f"owner Given{SCAN_ROWS - 1} Family{SCAN_ROWS - 1}, first Given0 Family0")
    assert "Given" not in text and counts == {"restricted": 2}


def test_a_sensitive_value_only_outside_the_sample_is_masked_by_its_pattern_not_tracked(big_frame):
    masking, name = observed(big_frame)
    assert "comment" not in masking.column_classes(name)  # one e-mail in 250,000 rows: not the column's kind
    text, counts = masking.mask("the comment was jane.doe@corp-mail.com")
    assert "jane.doe" not in text and counts == {"pii": 1}  # the pattern finds it wherever it is printed
    assert masking.masker.known_values <= SCAN_ROWS * 2  # note and email of SCAN_ROWS rows; late_email's top is empty
    late, _ = masking.mask(f"Given{ROWS - 1} Family{ROWS - 1}")  # past SCAN_ROWS: not tracked (entry covers it)
    assert late == f"Given{ROWS - 1} Family{ROWS - 1}"


def test_a_known_amount_is_found_in_a_long_text_in_any_format_and_in_other_digits():
    masker = Masker()
    masker.learn_column("deals", "amount", ColumnClass("financial", "config"), [99000.5, 1234567])
    filler = "".join(f"{i:>8} order ok amount={i % 1000}.{i % 100:02d}\n" for i in range(3_000))
    assert masker.mask_text(filler).text == filler  # none of their digits: not one number read
    for printed in ("99000.5", "99,000.50", "9.90005e4", "9.90005e+04", "99_000.5", "-99000.50", "1,234,567",
                    "1.234567e6", "٩٩٠٠٠.٥"):
        masked = masker.mask_text(filler + f"total {printed} due\n")
        assert printed not in masked.text and masked.counts == {"financial": 1}, printed


@pytest.mark.parametrize("kind", ["email", "phone", "card", "pii", "restricted", "financial"])
def test_the_bulk_pseudonyms_of_a_column_are_the_one_by_one_pseudonyms(kind):
    """Entry conceals a column with :meth:`Masker.pseudonyms` (a keyed state copied per value) and the scanner
    masks a printed value with :meth:`Masker.pseudonym`: both must give the same stand-in for the same value,
    or a pseudonym the model read in a frame would not match the one in a printed line."""
    masker = Masker(key=b"\x07" * 32)
    values = {"email": ["ana.lima@example.com", "x@y.org", "ünï@exämple.de"],
              "phone": ["+44 20 7946 0958", "+1 415 555 2671"],
              "card": ["4111 1111 1111 1111", "3400 0000 0000 009"]}.get(kind, ["Ana Lima", "", "名前", "a" * 500])
    assert masker.pseudonyms(kind, values) == [masker.pseudonym(kind, value) for value in values]
