"""The DuckDB engine behind the ``duckdb`` connector: read-only SQL over cached frames and files.

Each engine owns one private in-memory DuckDB database, set up once and
locked; each query gets its own cursor (connection) on it, in which

* every cached DataFrame handle the SQL names is registered as a view of a
  copy (``cache.view``), so SQL can never change what the cache holds;
* in a session (the cache has an entry guard), every configured file is a
  view that serves pseudonyms for its sensitive columns, over an Arrow
  dataset Python opened read-only, and DuckDB opens no file itself
  (:mod:`.pseudonyms`); outside one:
* every configured Parquet file (``files={"sales": "data/sales.parquet"}``,
  directories and globs too) is a view over DuckDB's own Parquet reader,
  reading through :class:`~.readonly_fs.ReadOnlyFiles`: a file system
  registered on this engine's database only that opens the configured files
  ``O_RDONLY`` and refuses every write, and the only paths DuckDB may touch
  (``allowed_paths``); CSV and JSON files are tables backed by Arrow datasets
  that Python opened read-only (CSV scanned lazily, JSON loaded);
* the database then runs with external access off (no other file, no
  ``ATTACH``, no ``COPY ... TO`` a real path, no ``EXPORT``), extension
  auto-install and auto-load off, and its configuration locked before any
  model SQL runs (a cursor may only switch progress tracking on). Lazy handles
  a query names become temporary views of that cursor; everything a query
  registered or created goes when its cursor closes. ``read_csv('/etc/passwd')``
  and ``COPY t TO '<configured file>'`` fail inside the engine or its
  read-only file system, whatever the statement looks like;
* the model's SQL runs inside a read-only transaction (:data:`_READ_ONLY`), so
  DuckDB refuses every write to the engine's database, where the results of
  lazy handles that their snapshot computed are kept (one table each, dropped
  when the last handle using it goes: a pull reads it instead of running the
  query again).

DuckDB's own parser (``extract_statements``) classifies the text: exactly one
statement per call, and only plain queries run (see :mod:`.classify`).
Results stream out as Arrow batches up to the row cap. A timer interrupts a
statement that runs past the timeout. Lazy handles (:class:`~.lazy.LazyRelation`)
get their snapshot facts here: head rows, and an exact count within
:data:`~.lazy.COUNT_BUDGET_S` (skipped past it, never estimated).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import uuid
import weakref
from pathlib import Path
from typing import Any, Callable, Mapping

from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.confinement.owned_dirs import owned_tempdir
from harness_magic.core.execution.connectors._results import (
    DEFAULT_BATCH_ROWS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    arrow_to_frame,
    cap_rows,
)
from harness_magic.core.execution.connectors.duckdb.pseudonyms import PseudonymViews
from harness_magic.core.execution.connectors.duckdb.sources import is_glob, open_source, resolve_source
from harness_magic.core.execution.connectors.lazy import (
    COUNT_BUDGET_S,
    LazyRelation,
    cache_location,
    collect_within_caps,
    resolve_inputs,
)
from harness_magic.core.execution.connectors.progress import Progress
from harness_magic.core.execution.tools import ToolError

__all__ = ["DuckDBEngine", "IDENTIFIER", "LOCKED_CONFIG", "READ_SETTINGS", "HEAD_ROWS", "ONE_PASS_MAX_ROWS",
           "RESULT_TABLE_PREFIX", "WAIT_SLICE_S", "INTERRUPT_GRACE_S", "PROGRESS_INTERVAL_S", "PROGRESS_SETTINGS"]

LOCKED_CONFIG = {"enable_external_access": False, "autoinstall_known_extensions": False,
                 "autoload_known_extensions": False, "allow_community_extensions": False}
"""Connection settings that keep DuckDB off the file system and away from extensions."""
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A view or handle name SQL can use unquoted (cached handles are found in the text by it)."""
WAIT_SLICE_S = 0.1
"""The calling thread waits for a running statement in slices this long, so an interrupt is seen at once."""
INTERRUPT_GRACE_S = 10.0
"""After an interrupt, how long to wait for DuckDB to stop the statement (it checks often: milliseconds)."""
_REINTERRUPT_S = 0.01
"""Past the count budget, the count is interrupted again this often until it stops (an early interrupt is lost)."""
PROGRESS_INTERVAL_S = 0.25
"""How often a running query's progress is polled for the live status line (cheap, smooth enough)."""
HEAD_ROWS = 5
"""Head rows a lazy handle's snapshot keeps (its ``head_limit``: fewer means they are the whole result)."""
ONE_PASS_MAX_ROWS = 1_000_000
"""A lazy result is read by its snapshot up to this many rows (plus one, to know it goes on) into a temporary table:
one that ends within it is counted exactly and kept for pulls (its query ran once). Past it, an aggregate is
computed whole and kept (its plan says so); any other longer result is probably an intermediate for later queries,
not worth holding twice: only its head is kept."""
_SNAPSHOT_TABLE = "__harness_snapshot__"
_QUERY_VIEW = "__harness_query__"
"""The snapshot's cursor names the query by this temporary view (the table above and count(*) read it)."""
RESULT_TABLE_PREFIX = "__harness_result_"
"""Name prefix of the engine tables that keep a lazy handle's computed result (a random hex suffix follows)."""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_list(items: list[str]) -> str:
    return "[" + ", ".join(_quote(item) for item in items) + "]"


