"""A line typed at the terminal, read with a deadline: the prompt a timeout can cancel.

``input()`` cannot be taken back: once called it waits for Enter whatever the
run decided meanwhile. :func:`read_line` waits with ``select()`` on the
terminal instead, so the deadline ends it; whatever was typed and not sent by
then is discarded from the terminal's input queue (``tcflush``), so half an
answer cannot become the next IPython command. Ctrl-C ends it the same way.
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import IO, Any

__all__ = ["read_line", "MAX_TYPED_BYTES"]

MAX_TYPED_BYTES = 16_384
"""Bytes kept of one typed line; the answer is cut far shorter (a paste gone wrong is not kept whole)."""


def _discard_typed(fd: int) -> None:
    try:
        import termios

        if os.isatty(fd):
            termios.tcflush(fd, termios.TCIFLUSH)
    except (ImportError, OSError):
        pass


def read_line(prompt: str, timeout_s: float | None, *, stdin: IO[Any] | None = None,
              stdout: IO[str] | None = None) -> str | None:
    """Show ``prompt`` and return the line typed (without its newline) within ``timeout_s`` seconds.

    None at the end of input (nobody can type). TimeoutError when the time
    passes and KeyboardInterrupt on Ctrl-C; either way the unsent text is
    discarded and the cursor left on a fresh line.
    """
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    fd = stdin.fileno()
    stdout.write(prompt)
    stdout.flush()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    typed = b""
    try:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(timeout_s)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue  # the deadline check above ends the wait
            chunk = os.read(fd, 4096)
            if not chunk:
                return typed.decode("utf-8", "replace") if typed else None
            newline = chunk.find(b"\n")
            typed += (chunk if newline < 0 else chunk[:newline])[: MAX_TYPED_BYTES - len(typed)]
            if newline >= 0:  # the rest of an over-long line was read and dropped on the way
                return typed.decode("utf-8", "replace").rstrip("\r")
    except (TimeoutError, KeyboardInterrupt):
        _discard_typed(fd)
        stdout.write("\n")
        stdout.flush()
        raise
