"""Waiting for a worker's reply: one loop keeps the wall-clock limit and the memory limit, and relays output.

:func:`await_reply` reads the reply pipe (non-blocking, a read at a time through the
worker's :class:`~.protocol.FrameReader`), so a worker that sends half a frame and stalls, or
trickles bytes while it allocates, still meets both limits: they are checked
every :data:`WATCHDOG_INTERVAL_S` on this same loop whether or not bytes
arrived (a flood of frames cannot starve the check). Memory counts anonymous
plus shared resident memory, memfds and deleted files the worker holds open,
and the bytes in its scratch directory. A worker past a limit is killed here
(scratch emptied when the limit was memory) and the loop answers with a
:class:`WorkerLost` saying why; restarting it is the caller's business.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness_magic.core.execution.sandbox.scratch import clear_directory, directory_bytes
from harness_magic.core.execution.sandbox.worker_handle import WorkerHandle

__all__ = [
    "await_reply",
    "WorkerLost",
    "MemoryLimits",
    "OutputRelay",
    "ReplyWatch",
    "WATCHDOG_INTERVAL_S",
    "STREAM_MAX_CHARS",
    "STREAM_RELAY_INTERVAL_S",
]

WATCHDOG_INTERVAL_S = 0.05
"""How often the parent samples the worker's memory while it runs (also while a reply is arriving)."""

SCRATCH_SCAN_EVERY = 4
"""Scratch is walked every this many watchdog ticks: a directory walk costs more than a /proc read."""

SCRATCH_MAX_FILES = 10_000
"""More scratch entries than this count as over the limit: keeps each walk short."""

STREAM_MAX_CHARS = 64_000
"""Streamed output characters handed on per call: past this, output frames are read and dropped."""

STREAM_RELAY_INTERVAL_S = 0.1
"""Streamed text is handed to the callback at most this often: a frame flood cannot flood the display."""


@dataclass(frozen=True)
class WorkerLost:
    """The call lost its worker (killed here, or it died); ``why`` is the sentence for the model."""

    why: str


@dataclass(frozen=True)
class MemoryLimits:
    """What one worker may hold while it runs."""

    rss_limit: int
    """Anonymous + shared memory + memfds and deleted files held open + scratch bytes."""
    scratch_max_bytes: int
    """Scratch bytes alone."""
    scratch_dir: str
    """The worker's scratch directory (walked, and emptied when a limit is crossed)."""


def await_reply(worker: WorkerHandle, seq: int, timeout: float, limits: MemoryLimits,
                on_output: Callable[[str], None] | None = None) -> dict[str, Any] | WorkerLost:
    """The first frame of call ``seq`` that is not output (its result, or a failure report), or why it was lost.

    ``output`` frames of this call go to ``on_output`` (see :class:`OutputRelay`),
    flushed before this returns whatever the outcome; a ``result`` frame for
    another ``seq`` (stale or forged) is dropped and the wait goes on.
    """
    started = time.monotonic()
    frames = worker.frames
    first = None
    if timeout > WATCHDOG_INTERVAL_S and not frames.pending and worker.reply_readable(WATCHDOG_INTERVAL_S):
        # The usual quick call: its reply, alone, within the first watchdog interval (no check is due before it
        # ends). Anything else read here (output, a stale result, a failure report) goes on to the loop, which
        # also meets a closed pipe again (a pipe closed stays at EOF).
        try:
            first = frames.feed()
        except EOFError:
            first = None
        if first is not None and first.get("op") == "result" and first.get("seq") == seq:
            return first
    relay = OutputRelay(seq, on_output)
    try:
        return ReplyWatch(worker, limits).wait(seq, timeout, relay, started=started, first=first)
    finally:
        relay.flush()  # what was printed before the end, the interrupt or the kill


