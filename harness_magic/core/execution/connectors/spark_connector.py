"""The ``spark`` connector: Spark SQL through Spark Connect, results kept in Spark as lazy handles.

Configuration (a built-in type of ``AgentMagics.connectors``)::

    {"type": "spark", "remote": "sc://host:15002"}   # a cluster through Spark Connect
    {"type": "spark", "master": "local[2]"}          # one machine: a private local Connect server
    {"type": "spark", "master": "local[2]", "files": {"events": "data/events/"}}  # + file views

Both take the same client path: ``master`` starts a :class:`~.spark_server.LocalSparkConnect`
(loopback, random token, stopped with the engine) on first use and connects to it.
Each engine opens its own Spark session (``SparkSession.builder.remote(url).create()``),
so its temporary views are its own.

Tools: ``list_databases``, ``list_tables``, ``describe_table`` (schema, partitioning,
row estimate), ``query`` (one query; a lazy handle by default) and, unless
``allow_writes=False``, ``execute`` (anything else, after approval).

Safety, in order:

* **Classification decides what to ask.** ``sqlglot`` (``read="spark"``) classifies the
  text before anything is sent (DDL and ``INSERT`` run eagerly in ``spark.sql``, so a
  statement must be classified first). ``query`` refuses all but one plain query;
  everything else (DDL, DML, ``CACHE``, ``ADD JAR``, ``SET``, reflection calls, text the
  parser rejects) goes through ``execute``, a ``write``-class tool whose approval is
  asked with the classification; a denied call sends nothing to Spark.
* **Spark's parser enforces it.** ``query`` sends the text only inside
  ``SELECT * FROM (<text>) AS __harness_query``: Spark's grammar accepts nothing but a
  query there, so a command the classifier missed fails to parse in Spark instead of
  running. (Reflection functions are queries to Spark: classification and the plan check catch them.)
* **Spark's plan is checked before any job runs** (:mod:`.spark_plan`). Every DataFrame
  built from model-controlled SQL (a query, lazy or not; a lazy handle's snapshot and
  pulls; a handle re-created from a checkpoint) is explained first, and refused when any
  of its plans, views expanded, runs a script (``TRANSFORM ... USING``), holds a command
  or a reflection call, or scans files other than the configured file views. Sessions run
  with SQL on raw files off (:data:`~.spark_plan.PINNED_CONF`, set again after every
  ``execute``). ``execute`` refuses a script transformation too: an approval for a
  statement never covers running a program on the server.
* **Cached values cross exactly.** A cached DataFrame handle the SQL names is uploaded
  (Arrow) as a temporary view of that name; a lazy Spark handle becomes a temporary view
  of its own query, its inputs first. A temp view shadows a catalog table of the same
  unqualified name (Spark's rule); qualify the table (``db.table``) to reach it.

Lazy handles are :class:`SparkRelation` values, the same engine-value kind as DuckDB's
:class:`~.lazy.LazyRelation`: snapshot by pushdown (schema; head rows through one
``LIMIT`` job, which also counts a result of at most :data:`ONE_PASS_ROWS` rows; else
``count(*)`` within :data:`COUNT_BUDGET_S`, else Spark's ``rowCount`` estimate marked as
such); interpreter code naming one materialises it as streamed Arrow batches under
``materialize_max_bytes`` / ``materialize_max_rows``. A result the ``LIMIT`` job read to
its end (at most :data:`ONE_PASS_ROWS` rows and :data:`ONE_PASS_BYTES` bytes, already in
the kernel) is kept with the handle, so pulling it runs no second Spark job.

Every Spark call runs under a fresh job tag: Spark Connect's progress reports (stages,
tasks) become :class:`~harness_magic.core.transcript.events.EngineProgress` events, and a timeout or
an interrupt (``KeyboardInterrupt`` from the kernel's stop button) calls
``interruptTag``, which cancels the job on the server.
"""

from __future__ import annotations

import re
import threading
import uuid
import warnings
from typing import Any, Callable, Mapping

from harness_magic.core.execution.connectors._results import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    arrow_to_frame,
    cap_rows,
    lazy_handle_note,
    truncation_note,
)
from harness_magic.core.execution.connectors.classify import SQLClassificationError, classify_sql, require_one_read
from harness_magic.core.execution.connectors.lazy import (
    LazyRelation,
    MaterializeLimitError,
    cache_location,
    definition_rebinder,
    collect_within_caps,
    is_cached_frame,
    resolve_inputs,
)
from harness_magic.core.execution.connectors.registry import Connector, ConnectorResult, ToolContext
from harness_magic.core.execution.connectors.spark_plan import (
    PINNED_CONF,
    check_read,
    check_statement,
    explain_query,
    explain_statement,
    view_locations,
)
from harness_magic.core.execution.tools import ToolError

