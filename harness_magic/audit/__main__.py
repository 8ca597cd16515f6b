"""Command line: ``python -m harness_magic.audit verify|tail PATH``.

``verify PATH [--head HASH]`` checks the hash chain and prints ``PATH: ok, N records, head HASH``
or names the first broken record: ``PATH: line L: PROBLEM: why``, where PROBLEM is
``edited`` (content changed), ``deleted`` (a gap in the sequence), ``reordered``,
``forged`` (its previous-record hash does not match: inserted, or the record before
it rewritten), ``truncated`` (a last line cut short), ``malformed`` (not one strict
JSON object: a duplicate key, ``NaN``/``Infinity``, nesting deeper than a record's,
a line longer than any record) or ``head`` (``--head`` names a hash the chain no
longer reaches: records cut off the end). Only a regular file is read: a FIFO or
device named as PATH is refused (exit 2) instead of waiting on it.

``tail PATH [-n N]`` prints the last N records as JSON lines.

Exit status: 0 the chain verifies (``tail``: printed); 1 the chain is broken;
2 a usage error or an unreadable file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from harness_magic.core.text.cli_args import positive_int
from harness_magic.core.transcript.audit import read_tail, verify_file

EXIT_OK, EXIT_BROKEN, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness_magic.audit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="check the hash chain; name the first broken record")
    verify.add_argument("path")
    verify.add_argument("--head", help="a head hash printed by an earlier verify: the chain must still reach it")
    tail = sub.add_parser("tail", help="print the last records as JSON lines")
    tail.add_argument("path")
    tail.add_argument("-n", type=positive_int, default=20)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "verify":
            result = verify_file(args.path, head=args.head)
            print(result.message(args.path))
            return EXIT_OK if result.ok else EXIT_BROKEN
        os.lstat(args.path)  # a missing file is an error here, not an empty log (lstat never blocks on a FIFO)
        for record in read_tail(args.path, args.n):
            print(json.dumps(record, ensure_ascii=False))
        return EXIT_OK
    except OSError as exc:
        print(f"cannot read {args.path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
