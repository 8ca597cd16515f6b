"""Every ``except Exception`` in the package says why it is broad.

A broad except turns every bug inside its ``try`` into whatever the handler
does, so each one carries its reason: on its own line (a comment with words
beyond a linter's ``noqa`` code) or in a comment line right above it.
(``except BaseException`` is not counted: the package uses it to clean up and re-raise.)
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "harness_magic"
BROAD = re.compile(r"^\s*except\s+Exception\b")
NOQA = re.compile(r"noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?")


def unexplained(text: str) -> list[int]:
    """Line numbers of broad excepts in ``text`` with no reason beside or above them."""
    lines = text.split("\n")
    found = []
    for index, line in enumerate(lines):
        code = line.split("#", 1)[0]
        if not BROAD.search(code):
            continue
        beside = NOQA.sub("", line.split("#", 1)[1]).strip(" -:") if "#" in line else ""
        above = lines[index - 1].strip() if index else ""
        if not re.search(r"[A-Za-z]{3}", beside) and not above.startswith("#"):
            found.append(index + 1)
    return found


def test_the_checker_finds_a_bare_broad_except_and_accepts_a_reason():
    bare = "try:\n    x()\nexcept Exception:\n    pass\n"
    noqa_only = "try:\n    x()\nexcept Exception:  # noqa: BLE001\n    pass\n"
    beside = "try:\n    x()\nexcept Exception:  # noqa: BLE001 - the pipe may be gone\n    pass\n"
    above = "try:\n    x()\n# the driver raises many unrelated types\nexcept Exception as exc:\n    raise E from exc\n"
    named = "try:\n    x()\nexcept Exception as exc:\n    log(exc)\n"
    assert unexplained(bare) == [3] and unexplained(noqa_only) == [3] and unexplained(named) == [3]
    assert unexplained(beside) == [] and unexplained(above) == []
    assert unexplained("text = 'except Exception:'\n# except Exception: in a comment\n") == []


def test_every_broad_except_in_the_package_says_why():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{number}"
                 for path in sorted(PACKAGE.rglob("*.py")) for number in unexplained(path.read_text(encoding="utf-8"))]
    assert offenders == [], "say beside each why it is broad (or narrow it): " + ", ".join(offenders)
