"""Lazy DuckDB handles: a query that stays in the engine until someone needs its rows.

A :class:`LazyRelation` is what ``duckdb__query(..., lazy=True)`` caches: the
one read-only statement (already classified), the engine it runs on, and the
cached handles it names (frames by handle and value version, other lazy
relations by object). It holds no rows in the kernel, except the small result
a Spark snapshot already brought in (see *Computed once*). Contract:

* **Immutable.** Copies are the object itself; nothing about it changes after
  creation, so the cache can hand it out freely.
* **Chaining.** A later DuckDB query that names the handle sees it as a view
  (built from its own statement in the same fresh, locked connection), so a
  chain of lazy handles runs as one query in the engine; rows never enter the
  kernel until :meth:`materialize`.
* **Snapshot by pushdown.** At creation the engine answers: columns and types
  (no rows), head rows and the row count. The count is exact or absent,
  never contradicted by the head: a head shorter than the limit it was asked
  with (``info["head_limit"]``) is the whole result, so its length is the
  exact count; an engine estimate below the head's length is dropped. Where
  no count is shown, ``count_skipped`` says so and ``rows_at_least`` gives
  what is known (DuckDB never estimates; Spark may, marked
  ``"rows_estimated": true``).
* **Computed once.** When the snapshot computed the whole result anyway
  (DuckDB: an aggregate, or a result that ended within its snapshot's read;
  Spark: a result its ``LIMIT`` job read to the end), the engine keeps it
  (:attr:`LazyRelation.result`: DuckDB a table in the engine's own database,
  bounded by its ``memory_limit`` and spilled to its private directory; Spark
  the Arrow rows its snapshot job already streamed, at most ``ONE_PASS_ROWS``
  rows and ``ONE_PASS_BYTES`` bytes), so creating the handle and pulling it
  runs the query once: the rows pulled are the rows the snapshot described.
  Otherwise a pull runs the query once, streamed.
* **Materialise within limits.** :meth:`materialize` streams Arrow batches and
  stops with :class:`MaterializeLimitError` as soon as their bytes pass the
  byte cap or their rows pass the row cap, telling the model to aggregate or
  filter in the engine first.
* **Exact inputs.** A frame it was built on must still be the same value
  (same handle, same version) when it runs, else :class:`LazyInputError`.
* **Checkpoints.** Its definition is the connector's name and the query
  (``__harness_checkpoint__``); loading re-runs that query through the
  connector's usual classification (:func:`~.duckdb.connector.lazy_rebinder`),
  never anything decoded from the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from harness_magic.core.cache.protocol import HandleCache

__all__ = ["LazyRelation", "MaterializeLimitError", "LazyInputError", "COUNT_BUDGET_S", "materialize_count",
           "reconcile_rows", "check_cap", "MAX_CAP", "QueryInputs", "resolve_inputs",
           "cache_location", "is_cached_frame", "collect_within_caps", "definition_rebinder", "Rebind"]

COUNT_BUDGET_S = 2.0
"""A DuckDB snapshot may spend this long on ``count(*)`` of a result too long to keep; past it the count is
skipped (said so, never estimated): an interactive tool call should not wait on a number."""

_materialized = [0]
"""Process-wide count of materialisations (tests and benchmarks check chains do not move data)."""


def materialize_count() -> int:
    """How many times any lazy relation brought rows into this process."""
    return _materialized[0]


MAX_CAP = 2**63 - 1
"""Largest row or byte cap: Arrow and DuckDB count rows and bytes in signed 64-bit integers."""


def check_cap(value: Any, what: str) -> int:
    """``value`` as a cap (an int from 1 to :data:`MAX_CAP`); ValueError naming ``what`` and the bad value."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CAP:
        raise ValueError(f"{what} must be a positive integer (1 to {MAX_CAP:,}), got {value!r}")
    return value


class MaterializeLimitError(Exception):
    """The rows of a lazy handle exceed the byte or row cap; nothing was kept.

    ``limit`` says which cap stopped it: ``"bytes"`` (``materialize_max_bytes``)
    or ``"rows"`` (``materialize_max_rows``).
    """

    def __init__(self, message: str, *, handle: str | None = None, limit: str = "bytes") -> None:
        super().__init__(message)
        self.handle = handle
        self.limit = limit


class LazyInputError(Exception):
    """A cached frame a lazy handle was built on is gone or is no longer the same value."""


