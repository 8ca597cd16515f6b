"""Running a cell again: what each run did to the session, so a re-run can take its previous run back.

A notebook ties every ``%%agent`` run to its cell with a *run key*, a plain
string (the cell id JupyterLab sends, else a digest of the cell's text): the
core never sees IPython. :class:`RunTimeline` keeps the runs of a session in
order, each with what the session was when it began (the conversation, the
plan, the connectors loaded, the offline models' places in their scripts) and
what it added (handles, memory entries).

Running a key again (:meth:`RunTimeline.rewind`) supersedes the earliest run
of that key still on the timeline *and every run after it*, and the new run
starts from the state that run started from:

* the conversation reads as it did before that run: a prefix made of whole
  runs, so every tool use still has its result;
* the handles the superseded runs made are retired (while they still hold the
  value the run made), so the re-run's ``save("qoq_growth", ...)`` is
  ``qoq_growth`` again, not ``qoq_growth_2``; values pulled into the notebook
  are copies and keep working there;
* memory entries they recorded are withdrawn, connectors they loaded hidden
  again, the plan and the offline models' places put back.

Why the later runs go too: taking out only the re-run cell's run would leave
later runs answering a conversation that no longer reads as they saw it, and
the new run would see them before its own prompt; the model would be asked
something different from the first time. Rewinding from the earliest
superseded run makes every run of a second Run All start from exactly the
state its first-pass run started from, so a deterministic model gives the
same conversation, handles, answers and token use. The :class:`Rewind` names
the later runs taken out (the new run's transcript says so in a notice);
running their cells again brings them back.

Nothing leaves the record: each superseded run's log gets a ``superseded``
record naming the run that replaced it
(:func:`~harness_magic.core.transcript.log.mark_superseded`), and the new
run's ``run_start`` carries its ``run_key`` and the runs it ``supersedes``.
Asking without a key, or with ``replace=False`` (``%%agent --continue``),
appends as before.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol

from harness_magic.core.control.memory import MemoryEntry, SessionMemory
from harness_magic.core.control.planner import Planner, PlanItem
from harness_magic.core.transcript.events import Notice
from harness_magic.core.transcript.log import mark_superseded
from harness_magic.core.transcript.messages import Message

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost

__all__ = ["RunTimeline", "TimelineRun", "Rewind", "TimelineHost", "announce_rewind", "check_run_key",
           "RUN_KEY_MAX_CHARS", "NAMES_SHOWN"]

RUN_KEY_MAX_CHARS = 200
"""A run key names a cell (a UUID, a digest), it is not data: longer is a caller's mistake."""
NAMES_SHOWN = 8
"""Handles and run ids a rewind's notice lists by name; the rest are counted."""


class TimelineHost(Protocol):
    """What the timeline reads and restores (:class:`~harness_magic.core.session.AgentSession` is one)."""

    @property
    def harness(self) -> Any: ...
    @property
    def cache(self) -> Any: ...
    @property
    def memory(self) -> SessionMemory: ...
    @property
    def planner(self) -> Planner | None: ...
    @property
    def connectors(self) -> Any: ...
    def script_places(self) -> dict[str, Any]: ...
    def seek_scripts(self, places: Mapping[str, Any]) -> None: ...


def check_run_key(run_key: Any) -> str:
    """``run_key`` when it is a non-empty string of at most :data:`RUN_KEY_MAX_CHARS`; else ValueError naming it."""
    if not isinstance(run_key, str) or not run_key or len(run_key) > RUN_KEY_MAX_CHARS:
        raise ValueError(f"run_key must be a non-empty string of at most {RUN_KEY_MAX_CHARS} characters "
                         f"(a cell id), got {run_key!r:.80}")
    return run_key


