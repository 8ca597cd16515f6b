"""The ``spark`` connector: Spark SQL through Spark Connect, results kept in Spark as lazy handles.

Configuration (a built-in type of ``AgentMagics.connectors``)::

    {"type": "spark", "remote": "sc://host:15002"}   # a cluster through Spark Connect
    {"type": "spark", "master": "local[2]"}          # one machine: a private local Connect server
    {"type": "spark", "master": "local[2]", "files": {"events": "data/events/"}}  # + file views

Both take the same client path: ``master`` starts a :class:`~.server.LocalSparkConnect`
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
* **Spark's plan is checked before any job runs** (:mod:`.plan`). Every DataFrame
  built from model-controlled SQL (a query, lazy or not; a lazy handle's snapshot and
  pulls; a handle re-created from a checkpoint) is explained first, and refused when any
  of its plans, views expanded, runs a script (``TRANSFORM ... USING``), holds a command
  or a reflection call, or scans files other than the configured file views. Sessions run
  with SQL on raw files off (:data:`~.plan.PINNED_CONF`, set again after every
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

from typing import Any, Mapping

from harness_magic.core.execution.connectors._results import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    cap_rows,
    lazy_handle_note,
    truncation_note,
)
from harness_magic.core.execution.connectors.classify import SQLClassificationError, classify_sql, require_one_read
from harness_magic.core.execution.connectors.lazy import (
    Rebind,
    cache_location,
    definition_rebinder,
    is_cached_frame,
)
from harness_magic.core.execution.connectors.progress import progress_reporter
from harness_magic.core.execution.connectors.estimates import gate_read
from harness_magic.core.execution.connectors.registry import Connector, ConnectorResult, ToolContext
from harness_magic.core.execution.connectors.spark.estimate import spark_estimate
from harness_magic.core.execution.connectors.sameness import records_configuration
from harness_magic.core.execution.connectors.spark.engine import (
    COUNT_BUDGET_S,
    EXECUTE_RESULT_ROWS,
    SparkEngine,
    SparkRelation,
)
from harness_magic.core.execution.tools import ToolError

__all__ = [
    "spark_connector",
    "spark_rebinder",
]

def _check_query(sql: Any, connector_name: str, allow_writes: bool = True) -> None:
    """The classification every Spark query passes before anything is sent (the model's, and a checkpoint's
    re-binding): one plain query; ToolError otherwise."""
    advice = (f"use {connector_name}__execute, which asks the user for approval" if allow_writes
              else "this connector is read-only")
    require_one_read(sql, "spark", f"{connector_name}__query", advice)


def spark_rebinder(connectors: Any, others: Rebind | None = None) -> Rebind:
    """``rebind`` for :meth:`SessionCache.load`: lazy Spark handles re-created on the configured connectors,
    handles of another engine passed to ``others`` (refused without it).

    A saved definition names its connector and query; the query passes the
    same classification as the model's ``spark__query``, Spark's parser (the
    subquery wrapper) and the plan check, so a crafted checkpoint can run
    nothing the model could not. Refusals raise ToolError/LookupError naming the reason.
    :func:`~harness_magic.core.execution.connectors.checkpoint.load_checkpoint` chains the
    DuckDB connector's rebinder as ``others``.
    """
    return definition_rebinder(connectors, SparkRelation.__harness_engine__, SparkEngine, _check_query,
                               others=others)


@records_configuration
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
    class_archive: bool = True,
) -> Connector:
    """Spark SQL through Spark Connect at ``remote``, or on a private local server for ``master``.

    ``files`` (view name -> Parquet/CSV/JSON file, directory or glob, as Spark
    sees the path) become temporary views of the session. ``conf`` sets Spark
    settings (server start settings for ``master``, session settings for
    ``remote``). ``class_archive``: for ``master``, whether the local server makes and maps Spark's class
    archive (twice as fast a start from the second server on; ~180 MB in the user's cache). Nothing starts
    until the first tool call.
    """
    engine = SparkEngine(remote, master=master, files=files, conf=conf, max_rows=max_rows, timeout_s=timeout_s,
                         count_budget_s=count_budget_s, class_archive=class_archive)
    connector = Connector(
        name, description or "Apache Spark SQL (Spark Connect): list and describe tables, run queries whose "
                             "results stay in Spark as lazy handles; cached frames are tables by handle name.")
    connector.engine = engine  # type: ignore[attr-defined]  # a Spark connector's own attribute
    connector.dialect = "spark"
    engine.connector_name = name  # lazy handles' checkpoint definitions name it

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
        if lazy and max_rows is not None:
            raise ToolError("max_rows applies to fetched results; a lazy handle fetches nothing. Add LIMIT "
                            "to the SQL instead, or pass lazy=false.")
        estimate = gate_read(context, lambda: spark_estimate(engine, context.cache, sql), "spark")  # before any job
        progress = progress_reporter(context, connector.name)
        if lazy:
            relation = engine.lazy(context.cache, sql, progress)
            note = lazy_handle_note(relation, "Spark", connector.name,
                                    "counting took too long and Spark has no estimate")
            return ConnectorResult(relation, " ".join(filter(None, [estimate, note])), name=name)
        frame, truncated = engine.query(context.cache, sql, max_rows, progress)
        note = truncation_note(len(frame), cap_rows(max_rows, engine.max_rows), truncated)
        return ConnectorResult(frame, " ".join(filter(None, [estimate, note])), name=name)

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
            frame = engine.execute(context.cache, sql, progress_reporter(context, connector.name))
            what = classification.statements[0].keyword if classification is not None else "the statement"
            note = f"Executed {what}."
            if frame is None or not len(frame.columns):
                return note
            return ConnectorResult(frame, note + f" Its output (at most {EXECUTE_RESULT_ROWS} rows):",
                                   name=f"{name}_output")

    return connector