_READ_ONLY = "BEGIN TRANSACTION READ ONLY"
"""Every statement built from the model's SQL runs in a read-only transaction: DuckDB refuses any write to the
engine's database (where lazy handles' results are kept), e.g. a DELETE inside a CTE that parses as a SELECT.
Temporary objects of the cursor itself stay writable (frames and lazy views are set up before it begins)."""
PROGRESS_SETTINGS = {"enable_progress_bar": "true", "enable_progress_bar_print": "false"}
"""Set on the cursor of a query whose caller reports progress (``query_progress()`` answers only with tracking on;
never printed into the cell): the only settings the locked database lets a cursor change. DuckDB cannot set them
GLOBAL; a new cursor starts with tracking off (DuckDB's default, in a kernel too), so a cursor nobody polls runs no
``SET`` (they were two statements per cursor, two cursors per lazy handle and pull) and DuckDB computes no
progress after every task for nobody."""
READ_SETTINGS = {"disable_parquet_prefetching": "true"}
"""Set GLOBAL on the engine's database before it is locked (a plain SET would hold for one cursor only). DuckDB
prefetches a row group's column chunks in one read (~6 MB at 1e6-row groups) from a file system it does not know
to be local, as :class:`.readonly_fs.ReadOnlyFiles` is; each such read is a fresh Python ``bytes`` that DuckDB
copies once more into its buffer, out of the CPU caches. Read page by page (a few hundred ``pread`` calls per
query) the copy stays in cache: a 5e7-row group-by through the read-only file system took 0.91-1.03x the CPU of
plain DuckDB reading the files itself, against 1.06-1.13x with prefetching (same process, interleaved)."""


def _create_temporary(kind: str, name: str, sql: str, *, temporary: bool = True) -> str:
    """``CREATE [TEMPORARY] VIEW|TABLE "name" AS <the one query in sql>``, checked by DuckDB's parser to be exactly
    that one statement (the query was already classified a single SELECT). Not temporary: an object of the
    engine's database (every cursor sees it) instead of the cursor's."""
    import duckdb

    statement = _single(sql)
    if statement.type != duckdb.StatementType.SELECT:
        raise ToolError(f"Refused: `{name}` must be one query (SELECT, WITH, FROM, VALUES); it is "
                        f"{statement.type.name}.")
    text = f'CREATE {"TEMPORARY " if temporary else ""}{kind} "{name}" AS {statement.query}'
    built = duckdb.extract_statements(text)
    if len(built) != 1 or built[0].type != duckdb.StatementType.CREATE:
        raise ToolError(f"Refused: the query of `{name}` cannot be kept in the engine as written")
    return text


