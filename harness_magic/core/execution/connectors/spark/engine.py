"""The Spark engine behind the ``spark`` connector: one Spark Connect session, checked plans, tagged jobs.

:class:`SparkEngine` starts its session on first use (a private local Connect
server for ``master``), registers the configured file views, and keeps
:data:`~.plan.PINNED_CONF` set. Every DataFrame built from model SQL is
parsed as a query only (:mod:`.query`) and its plan checked before any
job runs (:mod:`.plan`); cached frames and lazy handles the SQL names
become temporary views; each call runs under a fresh job tag that a timeout or
an interrupt cancels on the server. Lazy handles are :class:`SparkRelation`
values whose snapshot is taken by pushdown (one ``LIMIT`` job, then a
budgeted ``count(*)``, then Spark's estimate). The safety order these pieces
make up is stated in :mod:`.connector`.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import uuid
import warnings
from typing import Any, Callable, Mapping, cast

from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.execution.connectors._results import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    arrow_to_frame,
    cap_rows,
)
from harness_magic.core.execution.connectors.lazy import (
    LazyRelation,
    MaterializeLimitError,
    collect_within_caps,
    resolve_inputs,
)
from harness_magic.core.execution.connectors.progress import Progress
from harness_magic.core.execution.connectors.spark.plan import (
    PINNED_CONF,
    check_read,
    check_statement,
    explain_query,
    explain_statement,
    view_locations,
)
from harness_magic.core.execution.connectors.spark.pseudonyms import PseudonymCopies
from harness_magic.core.execution.connectors.spark.query import estimate_rows, first_line, parse_query, wrap_query
from harness_magic.core.execution.tools import ToolError

__all__ = ["SparkEngine", "SparkRelation", "GRPC_FORK_SUPPORT", "without_grpc_fork_handlers", "COUNT_BUDGET_S",
           "HEAD_ROWS", "ONE_PASS_ROWS", "ONE_PASS_BYTES", "KEPT_BATCH_ROWS", "EXECUTE_RESULT_ROWS", "LIST_MAX"]

GRPC_FORK_SUPPORT = ("GRPC_ENABLE_FORK_SUPPORT", "false")
"""Set in the environment before gRPC is first imported (Spark Connect's client is gRPC), unless it is set
already. With gRPC's fork handlers on, a process forked after a Spark Connect session ran (the next local
server's JVM start, the docs index's worker pool, a pseudo-terminal) sometimes died before its ``exec``,
printing ``Epoll1Poller ... encountered epoll_wait error: Bad file descriptor``: 1-2 forks in 200, none in 400
with them off. gRPC reads the setting when it is imported; nothing of ours uses gRPC in a forked child."""


def without_grpc_fork_handlers() -> None:
    """Turn gRPC's fork handlers off (:data:`GRPC_FORK_SUPPORT`) when gRPC is not imported yet and the user set
    nothing (a gRPC imported earlier, or the user's own setting, is left as it is)."""
    if "grpc" not in sys.modules:
        os.environ.setdefault(*GRPC_FORK_SUPPORT)


COUNT_BUDGET_S = 5.0
"""An exact ``count(*)`` for a snapshot may take this long (a Spark job alone costs ~0.1-1 s); past it the
job is cancelled and Spark's estimate is shown."""
HEAD_ROWS = 5
"""Head rows a lazy handle's snapshot keeps."""
ONE_PASS_ROWS = 10_000
"""A lazy result of at most this many rows is counted by the snapshot's one LIMIT job (an aggregate runs once)."""
ONE_PASS_BYTES = 8 * 1024**2
"""...and at most this many Arrow bytes: the LIMIT job stops being read past it (only head rows are kept then);
a result within both is kept with its handle for pulls (the rows already crossed: no second job)."""
KEPT_BATCH_ROWS = 1_000
"""A kept result passes the caps in batches of this many rows (the cap error says how far it got)."""
EXECUTE_RESULT_ROWS = 50
"""Rows of a command's own output (SHOW, SET) returned by execute: a confirmation, not data."""
LIST_MAX = 500
"""Databases/tables listed per call: a catalogue, not a dump."""
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")


class SparkRelation(LazyRelation):
    """A Spark SQL query kept in Spark: a lazy handle of the same kind as DuckDB's (see :mod:`.lazy`)."""

    __harness_engine__ = "spark"

    def __repr__(self) -> str:
        return f"<lazy spark relation: {self._sql[:80]!r}>"


class SparkEngine:
    """One Spark Connect session: binds cached handles as temp views, runs tagged jobs (see module doc)."""

    def __init__(self, remote: str | None = None, *, master: str | None = None,
                 files: Mapping[str, str] | None = None,
                 conf: Mapping[str, str] | None = None, max_rows: int = DEFAULT_MAX_ROWS,
                 timeout_s: float = DEFAULT_TIMEOUT_S, count_budget_s: float = COUNT_BUDGET_S,
                 class_archive: bool = True) -> None:
        if (remote is None) == (master is None):
            raise ValueError("a spark connector needs exactly one of 'remote' (e.g. 'sc://host:15002') or "
                             "'master' (e.g. 'local[2]')")
        if remote is not None and (not isinstance(remote, str) or not remote.startswith("sc://")):
            raise ValueError(f"spark remote {remote!r} must be a Spark Connect URL such as 'sc://host:15002'")
        if master is not None and (not isinstance(master, str)
                                   or not (master == "local" or re.fullmatch(r"local\[(\*|[1-9][0-9]*)\]", master))):
            raise ValueError(f"spark master {master!r} is not a local master; use 'local', 'local[N]' or "
                             "'local[*]' (reach a cluster through 'remote': 'sc://host:15002')")
        for what, seconds in (("timeout_s", timeout_s), ("count_budget_s", count_budget_s)):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
                raise ValueError(f"spark {what} must be a positive number of seconds, got {seconds!r}")
        if not isinstance(class_archive, bool):
            raise ValueError(f"spark class_archive must be true or false, got {class_archive!r}")
        self.remote, self.master = remote, master
        self.class_archive = class_archive
        """For ``master``: whether the local server makes and maps Spark's class archive (:mod:`.class_archive`)."""
        self.files: dict[str, tuple[str, str]] = {}
        """View name -> (Spark reader format, path or glob as Spark sees it), registered when the session starts."""
        for view, path in (files or {}).items():
            if not isinstance(view, str) or not _IDENT.fullmatch(view):
                raise ValueError(f"spark file view name {view!r} must be an identifier")
            self.files[view] = (_reader(path), str(path))
        self.conf = {str(k): str(v) for k, v in (conf or {}).items()}
        for key, value in self.conf.items():
            if key in PINNED_CONF and value.strip().lower() != PINNED_CONF[key]:
                raise ValueError(f"spark conf {key!r}={value!r} cannot be set: the connector keeps it at "
                                 f"{PINNED_CONF[key]!r} (SQL on raw files would read any file the server can; "
                                 "list files under 'files' to make them views)")
        self.max_rows, self.timeout_s, self.count_budget_s = max_rows, float(timeout_s), float(count_budget_s)
        self.server: Any = None
        self.connector_name = "spark"
        """The connector this engine serves (set by :func:`.connector.connector`); lazy handles'
        checkpoints name it."""
        self._spark: Any = None
        self._lock = threading.RLock()
        self._bound: dict[str, Any] = {}
        """Temp view name -> what it shows now: ("frame", version) or the SparkRelation itself."""
        self._reporter: Progress | None = None
        self._view_locations: dict[str, str] = {}
        """Each file view's location as Spark's plan shows it -> "view: path": the files a query may scan."""
        self.pinned: dict[str, bool] = {}
        """:data:`~.plan.PINNED_CONF` key -> whether this session took it (a remote cluster may refuse)."""
        self._copies = PseudonymCopies(self.files)
        """The file views' pseudonymised copies while a session's guard serves them."""
        self.interrupted: list[tuple[str, list[str]]] = []
        """(job tag, operation ids Spark reported cancelled) for each interrupt this engine sent, newest last.
        On ``KeyboardInterrupt`` pyspark's client also cancels its own operation, so the list may be empty."""

    # -- session ----------------------------------------------------------------------------

    @property
    def spark(self) -> Any:
        """The Spark Connect session (started on first use: a local server for ``master``)."""
        with self._lock:
            if self._spark is None:
                url = self.remote
                if self.master is not None:
                    from harness_magic.core.execution.connectors.spark.server import LocalSparkConnect, SparkStartError

                    if self.server is None:
                        try:
                            self.server = LocalSparkConnect(
                                self.master, {**self.conf, **PINNED_CONF},
                                read_paths=[path for _, path in self.files.values()], class_archive=self.class_archive)
                        except SparkStartError as exc:
                            raise ToolError(f"Spark did not start: {exc}") from None
                    url = self.server.url
                assert url is not None  # __init__ requires exactly one of remote and master
                try:
                    without_grpc_fork_handlers()
                    with warnings.catch_warnings():  # "pandas >= 3 not fully supported": frames cross as Arrow here
                        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas",
                                                category=FutureWarning)
                        from pyspark.sql.connect.session import SparkSession
                except ImportError as exc:
                    raise ToolError("pyspark[connect] is not installed; install harness_magic[spark]") from exc
                try:
                    spark = SparkSession.builder.remote(url).create()
                    if self.remote is not None:
                        for key, value in self.conf.items():
                            spark.conf.set(key, value)
                # broad: pyspark connect raises grpc and its own types; each is the tool's error
                except Exception as exc:
                    raise ToolError(f"Cannot reach Spark Connect at {_redact(url)}: {first_line(exc)}") from None
                self._pin(spark)
                spark.registerProgressHandler(self._on_progress)  # type: ignore[arg-type]  # pyspark annotates its ProgressHandler ABC but calls any callable taking these four arguments
                for view in self.files:
                    try:
                        self._register_view(spark, view, None)
                    # broad: pyspark raises its own types for a file it cannot read; the tool's error
                    except Exception as exc:
                        spark.stop()
                        raise ToolError(f"Spark cannot read file view {view!r} ({self.files[view][1]}): "
                                        f"{first_line(exc)}") from None
                self._spark, self._view_locations = spark, self._locations(spark)
            return self._spark

    def _register_view(self, spark: Any, view: str, copy: str | None) -> None:
        """(Re)define file view ``view`` over its configured file (``copy`` None), a pseudonymised copy (a path),
        or nothing (``""``: the view is dropped). A local server reads the copy itself; a remote one is sent
        its rows (it may not see this machine's files)."""
        if copy == "":
            spark.catalog.dropTempView(view)
            return
        if copy is None:
            kind, path = self.files[view]
            reader = spark.read.format(kind)
            if kind == "csv":
                reader = reader.option("header", "true").option("inferSchema", "true")
            reader.load(path).createOrReplaceTempView(view)
        elif self.server is not None:
            spark.read.parquet(copy).createOrReplaceTempView(view)
        else:
            import pyarrow.parquet as pq

            spark.createDataFrame(pq.read_table(copy)).createOrReplaceTempView(view)

    def _locations(self, spark: Any) -> dict[str, str]:
        """Each file view's scan location as Spark's plan shows it -> "view: path" (what a query may scan)."""
        locations: dict[str, str] = {}
        for view, (_, path) in self.files.items():
            if view in self._copies.problems:
                continue
            for location in view_locations(explain_query(spark.table(f"`{view}`"))):
                locations.setdefault(location, f"{view}: {path}")
        return locations

    def _serve(self, spark: Any, cache: HandleCache, wanted: set[str]) -> None:
        """Each file view over what ``cache``'s guard lets the agent's side see (see :mod:`.pseudonyms`): a
        changed view re-creates the lazy handles' views built on it; a query naming a view that cannot be
        served is refused."""
        directory = None if self.server is None else os.path.join(self.server.directory, "pseudonyms")
        changed = self._copies.refresh(cache.guard if cache is not None else None, directory)
        for view, copy in changed.items():
            self._register_view(spark, view, copy)
        if changed:
            self._view_locations = self._locations(spark)
            self._bound = {k: v for k, v in self._bound.items() if not isinstance(v, SparkRelation)}
        blocked = sorted(wanted & set(self._copies.problems))
        if blocked:
            raise ToolError(f"file view {blocked[0]!r} is not served: {self._copies.problems[blocked[0]]}")

    def _pin(self, spark: Any) -> None:
        """Set :data:`~.plan.PINNED_CONF` on the session (again after every ``execute``: a ``SET`` or
        ``RESET`` must not undo it); a setting a remote cluster refuses is recorded in :attr:`pinned`."""
        for key, value in PINNED_CONF.items():
            try:
                spark.conf.set(key, value)
                self.pinned[key] = True
            except Exception:  # broad: a server may refuse a conf key in several ways; recorded as not pinned
                self.pinned[key] = False

    def checked(self, spark: Any, sql: str) -> Any:
        """A DataFrame for one query, after Spark's plan of it passed :func:`~.plan.check_read`.

        Spark's parser must accept ``sql`` as a query (see :func:`.query.wrap_query`);
        the plan is explained, never run, so a refused query starts no job.
        """
        from pyspark.errors import PySparkException

        df = parse_query(spark, sql)
        try:
            plan = explain_query(df)
        except PySparkException as exc:
            raise ToolError(f"spark error: {first_line(exc)}") from None
        check_read(plan, self._view_locations, f"{self.connector_name}__query")
        return df

    def close(self) -> None:
        """End the Spark session and stop the local server, if this engine started one."""
        with self._lock:
            if self._spark is not None:
                try:
                    self._spark.stop()
                except Exception:  # broad: stopping a session that may already be gone; nothing else to do
                    pass
                self._spark = None
                self._bound.clear()
            self._copies.reset()
            if self.server is not None:
                self.server.stop()
                self.server = None

    def _on_progress(self, stages: Any = None, inflight_tasks: int = 0, operation_id: str | None = None,
                     done: bool = False) -> None:
        """Spark Connect's progress handler: tasks done / tasks known over the query's stages."""
        report = self._reporter
        if report is None or done:
            return
        try:
            total = sum(s.num_tasks for s in stages or ())
            finished = sum(s.num_completed_tasks for s in stages or ())
            report(100.0 * finished / total if total else None, False)
        except Exception:  # a display problem must never fail the query (pyspark re-raises handler errors)
            pass

    # -- running ----------------------------------------------------------------------------

    def run(self, work: Callable[[Any], Any], progress: Progress | None = None, *,
            timeout_s: float | None = None, cancel_on: tuple[type[BaseException], ...] = ()) -> Any:
        """``work(spark)`` under a fresh job tag, one call at a time.

        A timer interrupts the tag after the timeout (ToolError naming it); a
        ``KeyboardInterrupt`` interrupts the tag (cancelling the job on the
        server) and propagates, as do the exceptions in ``cancel_on``. Spark errors
        become ToolErrors with Spark's first line.
        """
        limit = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            spark = self.spark
            from pyspark.errors import PySparkException
            tag = f"harness-{uuid.uuid4().hex}"
            fired = threading.Event()
            interrupting: tuple[type[BaseException], ...] = (KeyboardInterrupt, *cancel_on)

            def cancel() -> None:
                fired.set()
                self._interrupt(spark, tag)

            timer = threading.Timer(limit, cancel)
            timer.daemon = True
            spark.addTag(tag)  # tags are per thread: the jobs this thread starts carry it
            self._reporter = progress
            timer.start()
            try:
                return work(spark)
            except interrupting:
                timer.cancel()
                self._interrupt(spark, tag)  # the job stops on the server, not only in this client
                raise
            except PySparkException as exc:
                if fired.is_set():
                    raise _Timeout(f"The Spark job ran past {limit:g} s and was cancelled.") from None
                raise ToolError(f"spark error: {first_line(exc)}") from None
            finally:
                timer.cancel()
                self._reporter = None
                try:
                    spark.removeTag(tag)
                except Exception:  # broad: removing a tag from a session that may be gone; nothing else to do
                    pass
                if progress is not None:
                    progress(None, True)

    def _interrupt(self, spark: Any, tag: str) -> None:
        try:
            cancelled = list(spark.interruptTag(tag))
        except Exception:  # broad: interrupting a session that may be gone; nothing was cancelled
            cancelled = []
        self.interrupted.append((tag, cancelled))

    # -- cached handles as temp views ---------------------------------------------------------

    def bind(self, spark: Any, cache: HandleCache, sql: str | None, root: SparkRelation | None = None
             ) -> tuple[dict[str, str], dict[str, SparkRelation]]:
        """Make every cached handle ``sql`` names (and ``root``'s inputs) a temp view of that name.

        Returns (frames: handle -> version, lazies: handle -> relation) that the
        text names directly. Frames are uploaded once per value version.
        """
        wanted = set(_IDENT.findall(sql)) if sql is not None else set()
        self._serve(spark, cache, wanted if root is None else wanted | set(_IDENT.findall(root.sql)))
        inputs = resolve_inputs(cache, wanted - set(self.files), self, SparkRelation.__harness_engine__, root)
        needed, order = inputs.needed, inputs.order
        clash = sorted((set(needed) | set(order)) & set(self.files))
        if clash:
            raise ToolError(f"a lazy handle was built on `{clash[0]}`, which is now a configured file view's name; "
                            "rebuild the lazy handle")
        for handle, version in sorted(needed.items()):
            if self._bound.get(handle) != ("frame", version):
                self._upload(spark, cache, handle)
                self._bound[handle] = ("frame", version)
        for handle, lazy in order.items():  # dependencies() lists inputs before the handles built on them
            if self._bound.get(handle) is not lazy:
                spark.sql(wrap_query(lazy.sql)).createOrReplaceTempView(handle)
                self._bound[handle] = lazy
        # resolve_inputs keeps only lazy handles whose engine is this one, and it makes SparkRelations only
        return inputs.frames, cast("dict[str, SparkRelation]", inputs.lazies)

    def _upload(self, spark: Any, cache: HandleCache, handle: str) -> None:
        frame = cache.view(handle)
        bad = [c for c in frame.columns if not isinstance(c, str)]
        if bad:
            raise ToolError(f"`{handle}` has non-text column names ({bad[:3]!r}); Spark needs text names: "
                            f"save a copy with renamed columns first")
        import pyarrow as pa

        try:
            table = pa.Table.from_pandas(frame, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise ToolError(f"`{handle}` cannot be sent to Spark as Arrow: {first_line(exc)}") from None
        spark.createDataFrame(table).createOrReplaceTempView(handle)

    # -- lazy handles ---------------------------------------------------------------------------

    def lazy(self, cache: HandleCache, sql: str, progress: Progress | None = None) -> SparkRelation:
        """A :class:`SparkRelation` for one query; its snapshot facts come from Spark."""

        def describe(spark: Any) -> tuple[dict[str, Any], dict[str, str], dict[str, SparkRelation], Any]:
            frames, lazies = self.bind(spark, cache, sql)
            df = self.checked(spark, sql)
            fields = df.schema.fields
            info: dict[str, Any] = {"columns": [f.name for f in fields],
                                    "engine_types": {f.name: f.dataType.simpleString() for f in fields}}
            head, rows, result = self._head(spark, df)
            info["head"] = arrow_to_frame(head)
            if rows is None:
                rows = self._count(spark, df)
            if rows is None:
                info["rows"], info["rows_estimated"] = estimate_rows(spark, sql), True
            else:
                info["rows"], info["rows_estimated"] = rows, False
            return info, frames, lazies, result

        info, frames, lazies, result = self.run(describe, progress)
        return SparkRelation(self, sql, frames, lazies, info, result=result)

    def _head(self, spark: Any, df: Any) -> tuple[Any, int | None, Any]:
        """(head rows as Arrow, the exact row count when the result is small, the whole small result as Arrow)
        from one ``LIMIT`` job.

        ``LIMIT ONE_PASS_ROWS + 1`` streams at most :data:`ONE_PASS_BYTES` (then
        stops reading); a result that ends within both is counted here and
        returned whole (kept with the handle for its pulls), so a small result
        (an aggregate) runs once from snapshot to pull; a large one stops early,
        is counted by :meth:`_count` and only its head rows are kept.
        """
        import pyarrow as pa

        limited = df.limit(ONE_PASS_ROWS + 1)
        client = spark.client
        stream = client.to_table_as_iterator(limited._plan.to_proto(client), limited._plan.observations)
        heads, kept, rows, total, complete = [], [], 0, 0, True
        try:
            for item in stream:
                if not isinstance(item, pa.Table):
                    continue
                if rows < HEAD_ROWS:
                    heads.append(item.slice(0, HEAD_ROWS - rows))
                rows += item.num_rows
                total += item.nbytes
                if total > ONE_PASS_BYTES:
                    complete = False
                    break
                kept.append(item)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        head = pa.concat_tables(heads) if heads else df.limit(0).toArrow()
        if complete and rows <= ONE_PASS_ROWS:
            return head, rows, pa.concat_tables(kept) if kept else head
        return head, None, None

    def _count(self, spark: Any, df: Any) -> int | None:
        """``count(*)`` if Spark answers within ``count_budget_s`` (the job is cancelled otherwise)."""
        tag = f"harness-count-{uuid.uuid4().hex}"
        spent = threading.Event()

        def budget_spent() -> None:
            spent.set()  # before the interrupt: the count may fail with OPERATION_CANCELED before interruptTag returns
            self._interrupt(spark, tag)

        timer = threading.Timer(self.count_budget_s, budget_spent)
        timer.daemon = True
        spark.addTag(tag)
        timer.start()
        try:
            return int(df.count())
        except Exception as exc:  # broad: pyspark raises its own types; re-raised unless our own time budget cut it
            if not spent.is_set():  # a real failure, not our budget
                raise
            del exc
            return None
        finally:
            timer.cancel()
            spark.removeTag(tag)

    def fetch_lazy(self, lazy: LazyRelation, cache: HandleCache, max_bytes: int, *, max_rows: int | None = None,
                   handle: str | None = None, progress: Progress | None = None) -> Any:
        """The rows of ``lazy`` as an Arrow table, streamed; :class:`MaterializeLimitError` once they pass
        ``max_bytes`` bytes or ``max_rows`` rows (None: no row cap), and the job is cancelled.

        A result its snapshot read whole (:attr:`LazyRelation.result`) is not
        asked of Spark again: its rows pass the same caps here. Either way the
        handle's inputs must still be the values it was built on (ToolError).
        """
        import pyarrow as pa

        if lazy.result is not None:
            resolve_inputs(cache, (), self, SparkRelation.__harness_engine__, lazy)  # the exact-inputs check only
            kept = lazy.result
            batches = collect_within_caps(kept.to_batches(max_chunksize=KEPT_BATCH_ROWS), lazy, handle, max_bytes,
                                          max_rows, "Spark", "spark__query, GROUP BY / WHERE / LIMIT")
            return pa.Table.from_batches(batches, schema=kept.schema)

        def fetch(spark: Any) -> Any:
            self.bind(spark, cache, None, root=lazy)  # type: ignore[arg-type]  # a lazy handle of this engine holds a SparkRelation
            df = self.checked(spark, lazy.sql)
            client = spark.client
            # the Connect client's streaming seam: Arrow batches as the server sends them
            stream = client.to_table_as_iterator(df._plan.to_proto(client), df._plan.observations)
            try:
                tables = (item for item in stream if isinstance(item, pa.Table))
                chunks = collect_within_caps(tables, lazy, handle, max_bytes, max_rows, "Spark",
                                             "spark__query, GROUP BY / WHERE / LIMIT")
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
            if not chunks:
                return df.limit(0).toArrow()
            return pa.concat_tables(chunks)

        try:
            return self.run(fetch, progress, cancel_on=(MaterializeLimitError,))
        except _Timeout as exc:
            raise ToolError(str(exc)) from None

    # -- eager statements ----------------------------------------------------------------------

    def query(self, cache: HandleCache, sql: str, max_rows: int | None = None,
              progress: Progress | None = None) -> tuple[Any, bool]:
        """Up to ``max_rows`` rows of one query as a frame, and whether there were more."""
        cap = cap_rows(max_rows, self.max_rows)

        def fetch(spark: Any) -> tuple[Any, bool]:
            self.bind(spark, cache, sql)
            table = self.checked(spark, sql).limit(cap + 1).toArrow()
            return arrow_to_frame(table.slice(0, cap)), table.num_rows > cap

        return self.run(fetch, progress)

    def execute(self, cache: HandleCache, sql: str, progress: Progress | None = None) -> Any:
        """Run one statement as is (after approval); the command's own output rows, if any, as a frame.

        Spark's plan of the statement is explained first and a script
        transformation anywhere in it is refused (:func:`~.plan.check_statement`);
        :data:`~.plan.PINNED_CONF` is set again afterwards.
        """

        def go(spark: Any) -> Any:
            self.bind(spark, cache, sql)
            check_statement(explain_statement(spark, sql), f"{self.connector_name}__execute")
            try:
                df = spark.sql(sql)  # commands run here, eagerly
            finally:
                self._pin(spark)
            if not df.columns:
                return None
            return arrow_to_frame(df.limit(EXECUTE_RESULT_ROWS).toArrow())

        return self.run(go, progress)

    # -- catalog ------------------------------------------------------------------------------

    def list_databases(self) -> list[dict[str, Any]]:
        return self.run(lambda spark: [{"name": d.name, **({"description": d.description} if d.description else {})}
                                       for d in spark.catalog.listDatabases()[:LIST_MAX]])

    def list_tables(self, database: str | None) -> list[dict[str, Any]]:
        if database is not None:
            _check_name(database, "database")

        def go(spark: Any) -> list[dict[str, Any]]:
            try:
                tables = spark.catalog.listTables(database) if database else spark.catalog.listTables()
            except Exception as exc:  # broad: pyspark raises its own types; the tool's error
                raise ToolError(f"No database {database!r}: {first_line(exc)}; use list_databases") from None
            return [{"name": t.name, "database": t.namespace[0] if t.namespace else None,
                     "kind": ("file view" if t.name in self.files else "temporary view") if t.isTemporary
                     else str(t.tableType).lower(), **({"path": self.files[t.name][1]} if t.isTemporary
                                                       and t.name in self.files else {})}
                    for t in tables[:LIST_MAX]]

        return self.run(go)

    def describe_table(self, table: str, database: str | None) -> dict[str, Any]:
        _check_name(table, "table")
        if database is not None:
            _check_name(database, "database")
        qualified = ".".join(f"`{part}`" for part in ([database] if database else []) + [table])

        def go(spark: Any) -> dict[str, Any]:
            try:
                rows = spark.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect()
            except Exception as exc:  # broad: pyspark raises its own types; the tool's error
                raise ToolError(f"No table {qualified.replace('`', '')}: {first_line(exc)}; use "
                                "list_tables") from None
            columns, partitions, details, section = [], [], {}, "columns"
            for row in rows:
                name, kind = (row[0] or "").strip(), (row[1] or "").strip()
                if not name:
                    continue
                if name.startswith("#"):
                    if name == "# col_name":  # the partition section's column header
                        continue
                    section = "partitions" if "Partition" in name else "details" if "Detailed" in name else "other"
                    continue
                if section == "columns":
                    columns.append({"name": name, "type": kind})
                elif section == "partitions":
                    partitions.append(name)
                elif section == "details":
                    details[name] = kind
            out: dict[str, Any] = {"table": qualified.replace("`", ""), "columns": columns,
                                   "partitioned_by": partitions}
            for key in ("Type", "Provider", "Location"):
                if details.get(key):
                    out[key.lower()] = details[key]
            stats = re.search(r"([0-9]+) rows", details.get("Statistics", ""))
            if stats:
                out["rows"], out["rows_estimated"] = int(stats.group(1)), True
            else:
                estimate = estimate_rows(spark, f"SELECT * FROM {qualified}")
                out["rows"] = estimate
                out["rows_estimated"] = True
            return out

        return self.run(go)


class _Timeout(ToolError):
    pass


_READERS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json",
            ".ndjson": "json", ".orc": "orc"}
"""File suffix -> Spark reader format; a directory or glob without a known suffix is read as Parquet."""


def _reader(path: Any) -> str:
    text = str(path)
    stem = text.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix, kind in _READERS.items():
        if stem.endswith(suffix):
            return kind
    if "." in stem and not any(c in stem for c in "*?["):
        raise ValueError(f"spark cannot read {text!r}; supported: {', '.join(sorted(_READERS))}, or a directory "
                         "of Parquet files")
    return "parquet"


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolError(f"{name!r} is not a {what} name (letters, digits, _ and -)")


def _redact(url: str) -> str:
    return re.sub(r"token=[^;]*", "token=***", url)
