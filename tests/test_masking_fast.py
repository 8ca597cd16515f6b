"""Spec (issue 35 point 4): masking printed output takes its fast paths without changing a verdict.

* **E-mails are validated once per domain.** An address whose local part is plain ASCII dot-atom is valid
  exactly when ``email-validator`` accepts its domain and the address is within ``EMAIL_MAX_CHARS``; any
  other address is given to the validator whole. Both ways agree on every address, hostile ones included
  (dots at the edges or doubled, labels starting or ending with a hyphen, Punycode, special-use domains,
  over-long labels and addresses, capitals, non-ASCII letters, quotes).
* **Cards are checked by Luhn in place.** The check agrees with ``stdnum.luhn`` on every digit text,
  empty and non-ASCII digits included.
* **A column's verdict is read from as few sampled values as decide it.** Classification stops once the
  values left cannot change its verdict and gives what reading all ``DETECT_SAMPLE_VALUES`` gives: for
  columns mostly of one kind, split evenly between two kinds, empty at the top, or with the kind only at the end.
* **Forgetting verdicts changes no verdict.** ``clear_verdict_memos`` (a benchmark's first pass) only drops
  the memos.
* **A printed number is looked up by value only when its digits can be a known number's.** The significant
  digits read from the text are those of its exact value, in every format the masker reads (thousands,
  underscores, exponents, leading and trailing zeros); a number past Decimal's exponents is no value and
  never stops masking.
* **A pseudonym continues a keyed state.** The state that absorbed the key, the kind and the cut mark is kept
  and copied for each value: the pseudonym is the one the one-shot keyed digest of the whole text gives, the
  same at every call, and different for a cut value and another kind.
* **ASCII text is hinted on its character classes.** The lines a scan reads in an ASCII text are the lines
  the Unicode character classes give for the same text (one translation, then literal scans).

Performance is measured in ``benchmarks/bench_masking.py``, never here.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections import Counter

from stdnum import luhn

from harness_magic.core.text.masking import (
    _NUMBER,
    ColumnClass,
    Masker,
    _printed_digits,
    _shaped,
    _significant_digits,
    number_key,
)
from harness_magic.core.text.sensitivity import (
    DETECT_MIN_SHARE,
    DETECT_SAMPLE_VALUES,
    EMAIL_MAX_CHARS,
    _email_accepted,
    _digits,
    _email_valid,
    _hinted_lines,
    _luhn_valid,
    classify_cell,
    classify_column,
    clear_verdict_memos,
    find_sensitive,
    is_missing,
)

HOSTILE_EMAILS = [
    "a@b.co", "jane.doe@corp-mail.com", "Jane.Doe@CORP-MAIL.COM", "x+tag%1@mail.example.org",
    ".lead@ok.com", "trail.@ok.com", "dou..ble@ok.com", "a@-lead.com", "a@trail-.com", "a@ab--cd.com",
    "a@xn--bcher-kva.com", "a@xn--zz.com", "a@xn--.com", "a@host.local", "a@my.localhost", "a@x.invalid",
    "a@x.onion", "a@x.test", "a@1.in-addr.arpa", "a@example.com", "a@" + "l" * 63 + ".com",
    "a@" + "l" * 64 + ".com", "a" * 64 + "@ok.com", "a" * 65 + "@ok.com",
    "a@" + ".".join(["abcdefghij"] * 22) + ".com", "b" * 60 + "@" + ".".join(["abcdefghij"] * 17) + ".com",
    "bé@ok.com", "b@ok.cöm", "b@ök.com", '"quoted"@ok.com', "a@b", "a@b.c", "@ok.com", "a@@ok.com",
    "a@ok..com", "a@.ok.com", "a_b@ok_ok.com", "-@ok.com", "%@ok.com", "a@ok.com.", "a@123.com", "a@ok.c0m",
]
LOCAL_CHARS = string.ascii_letters + string.digits + "._%+-"
DOMAIN_CHARS = string.ascii_lowercase + string.digits + "-."


def test_an_email_is_valid_by_its_domain_exactly_when_the_validator_accepts_it_whole():
    rng = random.Random(35)
    generated = []
    for _ in range(3_000):
        local = "".join(rng.choice(LOCAL_CHARS) for _ in range(rng.randint(1, 12)))
        domain = "".join(rng.choice(DOMAIN_CHARS) for _ in range(rng.randint(1, 14)))
        generated.append(f"{local}@{domain}.{rng.choice(['com', 'io', 'local', 'test', 'c', 'Org', 'x1'])}")
    for address in HOSTILE_EMAILS + generated:
        assert _email_valid(address) == _email_accepted(address), address


def test_the_longest_valid_address_is_kept_and_one_character_more_is_refused():
    domain = ".".join(["abcdefghij"] * 20) + ".com"  # 224 characters: each label valid
    local = "c" * (EMAIL_MAX_CHARS - 1 - len(domain))
    assert _email_valid(f"{local}@{domain}") and _email_accepted(f"{local}@{domain}")
    assert not _email_valid(f"c{local}@{domain}") and not _email_accepted(f"c{local}@{domain}")


def test_a_domain_found_valid_once_does_not_pass_a_bad_local_part_or_a_special_use_domain():
    assert _email_valid("first@shared-mail.com")
    for address in ("dou..ble@shared-mail.com", ".lead@shared-mail.com", "trail.@shared-mail.com",
                    '"a b"@shared-mail.com'):
        assert not _email_valid(address), address
    assert _email_valid("jürgen@shared-mail.com") == _email_accepted("jürgen@shared-mail.com")  # the validator's say
    assert not _email_valid("first@shared-mail.local")
    found = [(f.kind, f.value) for f in find_sensitive("to first@shared-mail.com, cc last@shared-mail.local")]
    assert found == [("email", "first@shared-mail.com")]


def test_the_luhn_check_agrees_with_stdnum_on_every_digit_text():
    rng = random.Random(4111)
    texts = ["".join(rng.choice(string.digits) for _ in range(rng.randint(0, 20))) for _ in range(20_000)]
    texts += ["", "0", "4111111111111111", "4111111111111112", "٤١١١١١١١١١١١١١١١", "4111 1111 1111 1111", "12a"]
    for text in texts:
        assert _luhn_valid(text) == luhn.is_valid(text), text


def every_value_read(values: list) -> str | None:
    """The verdict as the contract states it: the kind most of the first sampled non-empty values have."""
    kept = [v for v in values[:DETECT_SAMPLE_VALUES]
            if not is_missing(v) and not (isinstance(v, str) and not v.strip())]
    kinds = Counter(kind for kind in map(classify_cell, kept) if kind is not None)
    if not kinds:
        return None
    kind, n = kinds.most_common(1)[0]  # a tie goes to the kind met first, as in classify_column
    return kind if n / len(kept) >= DETECT_MIN_SHARE else None


CELLS = {"email": "ann.lee@corp-mail.com", "phone": "+44 20 7946 0958", "card": "4111111111111111",
         "other": "order 17", "number": 1234, "empty": None, "blank": "  "}


def test_a_column_verdict_read_early_is_the_verdict_of_every_sampled_value():
    rng = random.Random(200)
    columns = [["email"] * 101 + ["other"] * 99, ["email"] * 100 + ["phone"] * 100, ["phone"] * 100 + ["email"] * 100,
               ["empty"] * 150 + ["card"] * 50, ["other"] * 99 + ["card"] * 101, ["other"] * 100 + ["card"] * 100,
               ["card"] * 50, ["other"] * 300 + ["email"] * 300, ["blank"] * 199 + ["email"], [],
               ["email", "phone"] * 150, ["number"] * 120 + ["card"] * 80]
    for _ in range(400):
        mix = rng.sample(list(CELLS), rng.randint(1, 4))
        columns.append([rng.choice(mix) for _ in range(rng.randint(0, 260))])
    for names in columns:
        values = [CELLS[name] for name in names]
        assert classify_column(values) == every_value_read(values), names
        assert classify_column(iter(values)) == every_value_read(values), names  # any iterable, read once


def test_forgetting_verdicts_changes_no_verdict():
    text = "mail ann.lee@corp-mail.com, card 4111 1111 1111 1111, call +44 20 7946 0958 or 020 7946 0958"
    before = [(f.kind, f.value) for f in find_sensitive(text)]
    clear_verdict_memos()
    assert [(f.kind, f.value) for f in find_sensitive(text)] == before
    assert [kind for kind, _ in before] == ["email", "card", "phone"]


def test_the_digits_of_a_text_are_read_the_same_whatever_its_script():
    rng = random.Random(12)
    texts = ["".join(chr(rng.randrange(0, 130)) for _ in range(rng.randint(0, 30))) for _ in range(5_000)]
    texts += ["+44 20 7946 0958", "(212) 555-0134", "+44 20 ٧٩٤٦ 0958", "４１１１", "x²y", ""]
    for text in texts:
        assert _digits(text) == "".join(ch for ch in text if ch.isdigit()), text


ASCII_PIECES = ["a@b.co", "+44 20 7946 0958", "(212) 555-0134", "1.2.3.4", "123-45-6789", "GB82WEST12345698765432",
                "DE89 3704", "AB12", "ab12", "fe80::1", "a:XY:", "::", "2024-01-05", "12:30", "-------", "0000000",
                "123456", "1234567", "12 34 56 7", "(((1)))", "9.9.9", "\n", " ", "x", "ZZ", "99", "order ok"]


def test_an_ascii_text_is_hinted_on_the_same_lines_as_by_the_unicode_classes():
    rng = random.Random(7)
    for _ in range(2_000):
        text = "".join(rng.choice(ASCII_PIECES) for _ in range(rng.randint(1, 25)))
        unicode_path = text + "\né"  # one non-ASCII character: the hints read the text with their own classes
        expected = [(start, end) for start, end in _hinted_lines(unicode_path) if end <= len(text)]
        assert _hinted_lines(text) == expected, text


def test_values_in_printed_lines_are_masked_the_same_on_the_fast_paths():
    masker = Masker()
    lines = ["    10 customer person.10@acme-mail.com updated at 2024-01-11 12:10",
             "    11 order ok amount=77.11 region=north items=11 status=shipped",
             "    21 customer 4111 1111 1111 1111 updated", "    31 customer +1 212-555-0031 updated",
             "    41 customer 4111 1111 1111 1112 updated", "    51 customer a@host.local updated"]
    masked = masker.mask_text("\n".join(lines))
    assert masked.counts == {"pii": 2, "financial": 1}
    out = masked.text.splitlines()
    assert "person.10@acme-mail.com" not in out[0] and "@" in out[0]
    assert out[1] == lines[1] and out[4] == lines[4] and out[5] == lines[5]  # no value there: untouched
    assert "4111 1111 1111 1111" not in out[2] and out[2].endswith("1111 updated")  # last four kept
    assert "212-555-0031" not in out[3]


NUMBER_PIECES = ["1", "2", "0", "00", "9", ",", ".", "_", "e", "E", "-", "+", "5", "a", " ", "05", "1,234", ".5",
                 "9.9e4", "0.001", "e999999", "٣"]


def test_the_digits_read_from_a_printed_number_are_those_of_its_value():
    rng = random.Random(31)
    checked = 0
    for _ in range(20_000):
        text = "".join(rng.choice(NUMBER_PIECES) for _ in range(rng.randint(1, 10)))
        for number in _NUMBER.findall(text):
            key = number_key(number)
            if key is not None and number.isascii():
                assert _printed_digits(number) == _significant_digits(key), number
                checked += 1
    assert checked > 1_000


def test_known_amounts_are_masked_in_every_format_and_a_huge_exponent_is_left_alone():
    masker = Masker()
    masker.learn_column("deals", "amount", ColumnClass("financial", "config"), [99000.5, 9.95, 1200])
    text = "99,000.50 9.90005e4 99_000.5 -99000.5 9.950 1.2e3 1,200.00 990005 9.95e1000000 9.9e415000005 1201"
    masked = masker.mask_text(text)
    assert masked.counts == {"financial": 7}
    assert masked.text.split()[7:] == ["990005", "9.95e1000000", "9.9e415000005", "1201"]


def test_a_pseudonym_is_the_keyed_digest_of_its_kind_cut_mark_and_value_at_every_call():
    key = bytes(range(32))
    masker = Masker(key=key)
    values = ["ann.lee@corp-mail.com", "4111 1111 1111 1111", "+44 20 7946 0958", "123-45-6789", "Ann Lee", "", "é"]
    for kind in ("email", "card", "phone", "national_id", "iban", "ip", "pii", "restricted"):
        for cut in (False, True):
            for value in values:
                digest = hashlib.blake2b(f"{kind}\0{'cut' if cut else ''}\0{value}".encode(), key=key).digest()
                expected = _shaped(kind, value, digest, cut)
                assert masker.pseudonym(kind, value, cut=cut) == expected == masker.pseudonym(kind, value, cut=cut)
        assert masker.pseudonyms(kind, values) == [masker.pseudonym(kind, value) for value in values]
    assert masker.pseudonym("pii", "Ann Lee") != masker.pseudonym("restricted", "Ann Lee")
    assert masker.pseudonym("pii", "Ann Lee") != masker.pseudonym("pii", "Ann Lee", cut=True)