def _drop_later(engine: "weakref.ref[DuckDBEngine]", table: str) -> None:
    """Finaliser of a lazy relation with a kept result: its engine drops the table before its next query."""
    owner = engine()
    if owner is not None:
        with owner._garbage_lock:
            owner._garbage.append(table)


def _close_engine(db: list[Any], temp_dir: str) -> None:
    """Close the engine's database (if it was opened) and remove its spill directory."""
    while db:
        try:
            db.pop().close()
        except Exception:  # broad: closing on the way out; a database that fails to close leaves nothing else to do
            pass
    shutil.rmtree(temp_dir, True)


class DuckDBEngine:
    """Runs read-only SQL over cache frames and configured files."""

    def __init__(self, files: Mapping[str, str | os.PathLike[str]] | None = None, *,
                 max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S,
                 batch_rows: int = DEFAULT_BATCH_ROWS, memory_limit: str | None = None,
                 threads: int | None = None) -> None:
        self.files: dict[str, Path] = {}
        """View name -> the path as configured (resolved): a file, a directory or a glob."""
        self.sources: dict[str, tuple[str, list[Path]]] = {}
        """View name -> (reader kind, the files it reads), fixed when the engine is built."""
        readable: dict[str, Path] = {}
        self._parquet_urls: dict[str, list[str]] = {}
        """Parquet view name -> the read-only file system URLs of its files."""
        for view, path in (files or {}).items():
            if not IDENTIFIER.fullmatch(view):
                raise ValueError(f"duckdb file view name {view!r} must be an identifier")
            kind, members = resolve_source(os.fspath(path))
            self.files[view] = Path(os.path.realpath(os.fspath(path))) if not is_glob(os.fspath(path)) \
                else Path(os.fspath(path))
            self.sources[view] = (kind, members)
            if kind == "parquet":
                names = [f"{view}/{i}{member.suffix.lower()}" for i, member in enumerate(members)]
                readable.update(zip(names, members))
                self._parquet_urls[view] = names
        self._readonly: Any = None
        if readable:
            from harness_magic.core.execution.connectors.duckdb.readonly_fs import ReadOnlyFiles  # fsspec: only when files are read

            self._readonly = ReadOnlyFiles(readable)
        if self._readonly is not None:
            self._parquet_urls = {v: [self._readonly.url(n) for n in names] for v, names in self._parquet_urls.items()}
        self.max_rows, self.timeout_s, self.batch_rows = max_rows, timeout_s, batch_rows
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"duckdb threads must be a positive integer, got {threads!r}")
        self.memory_limit, self.threads = memory_limit, threads
        self.connector_name = "duckdb"
        """The connector this engine serves (set by :func:`.connector.connector`); lazy handles'
        checkpoints name it."""
        self.temp_dir = Path(owned_tempdir("duckdb"))  # mode 0700: spills are private
        self._db: list[Any] = []
        """The engine's private in-memory database (created on first use), shared by every query's cursor."""
        self._views = PseudonymViews(self.sources)
        self._serving: bool | None = None
        """Whether the database serves its files through :attr:`_views` (set when it is created: see
        :meth:`_database`)."""
        self._db_lock = threading.Lock()
        self._garbage: list[str] = []
        """Kept result tables of lazy relations that are gone; dropped before the next query (:meth:`_open`)."""
        self._garbage_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_engine, self._db, str(self.temp_dir))
        if memory_limit is not None:
            if not isinstance(memory_limit, str) or not memory_limit.strip() or memory_limit.strip().startswith("-"):
                # DuckDB reads a negative size as "no limit": refuse it rather than run unbounded
                raise ValueError(f"duckdb memory_limit must be a size such as '2GB', got {memory_limit!r}")
            import duckdb

            try:  # DuckDB itself parses the size: the error names what it accepts
                duckdb.connect(":memory:", config=self._config()).close()
            except duckdb.Error as exc:
                self.close()
                raise ValueError(f"duckdb memory_limit {memory_limit!r} is not valid: "
                                 f"{str(exc).strip().splitlines()[0]}") from None

    def _config(self) -> dict[str, Any]:
        """Connection settings; external access is switched off after the read-only file system is in place."""
        config: dict[str, Any] = {k: v for k, v in LOCKED_CONFIG.items() if k != "enable_external_access"}
        config["temp_directory"] = str(self.temp_dir)
        if self.memory_limit is not None:
            config["memory_limit"] = self.memory_limit
        if self.threads is not None:
            config["threads"] = self.threads
        return config

    def parquet_urls(self) -> dict[str, list[str]]:
        """Parquet view name -> the read-only file system URLs DuckDB reads its files by (its allowed paths)."""
        return {view: list(urls) for view, urls in self._parquet_urls.items()}

    def close(self) -> None:
        """Close the engine's database and remove the private spill directory."""
        self._finalizer()

    def _database(self, serving: bool | None = None) -> Any:
        """The engine's database, set up once: read-only file system, file views, external access off, locked.

        ``serving`` (the first query's cache has an entry guard): the file views
        serve pseudonyms (:mod:`.pseudonyms`) and DuckDB opens no file
        itself, so no path reads around them. A database made without it
        serves a guarded cache only if it has no Parquet file (ToolError: those
        are readable by path).

        Every query then gets its own cursor (:meth:`_open`): a connection of
        this database whose registered frames, temporary views and tables are
        its own and vanish when it closes. One database per engine keeps
        DuckDB's threads, allocator and caches warm between queries (a fresh
        database per query cost ~0.2-0.3 s on two cores).
        """
        import duckdb

        with self._db_lock:
            if not self._finalizer.alive:
                raise ToolError("this duckdb connector was closed")
            if self._db:
                if serving and not self._serving:
                    if self._parquet_urls:
                        raise ToolError(f"the {self.connector_name} connector was first used outside a session, "
                                        f"where its Parquet files are readable by path; configure it again for "
                                        f"this session")
                    self._db.append(self._views.install(self._db[0]))  # its other files were never DuckDB's
                    self._serving = True
                return self._db[0]
            serving = bool(serving)
            db = duckdb.connect(":memory:", config=self._config())
            views = None
            try:
                if serving:
                    views = self._views.install(db)
                elif self._readonly is not None:  # the configured Parquet files, read-only, are all DuckDB may open
                    db.register_filesystem(self._readonly)
                    db.execute(f"SET allowed_paths = {_sql_list(self._readonly.urls())}")
                for setting, value in READ_SETTINGS.items():  # the Parquet extension's: set once it is loaded;
                    db.execute(f"SET GLOBAL {setting} = {value}")  # GLOBAL: every query's cursor reads by them
                db.execute("SET enable_external_access = false")
                for view, urls in self._parquet_urls.items() if not serving else ():
                    db.sql(f"SELECT * FROM read_parquet({_sql_list(urls)})").create_view(view)
                # a cursor whose caller reports progress turns tracking on for query_progress() (never printed)
                db.execute(f"SET allowed_configs = {_sql_list(list(PROGRESS_SETTINGS))}")
                db.execute("SET lock_configuration = true")
            except Exception:  # broad: any failure while setting the database up closes it, then propagates as it was
                db.close()
                raise
            self._db.append(db)
            if views is not None:
                self._db.append(views)  # closed first (the list is closed from its end)
            self._serving = serving
            return db

    def connect(self, cache: HandleCache, sql: str | None) -> Any:
        """A fresh cursor on the engine's locked database: configured files and the cached handles ``sql`` names."""
        return self._open(cache, sql)[0]

    def _open(self, cache: HandleCache, sql: str | None, root: LazyRelation | None = None, *,
              progress: bool = False) -> tuple[Any, dict[str, str], dict[str, LazyRelation]]:
        """(connection, frames registered: handle -> version, lazy views created: handle -> relation).

        Frames are registered as views of copies, lazy handles (of this engine)
        as temporary views of their own statements, their inputs first, all on
        a new cursor of the locked database (:meth:`_database`; ``progress``:
        see :meth:`_cursor`).
        """
        guard = cache.guard
        con = self._cursor(guard is not None, progress=progress)
        try:
            if self._serving:
                self._views.refresh(guard)
            else:
                for view, source in self.sources.items():
                    if view not in self._parquet_urls:
                        con.register(view, open_source(*source))
            if sql is not None:
                wanted = set(IDENTIFIER.findall(sql))
            else:  # every handle this engine can read: frames and its own lazy handles
                wanted = {name for name in (cache.names() if cache is not None else [])
                          if cache_location(cache, name) in ("memory", "disk", LazyRelation.__harness_engine__)}
            inputs = resolve_inputs(cache, wanted - set(self.files), self, LazyRelation.__harness_engine__, root)
            frames, order = inputs.needed, inputs.order
            for handle in sorted(frames):
                con.register(handle, cache.view(handle))
            for handle, lazy in order.items():
                if handle in self.sources or handle in frames:
                    raise ToolError(f"handle {handle!r} names two different values in this chain of lazy handles")
                if lazy.result is not None:  # computed once already: the chain reads the kept rows
                    con.execute(f'CREATE TEMPORARY VIEW "{handle}" AS SELECT * FROM "{lazy.result}"')
                else:
                    con.execute(_create_temporary("VIEW", handle, lazy.sql))
            con.execute(_READ_ONLY)
        except Exception:  # broad: any failure while preparing the cursor closes it, then propagates as it was
            con.close()
            raise
        return con, frames, order

    def _cursor(self, serving: bool | None = None, *, progress: bool = False) -> Any:
        """A new cursor of the locked database, after dropping the kept result tables of lazy relations that are
        gone (``serving``: see :meth:`_database`). It tracks progress only with ``progress`` (its caller polls
        ``query_progress()``: :data:`PROGRESS_SETTINGS`)."""
        con = self._database(serving).cursor()
        try:
            for setting, value in PROGRESS_SETTINGS.items() if progress else ():
                con.execute(f"SET {setting} = {value}")
            with self._garbage_lock:
                garbage, self._garbage[:] = list(self._garbage), []
            for table in garbage:
                try:
                    con.execute(f'DROP TABLE IF EXISTS "{table}"')
                except Exception:  # e.g. a conflict with another cursor's transaction: the next cursor retries
                    with self._garbage_lock:
                        self._garbage.append(table)
        except Exception:  # broad: any failure while preparing the cursor closes it, then propagates as it was
            con.close()
            raise
        return con

    def result_tables(self) -> list[str]:
        """The engine tables keeping lazy handles' computed results now (live handles and not yet dropped)."""
        con = self._cursor()
        try:
            rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary AND "
                               f"starts_with(table_name, {_quote(RESULT_TABLE_PREFIX)}) ORDER BY 1").fetchall()
        finally:
            con.close()
        return [row[0] for row in rows]

    def _run(self, con: Any, work: Callable[[], Any], progress: Progress | None,
             cancelled: threading.Event | None = None) -> Any:
        """``work()`` under the statement timeout, polling ``con.query_progress()`` for ``progress``.

        The statement runs in a helper thread while the calling thread waits in
        short, signal-interruptible slices: a KeyboardInterrupt there (the
        kernel's stop button) sets ``cancelled``, calls ``con.interrupt()``,
        waits up to :data:`INTERRUPT_GRACE_S` for DuckDB to stop and re-raises,
        so the run ends as interrupted and the engine is ready for the next
        query (each query has its own connection).
        """
        import duckdb

        cancelled = cancelled if cancelled is not None else threading.Event()
        timer = threading.Timer(self.timeout_s, con.interrupt)
        timer.daemon = True
        stop = threading.Event()
        poller = None
        if progress is not None:
            def poll() -> None:
                while not stop.wait(PROGRESS_INTERVAL_S):
                    try:
                        value = con.query_progress()
                    except Exception:  # broad: the cursor may be closing under the poller; progress is display only
                        return
                    if value >= 0:
                        progress(float(value), False)

            poller = threading.Thread(target=poll, name="duckdb-progress", daemon=True)
            poller.start()
        outcome: dict[str, Any] = {}
        finished = threading.Event()

        def statement() -> None:
            try:
                outcome["value"] = work()
            except BaseException as exc:  # handed to the waiting thread as it is
                outcome["error"] = exc
            finally:
                finished.set()

        timer.start()
        try:
            threading.Thread(target=statement, name="duckdb-statement", daemon=True).start()
            try:
                while not finished.wait(WAIT_SLICE_S):
                    pass
            except KeyboardInterrupt:
                cancelled.set()
                con.interrupt()
                finished.wait(INTERRUPT_GRACE_S)
                raise
            if "error" in outcome:
                raise outcome["error"]
            return outcome["value"]
        except duckdb.InterruptException as exc:
            raise ToolError(f"The statement timed out after {self.timeout_s:g} s and was interrupted.") from exc
        except duckdb.Error as exc:
            raise ToolError(f"duckdb error: {_first_line(exc)}") from exc
        finally:
            timer.cancel()
            stop.set()
            if poller is not None and progress is not None:  # a poller runs only when progress is reported
                poller.join()
                progress(None, True)

    def lazy(self, cache: HandleCache, sql: str, progress: Progress | None = None) -> LazyRelation:
        """A :class:`LazyRelation` for one read-only statement; its snapshot facts come from the engine.

        One run of the query gives them (see *Snapshot by pushdown* in :mod:`.lazy`),
        into a temporary table whose size DuckDB reports (no count query): an
        aggregate (:func:`_aggregates`) is computed whole; any other query is
        read up to :data:`ONE_PASS_MAX_ROWS` + 1 rows. The plan is read only
        when the text may group (:data:`_MAY_GROUP`: about 1.5 ms of planning;
        an aggregate without groups is one row either way). A result computed
        whole is kept in the engine (counted exactly by that run; pulls and
        chains read it, so the query runs once). A longer result whose plan
        was not read (an aggregate the text does not show, e.g. a view of an
        aggregating handle) has it read then: an aggregate is computed whole and
        kept (its second run); any other keeps only its head and gets
        ``count(*)`` within :data:`COUNT_BUDGET_S`, else its count is marked
        skipped.
        """
        import duckdb

        statement = _single(sql)
        if statement.type != duckdb.StatementType.SELECT:  # DuckDB's parser: nothing else may run here
            raise ToolError(f"Refused: a lazy handle must be one query (SELECT, WITH, FROM, VALUES); this statement "
                            f"is {statement.type.name}.")
        con, frames, lazies = self._open(cache, sql, progress=progress is not None)
        cancelled = threading.Event()
        table = f"{RESULT_TABLE_PREFIX}{uuid.uuid4().hex}"  # keeps the result if the snapshot computes all of it
        kept_rows: list[bool] = []  # [True] once that table exists
        try:
            def snapshot(limit: str) -> int:
                """The cursor's query view into its snapshot table (``limit``: SQL after it); the rows written."""
                return con.execute(f'CREATE TEMPORARY TABLE "{_SNAPSHOT_TABLE}" AS SELECT * FROM '
                                   f'"{_QUERY_VIEW}"{limit}').fetchall()[0][0]

            def describe() -> dict[str, Any]:
                relation = con.sql(statement)
                if relation is None:
                    raise ToolError("The statement returns no rows to keep as a lazy handle.")
                info: dict[str, Any] = {
                    "columns": list(relation.columns),
                    "engine_types": {c: str(t) for c, t in zip(relation.columns, relation.types)},
                    "head_limit": HEAD_ROWS, "rows_estimated": False,
                }
                # one run: the query (a temporary view of this cursor) into a temporary table of this cursor, made
                # inside the read-only transaction: whole for an aggregate, else at most ONE_PASS_MAX_ROWS + 1 rows;
                # DuckDB answers CREATE TABLE AS with the rows it wrote (no count(*) query). The plan is read
                # (under Jupyter explain()'s default displays HTML and returns "": ask for text) only when the text
                # may group: an aggregate computes all its rows before the first, so it runs whole, once
                planned = bool(_MAY_GROUP.search(sql))
                whole = planned and _aggregates(relation.explain(format="text"))
                con.execute(_create_temporary("VIEW", _QUERY_VIEW, sql))
                read = snapshot("" if whole else f" LIMIT {ONE_PASS_MAX_ROWS + 1}")
                whole = whole or read <= ONE_PASS_MAX_ROWS
                if not whole and not planned and _aggregates(relation.explain(format="text")):
                    # an aggregate the text did not show, longer than that: computed whole (exact count, kept
                    # for pulls), its second run
                    con.execute(f'DROP TABLE temp.main."{_SNAPSHOT_TABLE}"')
                    read, whole = snapshot(""), True
                info["head"] = arrow_to_frame(con.table(_SNAPSHOT_TABLE).limit(HEAD_ROWS).to_arrow_table())
                if whole:
                    # the whole result: kept for pulls and chains as a table of the engine's database (a copy made
                    # by this code, not by the model's SQL, after the read-only transaction ends; DuckDB spills it to
                    # the private directory past memory_limit; dropped with the last handle)
                    con.execute("COMMIT")
                    kept_rows.append(True)
                    con.execute(f'CREATE TABLE "{table}" AS SELECT * FROM temp.main."{_SNAPSHOT_TABLE}"')
                    info["rows"] = read
                    return info
                con.execute(f'DROP TABLE temp.main."{_SNAPSHOT_TABLE}"')
                info["rows"] = self._count(con, cancelled)
                if info["rows"] is None:
                    info["count_skipped"], info["rows_at_least"] = True, read
                return info

            info = self._run(con, describe, progress, cancelled)
        except BaseException:
            if kept_rows or cancelled.is_set():  # a table made (or, interrupted, perhaps being made) for no handle
                _drop_later(weakref.ref(self), table)
            raise
        finally:
            con.close()
        used = {h: l for h, l in lazies.items() if h in set(IDENTIFIER.findall(sql))}
        direct_frames = {h: v for h, v in frames.items() if h in set(IDENTIFIER.findall(sql))}
        keep = bool(kept_rows)
        relation = LazyRelation(self, sql, direct_frames, used, info, result=table if keep else None)
        if keep:
            weakref.finalize(relation, _drop_later, weakref.ref(self), table)
        return relation

    def _count(self, con: Any, cancelled: threading.Event) -> int | None:
        """``count(*)`` of the cursor's query view if DuckDB answers within :data:`COUNT_BUDGET_S`, else None.

        The user's interrupt (``cancelled``) still raises; the budget's own
        interrupt only ends the count (the cursor gets a new read-only
        transaction).
        """
        import duckdb

        done = threading.Event()

        def over_budget() -> None:  # DuckDB drops an interrupt that comes before a statement starts: repeat it
            while not done.is_set():
                con.interrupt()
                done.wait(_REINTERRUPT_S)

        counter = threading.Timer(COUNT_BUDGET_S, over_budget)
        counter.daemon = True
        counter.start()
        try:
            try:
                return con.execute(f'SELECT count(*) FROM "{_QUERY_VIEW}"').fetchall()[0][0]
            finally:
                done.set()
                counter.cancel()
                counter.join()  # no interrupt of the budget's may reach the cursor's next statement
        except duckdb.InterruptException:
            if cancelled.is_set():
                raise  # the user's interrupt, not the count budget
            con.execute("ROLLBACK")
            con.execute(_READ_ONLY)
            return None

    def fetch_lazy(self, lazy: LazyRelation, cache: HandleCache, max_bytes: int, *, max_rows: int | None = None,
                   handle: str | None = None, progress: Progress | None = None) -> Any:
        """The rows of ``lazy`` as an Arrow table; :class:`MaterializeLimitError` once they pass ``max_bytes``
        bytes or ``max_rows`` rows (None: no row cap).

        The query runs once, streamed; when the snapshot already computed the
        result (:attr:`LazyRelation.result`), its kept table is read instead and
        the query does not run again. Either way the handle's inputs must still
        be the values it was built on (ToolError naming the one that is not).
        """
        import pyarrow as pa

        if lazy.result is not None:
            resolve_inputs(cache, (), self, LazyRelation.__harness_engine__, lazy)  # the exact-inputs check only
            # no read-only transaction: the one statement on this cursor is this code's own read of the kept table
            con = self._cursor(progress=progress is not None)
            source = f'SELECT * FROM "{lazy.result}"'
        else:
            con = self._open(cache, None if cache is None else "", root=lazy, progress=progress is not None)[0]
            source = _single(lazy.sql)
        try:
            def fetch() -> Any:
                reader = con.sql(source).to_arrow_reader(self.batch_rows)
                batches = collect_within_caps(reader, lazy, handle, max_bytes, max_rows, "DuckDB",
                                              "duckdb__query with lazy=true, GROUP BY / WHERE / LIMIT",
                                              on_over=con.interrupt)
                return pa.Table.from_batches(batches, schema=reader.schema)

            return self._run(con, fetch, progress)
        finally:
            con.close()

    def plan(self, cache: HandleCache, sql: str) -> str:
        """DuckDB's physical plan of one statement as JSON (``EXPLAIN (FORMAT JSON)``): planned on the same
        locked cursor as :meth:`query`, under the timeout, never run; ToolError with DuckDB's error when the
        statement cannot be planned."""
        statement = _single(sql)
        con = self.connect(cache, sql)
        try:
            return str(self._run(con, lambda: con.execute(f"EXPLAIN (FORMAT JSON) {statement.query}").fetchall()[0][1],
                                 None))
        finally:
            con.close()

    def query(self, cache: HandleCache, sql: str, max_rows: int | None = None,
              progress: Progress | None = None) -> tuple[Any, bool]:
        import pyarrow as pa

        cap = cap_rows(max_rows, self.max_rows)
        statement = _single(sql)
        con = self._open(cache, sql, progress=progress is not None)[0]
        try:
            def fetch() -> tuple[Any, bool]:
                relation = con.sql(statement)  # only this statement runs, whatever else the text holds
                if relation is None:
                    return pa.table({}).to_pandas(), False
                reader = relation.to_arrow_reader(self.batch_rows)
                batches, rows, truncated = [], 0, False
                for batch in reader:
                    if rows + len(batch) > cap:
                        batches.append(batch.slice(0, cap - rows))
                        truncated = True
                        break
                    batches.append(batch)
                    rows += len(batch)
                table = pa.Table.from_batches(batches, schema=reader.schema)
                return arrow_to_frame(table), truncated

            return self._run(con, fetch, progress)
        finally:
            con.close()