@dataclass
class TimelineRun:
    """One run on the timeline: the session as the run found it, and what the run added."""

    run_id: str
    run_key: str | None
    """Where the run came from (a cell), or None (a plain ``ask``, a retry)."""
    history: tuple[Message, ...]
    """The conversation when the run began."""
    plan: tuple[PlanItem, ...] | None
    places: dict[str, Any]
    """Offline model id -> its place in its script when the run began."""
    loaded: tuple[str, ...]
    """Connectors loaded when the run began."""
    versions: dict[str, str]
    """Handle -> value token (``SessionCache.versions``) when the run began."""
    memory: tuple[MemoryEntry, ...]
    """Session memory entries when the run began."""
    run_file_before: str | None
    """The harness's latest log before the run (a run that never started leaves it unchanged)."""
    run_file: str | None = None
    """This run's JSONL log (None: the run never started)."""
    made: dict[str, str] = field(default_factory=dict)
    """Handles the run made -> the token of the value it stored."""
    remembered: tuple[MemoryEntry, ...] = ()
    """Memory entries the run recorded."""


@dataclass(frozen=True)
class Rewind:
    """What running a key again took back; the new run's notice says it (:meth:`text`)."""

    run_key: str
    replaced: str
    """The key's previous run."""
    later: tuple[str, ...]
    """Runs after it, taken out with it."""
    retired: tuple[str, ...]
    """Handles retired (those the superseded runs made that still held their values)."""
    withdrawn: int
    """Memory entries withdrawn."""
    messages: int
    """Messages the conversation holds now, before the new run."""

    @property
    def superseded(self) -> tuple[str, ...]:
        """Every run taken out, oldest first."""
        return (self.replaced, *self.later)

    def log_fields(self) -> dict[str, Any]:
        return {"run_key": self.run_key, "supersedes": list(self.superseded), "retired": list(self.retired),
                "memory_withdrawn": self.withdrawn, "messages_kept": self.messages}

    def text(self) -> str:
        """One paragraph for the cell: what was superseded and how the conversation reads now."""
        kept = _count(self.messages, "message")
        if self.later:
            reads = (f"which now reads as before that run ({kept}), then this run" if self.messages else
                     "which now starts again with this run")
            head = (f"Re-run of an earlier cell: its previous run ({self.replaced}) and the "
                    f"{_count(len(self.later), 'run')} after it ({_names(self.later)}) are out of the conversation, "
                    f"{reads}. Run the later cells again to bring theirs back.")
        else:
            reads = (f"which continues from the {kept} before it" if self.messages else
                     "which starts again with this run")
            head = f"Re-run: this cell's previous run ({self.replaced}) is out of the conversation, {reads}."
        parts = [head]
        if self.retired:
            parts.append(f"Handles retired, so this run's get the same names: {_names(self.retired)}.")
        if self.withdrawn:
            parts.append(f"{_count(self.withdrawn, 'memory entry', 'memory entries')} withdrawn.")
        parts.append("The old runs stay in their logs, marked superseded." if self.later else
                     "The old run stays in its log, marked superseded.")
        return " ".join(parts)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _names(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


class RunTimeline:
    """The runs of one session in order; running a key again rewinds to before its earliest run."""

    def __init__(self) -> None:
        self._runs: list[TimelineRun] = []
        self.superseded: dict[str, str] = {}
        """Run id -> id of the run that replaced it (every run ever taken back, for records and exports)."""
        self.last_rewind: Rewind | None = None
        """What the latest run took back (None: it replaced nothing)."""

    @property
    def runs(self) -> list[TimelineRun]:
        """The runs not superseded, oldest first."""
        return list(self._runs)

    @contextlib.contextmanager
    def running(self, host: TimelineHost, run_key: str | None, *, replace: bool = True) -> Iterator[str]:
        """Around one run on ``host``'s harness; yields the id the run must take (``run_id=``).

        A ``run_key`` that ran before is rewound first (``replace``; see :meth:`rewind`), the run's
        ``run_start`` carries its ``run_key`` and the runs it ``supersedes``, its transcript opens with the
        rewind's notice (:func:`announce_rewind`), and the run goes on the timeline when the block ends,
        also on error. A bad ``run_key`` raises ValueError before anything changes.
        """
        if run_key is not None:
            check_run_key(run_key)
        run_id = uuid.uuid4().hex[:12]
        rewind = self.rewind(host, run_key, by=run_id) if run_key is not None and replace else None
        self.last_rewind = rewind
        harness = host.harness
        keyed = {"run_key": run_key, "supersedes": list(rewind.superseded) if rewind else []} if run_key else None
        run = self.begin(host, run_id, run_key)
        try:
            with harness.overriding(log_extra=keyed), announce_rewind(harness, rewind):
                yield run_id
        finally:
            self.end(host, run)

    def latest_log(self) -> str | None:
        """The log of the latest run on the timeline (None: no run yet)."""
        return self._runs[-1].run_file if self._runs else None

    def begin(self, host: TimelineHost, run_id: str, run_key: str | None) -> TimelineRun:
        """Note the session as run ``run_id`` finds it; call :meth:`end` when the run is over (also on error)."""
        connectors = host.connectors
        return TimelineRun(
            run_id=run_id, run_key=run_key, history=tuple(host.harness.messages),
            plan=host.planner.state() if host.planner is not None else None,
            places=host.script_places(), loaded=tuple(connectors.loaded) if connectors is not None else (),
            versions=host.cache.versions(), memory=tuple(host.memory.entries),
            run_file_before=host.harness.run_file)

    def end(self, host: TimelineHost, run: TimelineRun) -> None:
        """Record what ``run`` added and put it on the timeline (a run that never started leaves no trace)."""
        run_file = host.harness.run_file
        if run_file is None or run_file == run.run_file_before:
            return
        run.run_file = run_file
        before = run.versions
        run.made = {name: token for name, token in host.cache.versions().items() if before.get(name) != token}
        run.remembered = tuple(e for e in host.memory.entries if not any(e is kept for kept in run.memory))
        self._runs.append(run)

    def rewind(self, host: TimelineHost, run_key: str, *, by: str) -> Rewind | None:
        """Take back the earliest run of ``run_key`` on the timeline and every run after it (see the module
        docstring); ``by`` is the id of the run replacing them. None when ``run_key`` has no run to take back."""
        check_run_key(run_key)
        index = next((i for i, run in enumerate(self._runs) if run.run_key == run_key), None)
        if index is None:
            self.last_rewind = None
            return None
        gone, self._runs = self._runs[index:], self._runs[:index]
        first = gone[0]
        host.harness.set_history(first.history)
        if host.planner is not None and first.plan is not None:
            host.planner.restore(first.plan)
        host.seek_scripts(first.places)
        if host.connectors is not None:
            host.connectors.restore_loaded(first.loaded)
        cache, retired = host.cache, []
        versions = cache.versions()
        for run in gone:
            for name, token in run.made.items():
                if versions.get(name) == token:  # still the value the run made (not a later push or a reset)
                    cache.retire(name)
                    retired.append(name)
        withdrawn = host.memory.withdraw(e for run in gone for e in run.remembered)
        for run in gone:
            self.superseded[run.run_id] = by
            if run.run_file is not None:
                with contextlib.suppress(OSError):  # a log moved or deleted since: the timeline still moves on
                    mark_superseded(run.run_file, run.run_id, by=by, run_key=run.run_key)
        self.last_rewind = Rewind(run_key=run_key, replaced=first.run_id, later=tuple(r.run_id for r in gone[1:]),
                                  retired=tuple(retired), withdrawn=withdrawn, messages=len(first.history))
        return self.last_rewind


@contextlib.contextmanager
def announce_rewind(harness: HarnessHost, rewind: Rewind | None) -> Iterator[None]:
    """Within the block, the next run on ``harness`` begins by saying what ``rewind`` took back: a
    :class:`~harness_magic.core.transcript.events.Notice` in its transcript (after ``RunStarted``, so it belongs
    to the new run) and a ``rerun`` event in its log. Nothing when ``rewind`` is None."""
    if rewind is None:
        yield
        return

    def on_event(event: Any) -> None:
        if event.kind == "run_started":
            unsubscribe()
            harness.log_event("rerun", **rewind.log_fields())
            harness.emit(Notice(text=rewind.text()))

    unsubscribe = harness.subscribe(on_event)
    try:
        yield
    finally:
        unsubscribe()
