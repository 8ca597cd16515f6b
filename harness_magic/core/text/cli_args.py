"""Argument types shared by the package's command lines (``python -m harness_magic.evals``, ``.audit``).

Each raises :class:`argparse.ArgumentTypeError` naming the bad text, which
argparse turns into a one-line usage error.
"""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """``text`` as an integer of at least 1 (``--repeat 3``, ``-n 20``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