__all__ = ["spark_connector", "spark_rebinder", "SparkEngine", "SparkRelation", "wrap_query"]

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
_ROW_COUNT = re.compile(r"rowCount=([0-9.]+(?:E[+-]?[0-9]+)?)")
_TRAILING = re.compile(r"[\s;]+\Z")
Progress = Callable[[float | None, bool], None]


def wrap_query(sql: str) -> str:
    """``sql`` as the only content of a subquery: Spark's parser accepts nothing but a query there.

    Trailing semicolons and blanks are dropped; the text sits on its own lines,
    so a trailing ``--`` comment cannot swallow the closing parenthesis.
    """
    return f"SELECT * FROM (\n{_TRAILING.sub('', sql)}\n) AS __harness_query"


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
                 timeout_s: float = DEFAULT_TIMEOUT_S, count_budget_s: float = COUNT_BUDGET_S) -> None:
        if (remote is None) == (master is None):
            raise ValueError("a spark connector needs exactly one of 'remote' (e.g. 'sc://host:15002') or "
                             "'master' (e.g. 'local[2]')")
        if remote is not None and (not isinstance(remote, str) or not remote.startswith("sc://")):
            raise ValueError(f"spark remote {remote!r} must be a Spark Connect URL such as 'sc://host:15002'")
        if master is not None and (not isinstance(master, str)
                                   or not (master == "local" or re.fullmatch(r"local\[(\*|[1-9][0-9]*)\]", master))):
            raise ValueError(f"spark master {master!r} is not a local master; use 'local', 'local[N]' or "
                             "'local[*]' (reach a cluster through 'remote': 'sc://host:15002')")
        for what, value in (("timeout_s", timeout_s), ("count_budget_s", count_budget_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"spark {what} must be a positive number of seconds, got {value!r}")
        self.remote, self.master = remote, master
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
        """The connector this engine serves (set by :func:`spark_connector`); lazy handles' checkpoints name it."""
        self._spark: Any = None
        self._lock = threading.RLock()
        self._bound: dict[str, Any] = {}
        """Temp view name -> what it shows now: ("frame", version) or the SparkRelation itself."""
        self._reporter: Progress | None = None
        self._view_locations: dict[str, str] = {}
        """Each file view's location as Spark's plan shows it -> "view: path": the files a query may scan."""
        self.pinned: dict[str, bool] = {}
        """:data:`~.spark_plan.PINNED_CONF` key -> whether this session took it (a remote cluster may refuse)."""
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
                    from harness_magic.core.execution.connectors.spark_server import LocalSparkConnect, SparkStartError

                    if self.server is None:
                        try:
                            self.server = LocalSparkConnect(
                                self.master, {**self.conf, **PINNED_CONF},
                                read_paths=[path for _, path in self.files.values()])
                        except SparkStartError as exc:
                            raise ToolError(f"Spark did not start: {exc}") from None
                    url = self.server.url
                try:
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
                except Exception as exc:
                    raise ToolError(f"Cannot reach Spark Connect at {_redact(url)}: {_first_line(exc)}") from None
                self._pin(spark)
                spark.registerProgressHandler(self._on_progress)
                locations: dict[str, str] = {}
                for view, (kind, path) in self.files.items():
                    try:
                        reader = spark.read.format(kind)
                        if kind == "csv":
                            reader = reader.option("header", "true").option("inferSchema", "true")
                        reader.load(path).createOrReplaceTempView(view)
                        for location in view_locations(explain_query(spark.table(f"`{view}`"))):
                            locations.setdefault(location, f"{view}: {path}")
                    except Exception as exc:
                        spark.stop()
                        raise ToolError(f"Spark cannot read file view {view!r} ({path}): {_first_line(exc)}") from None
                self._spark, self._view_locations = spark, locations
            return self._spark

    def _pin(self, spark: Any) -> None:
        """Set :data:`~.spark_plan.PINNED_CONF` on the session (again after every ``execute``: a ``SET`` or
        ``RESET`` must not undo it); a setting a remote cluster refuses is recorded in :attr:`pinned`."""
        for key, value in PINNED_CONF.items():
            try:
                spark.conf.set(key, value)
                self.pinned[key] = True
            except Exception:
                self.pinned[key] = False

    def checked(self, spark: Any, sql: str) -> Any:
        """A DataFrame for one query, after Spark's plan of it passed :func:`~.spark_plan.check_read`.

        Spark's parser must accept ``sql`` as a query (see :func:`wrap_query`);
        the plan is explained, never run, so a refused query starts no job.
        """
        from pyspark.errors import PySparkException

        df = _parse(spark, sql)
        try:
            plan = explain_query(df)
        except PySparkException as exc:
            raise ToolError(f"spark error: {_first_line(exc)}") from None
        check_read(plan, self._view_locations, f"{self.connector_name}__query")
        return df

    def close(self) -> None:
        """End the Spark session and stop the local server, if this engine started one."""
        with self._lock:
            if self._spark is not None:
                try:
                    self._spark.stop()
                except Exception:
                    pass
                self._spark = None
                self._bound.clear()
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
            except (KeyboardInterrupt, *cancel_on):
                timer.cancel()
                self._interrupt(spark, tag)  # the job stops on the server, not only in this client
                raise
            except PySparkException as exc:
                if fired.is_set():
                    raise _Timeout(f"The Spark job ran past {limit:g} s and was cancelled.") from None
                raise ToolError(f"spark error: {_first_line(exc)}") from None
            finally:
                timer.cancel()
                self._reporter = None
                try:
                    spark.removeTag(tag)
                except Exception:
                    pass
                if progress is not None:
                    progress(None, True)

    def _interrupt(self, spark: Any, tag: str) -> None:
        try:
            cancelled = list(spark.interruptTag(tag))
        except Exception:
            cancelled = []
        self.interrupted.append((tag, cancelled))

    # -- cached handles as temp views ---------------------------------------------------------

    def bind(self, spark: Any, cache: Any, sql: str | None, root: SparkRelation | None = None
             ) -> tuple[dict[str, str], dict[str, SparkRelation]]:
        """Make every cached handle ``sql`` names (and ``root``'s inputs) a temp view of that name.

        Returns (frames: handle -> version, lazies: handle -> relation) that the
        text names directly. Frames are uploaded once per value version.
        """
        wanted = set(_IDENT.findall(sql)) if sql is not None else set()
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
        return inputs.frames, inputs.lazies

    def _upload(self, spark: Any, cache: Any, handle: str) -> None:
        frame = cache.view(handle)
        bad = [c for c in frame.columns if not isinstance(c, str)]
        if bad:
            raise ToolError(f"`{handle}` has non-text column names ({bad[:3]!r}); Spark needs text names: "
                            f"save a copy with renamed columns first")
        import pyarrow as pa

        try:
            table = pa.Table.from_pandas(frame, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise ToolError(f"`{handle}` cannot be sent to Spark as Arrow: {_first_line(exc)}") from None
        spark.createDataFrame(table).createOrReplaceTempView(handle)

    # -- lazy handles ---------------------------------------------------------------------------

    def lazy(self, cache: Any, sql: str, progress: Progress | None = None) -> SparkRelation:
        """A :class:`SparkRelation` for one query; its snapshot facts come from Spark."""

        def describe(spark: Any) -> tuple[dict[str, Any], dict[str, str], dict[str, SparkRelation]]:
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
                info["rows"], info["rows_estimated"] = _estimate(spark, sql), True
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
        timer = threading.Timer(self.count_budget_s, lambda: self._interrupt(spark, tag))
        timer.daemon = True
        spark.addTag(tag)
        timer.start()
        try:
            return int(df.count())
        except Exception as exc:
            if timer.is_alive():  # a real failure, not our budget
                raise
            del exc
            return None
        finally:
            timer.cancel()
            spark.removeTag(tag)

    def fetch_lazy(self, lazy: LazyRelation, cache: Any, max_bytes: int, *, max_rows: int | None = None,
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
            self.bind(spark, cache, None, root=lazy)  # type: ignore[arg-type]
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

    def query(self, cache: Any, sql: str, max_rows: int | None = None,
              progress: Progress | None = None) -> tuple[Any, bool]:
        """Up to ``max_rows`` rows of one query as a frame, and whether there were more."""
        cap = cap_rows(max_rows, self.max_rows)

        def fetch(spark: Any) -> tuple[Any, bool]:
            self.bind(spark, cache, sql)
            table = self.checked(spark, sql).limit(cap + 1).toArrow()
            return arrow_to_frame(table.slice(0, cap)), table.num_rows > cap

        return self.run(fetch, progress)

    def execute(self, cache: Any, sql: str, progress: Progress | None = None) -> Any:
        """Run one statement as is (after approval); the command's own output rows, if any, as a frame.

        Spark's plan of the statement is explained first and a script
        transformation anywhere in it is refused (:func:`~.spark_plan.check_statement`);
        :data:`~.spark_plan.PINNED_CONF` is set again afterwards.
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
            except Exception as exc:
                raise ToolError(f"No database {database!r}: {_first_line(exc)}; use list_databases") from None
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
            except Exception as exc:
                raise ToolError(f"No table {qualified.replace('`', '')}: {_first_line(exc)}; use "
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
                estimate = _estimate(spark, f"SELECT * FROM {qualified}")
                out["rows"] = estimate
                out["rows_estimated"] = True
            return out

        return self.run(go)


class _Timeout(ToolError):
    pass


def _parse(spark: Any, sql: str) -> Any:
    """A DataFrame for ``sql``, which Spark's own parser must accept as a query (see :func:`wrap_query`)."""
    from pyspark.errors import PySparkException

    try:
        return spark.sql(wrap_query(sql))
    except PySparkException as exc:
        text = _first_line(exc)
        if "PARSE_SYNTAX_ERROR" in text or "ParseException" in type(exc).__name__:
            raise ToolError(f"Refused by Spark's parser: the text is not one query ({text}); spark__query runs "
                            "a single SELECT/WITH/FROM query.") from None
        raise ToolError(f"spark error: {text}") from None


def _estimate(spark: Any, sql: str) -> int | None:
    """Spark's ``rowCount`` estimate for the query's top operator (``EXPLAIN COST``), if it has one."""
    try:
        plan = spark.sql(f"EXPLAIN COST {wrap_query(sql)}").collect()[0][0]
    except Exception:
        return None
    optimized = plan.split("== Optimized Logical Plan ==")[-1].strip().splitlines()
    match = _ROW_COUNT.search(optimized[0]) if optimized else None  # the top operator's own statistics
    return int(float(match.group(1))) if match else None


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:500]


def _redact(url: str) -> str:
    return re.sub(r"token=[^;]*", "token=***", url)


def _progress_reporter(context: ToolContext, engine: str) -> Progress | None:
    from harness_magic.core.execution.connectors.duckdb_connector import _progress_reporter as reporter

    return reporter(context, engine)


def _check_query(sql: Any, connector_name: str, allow_writes: bool = True) -> None:
    """The classification every Spark query passes before anything is sent (the model's, and a checkpoint's
    re-binding): one plain query; ToolError otherwise."""
    advice = (f"use {connector_name}__execute, which asks the user for approval" if allow_writes
              else "this connector is read-only")
    require_one_read(sql, "spark", f"{connector_name}__query", advice)


def spark_rebinder(connectors: Any) -> Callable[[str, dict[str, str], Any], LazyRelation]:
    """``rebind`` for :meth:`SessionCache.load`: lazy Spark handles re-created on the configured connectors,
    lazy DuckDB handles through :func:`~.duckdb_connector.lazy_rebinder`.

    A saved definition names its connector and query; the query passes the
    same classification as the model's ``spark__query``, Spark's parser (the
    subquery wrapper) and the plan check, so a crafted checkpoint can run
    nothing the model could not. Refusals raise ToolError/LookupError naming the reason.
    """
    from harness_magic.core.execution.connectors.duckdb_connector import lazy_rebinder

    if not (hasattr(connectors, "names") and hasattr(connectors, "__getitem__")):
        connectors = list(connectors)  # read twice: once per engine's rebinder
    return definition_rebinder(connectors, SparkRelation.__harness_engine__, SparkEngine, _check_query,
                               others=lazy_rebinder(connectors))


def spark_connector(
    remote: str | None = None,
    *,
    master: str | None = None,
    files: Mapping[str, str] | None = None,
    name: str = "spark",
    description: str | None = None,
    conf: Mapping[str, str] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    count_budget_s: float = COUNT_BUDGET_S,
    allow_writes: bool = True,
) -> Connector:
    """Spark SQL through Spark Connect at ``remote``, or on a private local server for ``master``.

    ``files`` (view name -> Parquet/CSV/JSON file, directory or glob, as Spark
    sees the path) become temporary views of the session. ``conf`` sets Spark
    settings (server start settings for ``master``, session settings for
    ``remote``). Nothing starts until the first tool call.
    """
    engine = SparkEngine(remote, master=master, files=files, conf=conf, max_rows=max_rows, timeout_s=timeout_s,
                         count_budget_s=count_budget_s)
    connector = Connector(
        name, description or "Apache Spark SQL (Spark Connect): list and describe tables, run queries whose "
                             "results stay in Spark as lazy handles; cached frames are tables by handle name.")
    connector.engine = engine  # type: ignore[attr-defined]
    engine.connector_name = name  # type: ignore[attr-defined]  # lazy handles' checkpoint definitions name it

    @connector.tool()
    def list_databases() -> Any:
        """List the databases (namespaces) of Spark's catalog."""
        return engine.list_databases() or "No databases."

    @connector.tool()
    def list_tables(context: ToolContext, database: str | None = None) -> Any:
        """List tables and views of a database, and the cached handles Spark SQL can name.

        Args:
            database: Database to list (the current one when omitted).
        """
        out = [t for t in engine.list_tables(database) if not (t["kind"] == "temporary view"
                                                               and t["name"] in context.cache)]
        for handle in context.cache.names():
            location = cache_location(context.cache, handle)
            if location == SparkRelation.__harness_engine__:
                snap = context.cache.snapshot(handle)
                out.append({"name": handle, "kind": "lazy handle", "rows": snap.get("shape", [None])[0],
                            **({"rows_estimated": True} if snap.get("rows_estimated") else {})})
            elif location in ("memory", "disk") and is_cached_frame(context.cache, handle):
                out.append({"name": handle, "kind": "cached frame",
                            "rows": context.cache.snapshot(handle).get("shape", [None])[0]})
        return out if out else "No tables, views or cached frames yet."

    @connector.tool()
    def describe_table(table: str, database: str | None = None) -> Any:
        """Describe a table: columns and Spark types, partition columns, row estimate.

        Args:
            table: Table or view name.
            database: Its database (the current one when omitted).
        """
        return engine.describe_table(table, database)

    @connector.tool(result_name=f"{name}_result")
    def query(sql: str, context: ToolContext, name: str | None = None, lazy: bool = True,
              max_rows: int | None = None) -> Any:
        """Run one Spark SQL query; cached frames and lazy handles are tables named by their handle.

        Args:
            sql: One SELECT/WITH/FROM query, e.g. SELECT region, sum(x) AS total FROM sales GROUP BY 1.
            name: Preferred handle name for the result.
            lazy: Keep the result in Spark as a lazy handle (default): later queries can name it; python code
                that names it brings its rows in, within a size cap. False fetches up to max_rows rows now.
            max_rows: With lazy=false, fetch at most this many rows (cannot exceed the connector's cap).
        """
        _check_query(sql, connector.name, allow_writes)
        progress = _progress_reporter(context, connector.name)
        if lazy:
            if max_rows is not None:
                raise ToolError("max_rows applies to fetched results; a lazy handle fetches nothing. Add LIMIT "
                                "to the SQL instead, or pass lazy=false.")
            relation = engine.lazy(context.cache, sql, progress)
            note = lazy_handle_note(relation, "Spark", connector.name,
                                    "counting took too long and Spark has no estimate")
            return ConnectorResult(relation, note, name=name)
        frame, truncated = engine.query(context.cache, sql, max_rows, progress)
        return ConnectorResult(frame, truncation_note(len(frame), cap_rows(max_rows, engine.max_rows), truncated),
                               name=name)

    if allow_writes:

        def classify(arguments: dict[str, Any]) -> tuple[str, str]:
            sql = str(arguments.get("sql", ""))
            try:
                classification = classify_sql(sql, "spark")
            except SQLClassificationError as exc:  # fail closed: the most severe class
                return "destructive", f"{sql} [the Spark SQL parser cannot classify it: {exc}]"
            kind = "write" if classification.kind == "read" else classification.kind
            return kind, f"{sql} [{classification.summary}]"

        @connector.tool(safety="write", classify=classify)
        def execute(sql: str, context: ToolContext) -> Any:
            """Run one statement that changes something (CREATE, INSERT, CACHE, SET, ...) after the user approves it.

            Args:
                sql: Exactly one Spark SQL statement.
            """
            try:
                classification = classify_sql(sql, "spark")
            except SQLClassificationError:
                classification = None  # approved as unclassifiable; Spark's parser decides
            if classification is not None and len(classification.statements) > 1:
                raise ToolError(f"Refused: {len(classification.statements)} statements; send one statement per "
                                "call.")
            frame = engine.execute(context.cache, sql, _progress_reporter(context, connector.name))
            what = classification.statements[0].keyword if classification is not None else "the statement"
            note = f"Executed {what}."
            if frame is None or not len(frame.columns):
                return note
            return ConnectorResult(frame, note + f" Its output (at most {EXECUTE_RESULT_ROWS} rows):",
                                   name=f"{name}_output")

    return connector