def _first_line(exc: BaseException) -> str:
    """The line of a DuckDB error that says what went wrong (a Python error from the read-only file system
    arrives as a traceback: its last line)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        named = [line for line in lines if "Error:" in line]
        return named[-1] if named else lines[-1]
    return lines[0] if lines else type(exc).__name__


def _single(sql: str) -> Any:
    """The one statement in ``sql`` (DuckDB's own parser); ToolError for zero or several."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ToolError(f"duckdb error: {str(exc).strip().splitlines()[0]}") from exc
    if len(statements) != 1:
        raise ToolError(f"Refused: {len(statements)} statements; send exactly one per call.")
    return statements[0]


_MAY_GROUP = re.compile(r"\bGROUP\s+BY\b|\bDISTINCT\b|\bPIVOT\b", re.IGNORECASE)
"""Text that may make a query's result an aggregate of many rows: only then is its plan read before it runs (a
false match costs one plan; a miss, e.g. a view of an aggregating handle, is found once the result outgrows the
snapshot's first part)."""
_PLAN_TITLE = re.compile(r"╭─ ([^─╮]+?) ─")
_AGGREGATING = ("GROUP BY", "AGGREGATE", "DISTINCT")


def _aggregates(plan: str) -> bool:
    """Whether the plan's root operators aggregate (``GROUP BY``, ``DISTINCT``, an aggregate without groups).

    Such a result is computed whole before its first row, so a snapshot whose
    first part did not hold all of it computes and keeps it whole rather than
    counting it in a second run and running it again for every pull (a cost
    choice only: either way the snapshot's count is exact or marked skipped).
    """
    roots = [t.upper() for t in _PLAN_TITLE.findall(plan)[:3]]
    return any(word in title for title in roots for word in _AGGREGATING)