class LazyRelation:
    """A read-only DuckDB statement over configured files and cached handles (see module doc)."""

    __harness_engine__ = "duckdb"

    def __init__(self, engine: Any, sql: str, frames: dict[str, str], lazies: dict[str, "LazyRelation"],
                 info: dict[str, Any], result: Any = None) -> None:
        self._engine = engine
        self._sql = sql
        self._frames = dict(frames)
        self._lazies = dict(lazies)
        self._info = reconcile_rows(info)
        self._result = result

    # -- identity: immutable, so copies are the object itself ---------------------------------

    def __copy__(self) -> "LazyRelation":
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> "LazyRelation":
        return self

    def __repr__(self) -> str:
        return f"<lazy duckdb relation: {self._sql[:80]!r}>"

    def __harness_checkpoint__(self) -> dict[str, str]:
        """The definition a checkpoint keeps: the connector's name and the query (no rows, no engine state)."""
        name = getattr(self._engine, "connector_name", None)
        return {"connector": name if isinstance(name, str) and name else self.__harness_engine__, "sql": self._sql}

    @property
    def sql(self) -> str:
        return self._sql

    @property
    def engine(self) -> Any:
        return self._engine

    @property
    def result(self) -> Any:
        """The engine's kept copy of the rows, computed by the snapshot (see *Computed once*), or None.

        Opaque here: only the engine that made it reads it (:meth:`materialize`
        goes through the engine's ``fetch_lazy``, which still checks the inputs
        and the caps)."""
        return self._result

    @property
    def columns(self) -> list[str]:
        return list(self._info["columns"])

    @property
    def rows(self) -> int | None:
        return self._info["rows"]

    @property
    def rows_estimated(self) -> bool:
        return bool(self._info["rows_estimated"])

    @property
    def count_skipped(self) -> bool:
        """True when the snapshot did not count the rows (:attr:`rows` is None; :attr:`rows_at_least` is known)."""
        return bool(self._info.get("count_skipped"))

    @property
    def rows_at_least(self) -> int | None:
        """A lower bound on the row count when it was not counted (the rows the snapshot saw), else None."""
        return self._info.get("rows_at_least")

    def rows_phrase(self) -> str:
        """The row count in words: ``"4"``, ``"about 1,000"``, ``"at least 1,000,001"`` or ``"?"``."""
        if self.rows is not None:
            return f"{'about ' if self.rows_estimated else ''}{self.rows:,}"
        return f"at least {self.rows_at_least:,}" if self.rows_at_least is not None else "?"

    def dependencies(self) -> tuple[dict[str, str], dict[str, "LazyRelation"]]:
        """Every frame (handle -> version) and lazy relation (handle -> object) this one needs, nested ones too.

        Raises :class:`LazyInputError` when two of them use one handle name for
        different values (a handle was retired and its name reused).
        """
        frames: dict[str, str] = {}
        lazies: dict[str, LazyRelation] = {}
        self._collect(frames, lazies)
        return frames, lazies

    def _collect(self, frames: dict[str, str], lazies: dict[str, "LazyRelation"]) -> None:
        for name, lazy in self._lazies.items():
            if name in lazies and lazies[name] is not lazy or name in frames:
                raise LazyInputError(f"handle {name!r} names two different values in this chain of lazy handles")
            if name not in lazies:
                lazy._collect(frames, lazies)
                lazies[name] = lazy
        for name, version in self._frames.items():
            if frames.get(name, version) != version or name in lazies:
                raise LazyInputError(f"handle {name!r} names two different values in this chain of lazy handles")
            frames[name] = version

    # -- snapshot -------------------------------------------------------------------------------

    def __harness_snapshot__(self, describe_frame: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        info = self._info
        snap = describe_frame(info["head"])
        snap["type"] = "lazy_frame"
        snap["engine"] = self.__harness_engine__
        snap["shape"] = [info["rows"], len(info["columns"])]
        if info["rows_estimated"]:
            snap["rows_estimated"] = True
        if info.get("count_skipped"):
            snap["count_skipped"] = True
            if info.get("rows_at_least") is not None:
                snap["rows_at_least"] = info["rows_at_least"]
        snap["engine_types"] = dict(list(info["engine_types"].items())[: len(snap.get("dtypes", {})) or None])
        snap.pop("index", None)  # an engine relation has no index: the head frame's is meaningless
        snap["sql"] = self._sql if len(self._sql) <= 300 else self._sql[:297] + "..."
        return snap

    # -- rows -----------------------------------------------------------------------------------

    def materialize(self, cache: HandleCache, max_bytes: int, *, max_rows: int | None = None, handle: str | None = None,
                    progress: Callable[[float | None, bool], None] | None = None) -> Any:
        """The rows as a pandas frame, streamed as Arrow batches.

        :class:`MaterializeLimitError` past ``max_bytes`` bytes or ``max_rows``
        rows (None: no row cap); nothing is kept then.
        """
        check_cap(max_bytes, "max_bytes")
        if max_rows is not None:
            check_cap(max_rows, "max_rows")
        table = self._engine.fetch_lazy(self, cache, max_bytes, max_rows=max_rows, handle=handle, progress=progress)
        _materialized[0] += 1
        from harness_magic.core.execution.connectors._results import arrow_to_frame

        return arrow_to_frame(table)


def reconcile_rows(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` (an engine's snapshot facts) with a row count its own head rows cannot contradict.

    * ``head_limit`` given and the head shorter: the head is the whole result,
      so its length is the exact count (whatever was estimated or skipped).
    * An estimate below the head's length is dropped: the count is marked
      skipped, at least as many rows as the head holds.
    Keys added when missing: ``rows_estimated`` (False), ``count_skipped``
    (False), ``rows_at_least`` (None). The dict given is not changed.
    """
    out = {"rows_estimated": False, "count_skipped": False, "rows_at_least": None, **info}
    seen = len(out["head"])
    limit = out.get("head_limit")
    if limit is not None and seen < limit:
        out.update(rows=seen, rows_estimated=False, count_skipped=False, rows_at_least=None)
    elif out["rows_estimated"] and out.get("rows") is not None and out["rows"] < seen:
        out.update(rows=None, rows_estimated=False, count_skipped=True,
                   rows_at_least=max(seen, out["rows_at_least"] or 0))
    return out


def cache_location(cache: HandleCache, handle: str) -> str | None:
    """Where ``cache`` keeps ``handle`` (``"memory"``, ``"disk"`` or an engine's name); None when unknown."""
    try:
        return cache.location(handle)
    except Exception:  # broad: location() may ask an engine; unknown is an answer
        return None


def is_cached_frame(cache: HandleCache, handle: str) -> bool:
    """Whether ``handle`` holds a pandas DataFrame (judged from its snapshot, without hydrating it)."""
    try:
        return str(cache.snapshot(handle).get("type", "")).lower() == "dataframe"
    except Exception:  # broad: a snapshot may come from an engine; unknown means not a cached frame
        return False


@dataclass(frozen=True)
class QueryInputs:
    """The cached handles one engine query needs, checked against the cache as it is now.

    ``frames`` and ``lazies`` are what the query's text names directly;
    ``needed`` (every frame, nested ones included) and ``order`` (every lazy
    handle, inputs before the handles built on them) are what the engine must
    expose for the query to run as one chain.
    """

    frames: dict[str, str]
    lazies: dict[str, "LazyRelation"]
    needed: dict[str, str]
    order: dict[str, "LazyRelation"]


def resolve_inputs(cache: HandleCache | None, names: Iterable[str], engine: Any, kind: str,
                   root: "LazyRelation | None" = None) -> QueryInputs:
    """The handles among ``names`` (and ``root``'s inputs) that a query on ``engine`` uses.

    ``kind`` is the engine's name as the cache reports it for its lazy handles
    (``"duckdb"``, ``"spark"``). Raises ToolError, naming the handle, for a lazy
    handle of another connector or engine, and for inputs retired, replaced or
    reusing one name for two values since a lazy handle was built.
    """
    from harness_magic.core.execution.tools import ToolError

    versions = cache.versions() if cache is not None else {}
    frames: dict[str, str] = {}
    lazies: dict[str, LazyRelation] = {}
    chain: list[LazyRelation] = [root] if root is not None else []
    for handle in sorted(names):
        if cache is None or handle not in cache:
            continue
        location = cache_location(cache, handle)
        if location == kind:
            value = cache.get(handle)
            if not isinstance(value, LazyRelation) or value.engine is not engine:
                raise ToolError(f"`{handle}` is a lazy handle of another {kind} connector; query it there or "
                                "bring its rows in first")
            lazies[handle] = value
            chain.append(value)
        elif location is not None and location not in ("memory", "disk"):
            raise ToolError(f"`{handle}` lives in {location}, not in {kind}; query it with its own connector, "
                            "or bring its rows in first")
        elif is_cached_frame(cache, handle):
            frames[handle] = versions.get(handle, "")
    order: dict[str, LazyRelation] = {}
    needed = dict(frames)
    for lazy in chain:
        try:
            deep_frames, deep_lazies = lazy.dependencies()
        except LazyInputError as exc:
            raise ToolError(f"{exc}; rebuild the lazy handle") from None
        for name, version in deep_frames.items():
            if cache is None or name not in cache or versions.get(name, version) != version:
                raise ToolError(f"a lazy handle was built on `{name}`, which was retired or replaced since; "
                                "rebuild the lazy handle from the current handles")
            needed.setdefault(name, version)
        for name, dependency in [*deep_lazies.items(), *lazies.items()]:
            if order.setdefault(name, dependency) is not dependency or name in needed:
                raise ToolError(f"`{name}` names two different values in this query (one was retired and its "
                                "name reused); rebuild the lazy handle from the current handles")
    return QueryInputs(frames, lazies, needed, order)


def collect_within_caps(chunks: Iterable[Any], lazy: "LazyRelation", handle: str | None, max_bytes: int,
                        max_rows: int | None, engine: str, advice: str,
                        on_over: Callable[[], None] | None = None) -> list[Any]:
    """The Arrow batches (or tables) of ``chunks``, read until done or past a cap.

    Past ``max_bytes`` bytes or ``max_rows`` rows (None: no row cap) it calls
    ``on_over`` (e.g. to stop the engine's query) and raises
    :class:`MaterializeLimitError` saying which cap, how far it got, and
    ``advice`` (how to make the handle smaller in ``engine``).
    """
    kept: list[Any] = []
    total = rows = 0
    for chunk in chunks:
        total += chunk.nbytes
        rows += chunk.num_rows
        over = "bytes" if total > max_bytes else "rows" if max_rows is not None and rows > max_rows else None
        if over is not None:
            if on_over is not None:
                on_over()
            of = (f"{'an estimated' if lazy.rows_estimated else 'its'} {lazy.rows:,}" if lazy.rows is not None
                  else lazy.rows_phrase() if lazy.rows_at_least is not None else "its ?")
            if over == "bytes":
                passed = f"more than {max_bytes:,} bytes after {rows:,} of {of} rows (limit materialize_max_bytes)"
            else:
                passed = (f"more than {max_rows:,} rows ({total:,} bytes so far) of {of} rows "
                          "(limit materialize_max_rows)")
            raise MaterializeLimitError(
                f"`{handle or 'the lazy handle'}` is too big to bring into the kernel: {passed}. It stays in "
                f"{engine}: aggregate or filter it there first ({advice}) and use that smaller handle.",
                handle=handle, limit=over)
        kept.append(chunk)
    return kept


Rebind = Callable[[str, dict[str, str], Any], "LazyRelation"]
"""``rebind(engine, definition, cache)`` for :meth:`SessionCache.load`."""


def definition_rebinder(connectors: Any, engine_name: str, engine_type: type[Any], check: Callable[[str, str], Any],
                        others: Rebind | None = None) -> Rebind:
    """``rebind`` re-creating ``engine_name`` lazy handles from their saved definition (connector + query).

    ``connectors`` is a ConnectorRegistry (``names`` + item access) or an
    iterable of connectors. The definition must hold exactly ``connector``
    and ``sql``; the connector must be one of ``engine_type`` here; the query
    goes through ``check(sql, connector_name)`` (the model's own
    classification) and then the engine's ``lazy(cache, sql)``. Handles of
    another engine go to ``others`` or are refused. Refusals raise
    ValueError/LookupError (or the check's ToolError) naming the reason.
    """
    if hasattr(connectors, "names") and hasattr(connectors, "__getitem__"):
        found = {n: connectors[n] for n in connectors.names}
    else:
        found = {c.name: c for c in connectors}

    def rebind(engine: str, definition: dict[str, str], cache: HandleCache) -> LazyRelation:
        if engine != engine_name:
            if others is not None:
                return others(engine, definition, cache)
            raise LookupError(f"no connector re-binds {engine!r} handles here")
        if set(definition) != {"connector", "sql"}:
            raise ValueError(f"a {engine_name} lazy handle's definition holds 'connector' and 'sql', "
                             f"got {sorted(definition)}")
        name, sql = definition["connector"], definition["sql"]
        target = getattr(found.get(name), "engine", None)
        if not isinstance(target, engine_type):
            configured = ", ".join(n for n, c in found.items() if isinstance(getattr(c, "engine", None), engine_type))
            raise LookupError(f"connector {name!r} is not a configured {engine_name} connector here "
                              f"({engine_name} connectors: {configured or 'none'})")
        check(sql, name)
        return target.lazy(cache, sql)

    return rebind