class ReplyWatch:
    """One call's wait: the deadline, and the worker's memory sampled every :data:`WATCHDOG_INTERVAL_S`."""

    def __init__(self, worker: WorkerHandle, limits: MemoryLimits) -> None:
        self.worker, self.limits = worker, limits
        self.scratch_bytes: int | None = 0
        self.held_bytes = 0

    def wait(self, seq: int, timeout: float, relay: OutputRelay, *, started: float | None = None,
             first: dict[str, Any] | None = None) -> dict[str, Any] | WorkerLost:
        """The reply to call ``seq`` (see :func:`await_reply`), the clocks running from ``started`` (default:
        now); ``first``: a frame already read for this call, taken before any other."""
        worker, limits, frames = self.worker, self.limits, self.worker.frames
        if started is None:
            started = time.monotonic()
        deadline, next_check = started + timeout, started + WATCHDOG_INTERVAL_S  # a quick reply pays for no check
        tick = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                worker.kill()
                return WorkerLost(f"the code ran past the {timeout:g}-second time limit and was stopped")
            # Frames a read brought with the last one first (poll does not see them), else at most one read.
            frame: dict[str, Any] | None = first
            if frame is None:
                frame = frames.take()
            first = None
            if frame is None and worker.reply_readable(min(WATCHDOG_INTERVAL_S, left)):
                try:
                    frame = frames.feed()
                except EOFError:
                    if worker.cgroup is not None and worker.cgroup.oom_killed():
                        clear_directory(limits.scratch_dir)
                        return WorkerLost(
                            f"the code went over the {limits.rss_limit / 2**20:.0f} MiB memory limit (stopped by "
                            "its memory cgroup); its scratch files were deleted")
                    return WorkerLost("the sandbox worker running this code died before the code finished")
            if frame is not None:
                op = frame.get("op")
                if op == "output":
                    relay.take(frame)
                elif op != "result" or frame.get("seq") == seq:
                    return frame
                # else a stale or forged result: the real reply follows (the watchdog still runs)
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + WATCHDOG_INTERVAL_S
            relay.tick()
            over = self.over_memory(scan_scratch=tick % SCRATCH_SCAN_EVERY == 0)
            tick += 1
            if over is not None:
                worker.kill()
                clear_directory(limits.scratch_dir)
                return WorkerLost(over + "; its scratch files were deleted")

    def over_memory(self, *, scan_scratch: bool) -> str | None:
        """Why the worker is over its memory limit (anonymous + shared + scratch bytes), or None."""
        limits = self.limits
        if scan_scratch:
            self.scratch_bytes = directory_bytes(limits.scratch_dir, SCRATCH_MAX_FILES)
            self.held_bytes = self.worker.held_file_bytes()
        used = self.worker.memory() + self.held_bytes
        scratch = self.scratch_bytes
        if scratch is None:
            return f"the code created more than {SCRATCH_MAX_FILES} scratch files"
        if scratch > limits.scratch_max_bytes:
            return (f"the code wrote {scratch / 2**20:.0f} MiB of scratch files, over the "
                    f"{limits.scratch_max_bytes / 2**20:.0f} MiB scratch limit")
        if used + scratch > limits.rss_limit:
            return (f"the code used {(used + scratch) / 2**20:.0f} MiB (memory, shared memory, memfds and "
                    f"scratch files), over the {limits.rss_limit / 2**20:.0f} MiB memory limit")
        return None


class OutputRelay:
    """Hands a call's ``output`` frames to ``on_output``: bounded, coalesced, never failing the call.

    Text of frames for another ``seq``, malformed frames and characters past
    ``STREAM_MAX_CHARS`` are dropped. Text is handed on at most every
    ``STREAM_RELAY_INTERVAL_S`` (and on :meth:`flush`), so a worker flooding
    tiny frames costs the display a bounded number of updates per second.
    """

    def __init__(self, seq: int, on_output: Callable[[str], None] | None) -> None:
        self.seq, self.on_output = seq, on_output
        self.taken = 0
        self.pending: list[str] = []
        self.last = 0.0

    def take(self, frame: dict[str, Any]) -> None:
        text = frame.get("text")
        if self.on_output is None or frame.get("seq") != self.seq or not isinstance(text, str) or not text:
            return
        room = STREAM_MAX_CHARS - self.taken
        if room <= 0:
            return
        text = text[:room]
        self.taken += len(text)
        self.pending.append(text)
        self.tick()

    def tick(self) -> None:
        """Hand pending text on if the interval has passed (called from the watchdog tick too)."""
        if self.pending and time.monotonic() - self.last >= STREAM_RELAY_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if not self.pending or self.on_output is None:
            return
        text, self.pending, self.last = "".join(self.pending), [], time.monotonic()
        try:
            self.on_output(text)
        except Exception as exc:  # noqa: BLE001 - the display is not the result
            warnings.warn(f"output callback failed: {exc!r}", RuntimeWarning)
