"""Classify SQL as ``read``, ``write`` or ``destructive`` with the engine's own parser.

The class decides what to *ask*: ``read`` runs through a connector's query
tool, anything else goes to the approval policy (or is refused by a
read-only tool). It is never the boundary — that is the engine's (a
read-only transaction, the database role, a DuckDB connection without file
access); see the connectors' docstrings.

Parsers, by dialect:

``postgresql``
    ``pglast``, PostgreSQL's own parser (the server's view of where
    statements, strings and identifiers start and end).
``duckdb``
    ``duckdb.extract_statements`` and the statement types DuckDB reports; the
    tree of each query from DuckDB's own ``json_serialize_sql`` (parsed on a
    private in-memory connection without file access, never bound or run).
anything else
    ``sqlglot`` in that dialect (SQLAlchemy dialect names are mapped).

Every statement's whole parse tree is walked (CTEs, subqueries, set
operations, CTEs inside CTEs, at any depth): a statement takes the most
severe class of anything inside it, so ``WITH d AS (DELETE FROM t RETURNING *)
SELECT * FROM d`` is ``destructive`` and so is an ``INSERT`` whose CTE deletes
every row. DuckDB's ``query('<sql>')`` takes the class of the SQL it is given
(a text not written in the call is ``write``). A tree too deep to walk, or a
DuckDB query whose tree cannot be shown, is not a read.

Rules (all fail closed):

* more than one statement is at least ``write`` (a read tool runs exactly one);
* only a plain query is ``read``: ``SELECT``/``VALUES``/``TABLE``/``WITH`` without
  a data-modifying statement anywhere inside, ``INTO`` or row locks, ``SHOW``, ``EXPLAIN`` without
  ``ANALYZE`` (``EXPLAIN ANALYZE`` takes the class of the statement it runs);
* a query calling a function known to have side effects (:data:`SIDE_EFFECT_FUNCTIONS`,
  :data:`SIDE_EFFECT_PREFIXES`: signalling backends, advisory locks, notify,
  configuration setters, large objects, dblink, server file access, sequence
  changes, SQL run from a string) is ``write``;
* ``DROP``, ``TRUNCATE``, ``GRANT``/``REVOKE``, ``DELETE``/``UPDATE`` without
  ``WHERE`` and ``ALTER ... DROP/RENAME`` are ``destructive``; every other
  statement (DDL, DML, ``COPY``, ``CALL``, ``DO``, ``SET``, transaction
  control, ...) is ``write``.

Text the parser rejects raises :class:`SQLClassificationError` with the
parser's message.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable

__all__ = [
    "Classification",
    "StatementInfo",
    "classify_sql",
    "SQLClassificationError",
    "SIDE_EFFECT_FUNCTIONS",
    "SIDE_EFFECT_PREFIXES",
    "parser_dialect",
    "sqlglot_dialect",
]

_SEVERITY = {"read": 0, "write": 1, "destructive": 2}

SIDE_EFFECT_FUNCTIONS: dict[str, str] = {
    **{f: "signals another backend" for f in (
        "pg_terminate_backend", "pg_cancel_backend", "pg_signal_backend", "pg_reload_conf", "pg_rotate_logfile",
        "pg_log_backend_memory_contexts", "pg_promote", "pg_wal_replay_pause", "pg_wal_replay_resume")},
    **{f: "sends a notification" for f in ("pg_notify",)},
    **{f: "changes configuration" for f in ("set_config",)},
    **{f: "changes a sequence" for f in ("nextval", "setval")},
    **{f: "uses large objects" for f in (
        "loread", "lowrite", "lo_open", "lo_close", "lo_creat", "lo_create", "lo_import", "lo_export",
        "lo_unlink", "lo_put", "lo_from_bytea", "lo_truncate", "lo_truncate64", "lo_lseek", "lo_lseek64")},
    **{f: "reads or writes server files" for f in (
        "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_file_write", "pg_file_rename",
        "pg_file_unlink", "pg_file_sync", "pg_logdir_ls")},
    **{f: "runs SQL from a string" for f in (
        "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml", "cursor_to_xmlschema",
        "ts_stat", "database_to_xml", "database_to_xmlschema", "database_to_xml_and_xmlschema",
        "schema_to_xml", "schema_to_xmlschema", "schema_to_xml_and_xmlschema", "table_to_xml",
        "table_to_xmlschema", "table_to_xml_and_xmlschema")},
    **{f: "writes to the server" for f in (
        "pg_switch_wal", "pg_create_restore_point", "pg_logical_emit_message", "pg_import_system_collations",
        "pg_backup_start", "pg_backup_stop", "pg_start_backup", "pg_stop_backup", "txid_current",
        "pg_current_xact_id", "pg_drop_replication_slot", "pg_copy_physical_replication_slot",
        "pg_copy_logical_replication_slot", "pg_create_physical_replication_slot",
        "pg_create_logical_replication_slot", "pg_logical_slot_get_changes", "pg_logical_slot_get_binary_changes",
        "pg_replication_slot_advance")},
    **{f: "loads code or writes files" for f in ("load_extension", "writefile", "edit")},
    **{f: "calls a Java method by reflection (Spark, Hive)" for f in ("reflect", "java_method", "try_reflect")},
}
"""Functions whose call changes server or session state, by lower-case name, with the reason."""
SIDE_EFFECT_PREFIXES: dict[str, str] = {
    "pg_advisory_": "takes an advisory lock",
    "pg_try_advisory_": "takes an advisory lock",
    "dblink": "runs SQL on another connection (dblink)",
    "pg_stat_reset": "resets statistics",
    "pg_replication_origin_": "changes replication state",
    "pg_ls_": "lists server files",
    "lo_": "uses large objects",
}
"""Function name prefixes with side effects (families such as ``pg_advisory_lock_shared``)."""


class SQLClassificationError(ValueError):
    """The engine's parser rejects the text, or it holds no statement."""


@dataclass(frozen=True)
class StatementInfo:
    keyword: str
    """What the parser calls the statement, upper case (``SELECT``, ``DELETE``, ``TRANSACTION``, ...)."""
    kind: str
    """``read``, ``write`` or ``destructive``."""
    reason: str
    """Why, in a few words (``DELETE inside WITH``, ``calls pg_notify: sends a notification``)."""


@dataclass(frozen=True)
class Classification:
    kind: str
    """Most severe class over all statements (at least ``write`` for more than one)."""
    statements: tuple[StatementInfo, ...]
    dialect: str = "postgresql"
    """The parser's dialect."""

    @property
    def is_read(self) -> bool:
        return self.kind == "read"

    @property
    def summary(self) -> str:
        parts = [f"{s.keyword} ({s.kind}: {s.reason})" for s in self.statements]
        many = f"{len(self.statements)} statements, " if len(self.statements) > 1 else ""
        return f"{self.kind}: {many}" + "; ".join(parts)


def side_effect(name: str) -> str | None:
    """The reason a call to function ``name`` (any case, schema-qualified or not) is a write, or None."""
    base = name.rsplit(".", 1)[-1].lower()
    if base in SIDE_EFFECT_FUNCTIONS:
        return SIDE_EFFECT_FUNCTIONS[base]
    for prefix, reason in SIDE_EFFECT_PREFIXES.items():
        if base.startswith(prefix):
            return reason
    return None


_SQLGLOT_DIALECTS = {"postgresql": "postgres", "mssql": "tsql", "mariadb": "mysql", "sqlite": "sqlite",
                     "mysql": "mysql", "oracle": "oracle", "snowflake": "snowflake", "bigquery": "bigquery",
                     "redshift": "redshift", "trino": "trino", "presto": "presto", "spark": "spark",
                     "databricks": "databricks", "hive": "hive", "clickhouse": "clickhouse", "duckdb": "duckdb"}
"""SQLAlchemy dialect name -> sqlglot dialect."""


def sqlglot_dialect(dialect: str | None) -> str | None:
    """The sqlglot dialect for a SQLAlchemy dialect name (``postgresql`` -> ``postgres``); None: sqlglot's default."""
    return _SQLGLOT_DIALECTS.get((dialect or "").lower())


def parser_dialect(dialect: str | None) -> str:
    """Which parser classifies SQL for a SQLAlchemy dialect name: ``postgresql``, ``duckdb`` or ``sqlglot:<d>``."""
    name = (dialect or "postgresql").lower()
    if name in ("postgresql", "postgres"):
        return "postgresql"
    if name == "duckdb":
        return "duckdb"
    return f"sqlglot:{_SQLGLOT_DIALECTS.get(name, '')}"


def classify_sql(sql: str, dialect: str | None = "postgresql") -> Classification:
    """Classify every statement of ``sql`` with the parser for ``dialect`` (a SQLAlchemy dialect name)."""
    if not isinstance(sql, str):
        raise SQLClassificationError(f"SQL must be a string, got {type(sql).__name__}")
    parser = parser_dialect(dialect)
    if parser == "postgresql":
        infos = _classify_postgres(sql)
    elif parser == "duckdb":
        infos = _classify_duckdb(sql)
    else:
        infos = _classify_sqlglot(sql, parser.partition(":")[2] or None)
    if not infos:
        raise SQLClassificationError("the SQL text holds no statement")
    kind = max((s.kind for s in infos), key=_SEVERITY.__getitem__)
    if len(infos) > 1 and kind == "read":
        kind = "write"
    return Classification(kind=kind, statements=tuple(infos), dialect=parser)


def _worst(infos: Iterable[StatementInfo]) -> StatementInfo | None:
    infos = list(infos)
    return max(infos, key=lambda s: _SEVERITY[s.kind]) if infos else None


# --------------------------------------------------------------------------- PostgreSQL (pglast)

_PG_DESTRUCTIVE = {"DropStmt": "DROP removes objects", "TruncateStmt": "TRUNCATE removes every row",
                   "GrantRoleStmt": "changes role membership", "DropRoleStmt": "DROP ROLE",
                   "DropdbStmt": "DROP DATABASE", "DropOwnedStmt": "DROP OWNED", "ReassignOwnedStmt": "REASSIGN OWNED",
                   "DropTableSpaceStmt": "DROP TABLESPACE", "DropSubscriptionStmt": "DROP SUBSCRIPTION"}
_PG_NAMES = {"SelectStmt": "SELECT", "InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE",
             "MergeStmt": "MERGE", "ExplainStmt": "EXPLAIN", "VariableShowStmt": "SHOW", "VariableSetStmt": "SET",
             "TransactionStmt": "TRANSACTION", "CopyStmt": "COPY", "DoStmt": "DO", "CallStmt": "CALL",
             "CreateTableAsStmt": "CREATE TABLE AS", "DiscardStmt": "DISCARD", "LockStmt": "LOCK",
             "NotifyStmt": "NOTIFY", "ListenStmt": "LISTEN", "PrepareStmt": "PREPARE", "ExecuteStmt": "EXECUTE",
             "DeclareCursorStmt": "DECLARE", "GrantStmt": "GRANT"}


def _classify_postgres(sql: str) -> list[StatementInfo]:
    import json

    from pglast.parser import ParseError, parse_sql_json

    try:
        tree = json.loads(parse_sql_json(sql))  # the parser's JSON: ~10x faster than its Python AST
    except ParseError as exc:
        raise SQLClassificationError(f"PostgreSQL's parser rejects it: {exc}") from None
    except RecursionError:
        raise SQLClassificationError("the statement is nested too deeply to classify") from None
    infos = []
    for raw in tree.get("stmts", []):
        node = _pg_node(raw.get("stmt"))
        if node is not None:
            infos.append(_pg_statement(*node))
    return infos


def _pg_node(value: Any) -> "tuple[str, dict[str, Any]] | None":
    """``(node type, fields)`` for a JSON node such as ``{"SelectStmt": {...}}``."""
    if isinstance(value, dict) and len(value) == 1:
        (name, fields), = value.items()
        if name[:1].isupper() and isinstance(fields, dict):
            return name, fields
    return None


def _pg_walk(value: Any) -> Iterable["tuple[str, dict[str, Any]]"]:
    """Every typed node under a JSON value (itself included)."""
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, list):
            stack.extend(current)
        elif isinstance(current, dict):
            node = _pg_node(current)
            if node is not None:
                yield node
                stack.append(node[1])
            else:
                stack.extend(v for v in current.values() if isinstance(v, (dict, list)))


def _pg_keyword(name: str) -> str:
    return _PG_NAMES.get(name, name.removesuffix("Stmt").upper())


_PG_DML = ("InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt")


def _pg_statement(name: str, fields: dict[str, Any]) -> StatementInfo:
    """The class of one statement: its own, or the worst of what its whole tree holds (a data-modifying CTE,
    ``SELECT ... INTO``, row locks, a side-effect function), at any depth."""
    if name == "ExplainStmt":
        options = {str(o.get("DefElem", {}).get("defname", "")).lower() for o in fields.get("options") or ()}
        if not options & {"analyze", "analyse"}:
            return StatementInfo("EXPLAIN", "read", "plan only")
        inner_node = _pg_node(fields.get("query"))
        inner = _pg_statement(*inner_node) if inner_node else StatementInfo("?", "write", "unknown")
        if inner.kind == "read":
            return StatementInfo("EXPLAIN", "read", "EXPLAIN ANALYZE of a query")
        return StatementInfo("EXPLAIN", inner.kind, f"EXPLAIN ANALYZE runs {inner.keyword} ({inner.reason})")
    own = _pg_own(name, fields)
    if name == "VariableShowStmt":
        return own
    found = own
    for sub_name, sub in _pg_walk({name: fields}):
        finding = _pg_nested(sub_name, sub)
        if finding is not None and _SEVERITY[finding.kind] > _SEVERITY[found.kind]:
            found = finding
    return _nested_info(own, found)


def _nested_info(own: StatementInfo, found: StatementInfo) -> StatementInfo:
    """``own`` when nothing inside the statement is worse, else ``found`` named as being inside it
    (a finding with an empty keyword is not a statement: a function call, ``INTO``, row locks)."""
    if found is own:
        return own
    if not found.keyword:
        return StatementInfo(own.keyword, found.kind, found.reason)
    return StatementInfo(own.keyword, found.kind, f"{found.keyword} inside the {own.keyword} ({found.reason})")


def _pg_nested(name: str, fields: dict[str, Any]) -> StatementInfo | None:
    """What one node found anywhere in a statement's tree makes of it (None: nothing)."""
    if name in _PG_DML:
        return _pg_own(name, fields)
    if name == "SelectStmt":
        if fields.get("intoClause") is not None:
            return StatementInfo("", "write", "SELECT ... INTO creates a table")
        if fields.get("lockingClause"):
            return StatementInfo("", "write", "row locks (FOR UPDATE/SHARE)")
    if name == "FuncCall":
        call = ".".join(str(part.get("String", {}).get("sval", "")) for part in fields.get("funcname", []))
        reason = side_effect(call)
        if reason:
            return StatementInfo("", "write", f"calls {call}: {reason}")
    return None


def _pg_own(name: str, fields: dict[str, Any]) -> StatementInfo:
    """The class of a statement node by itself, not looking inside it."""
    keyword = _pg_keyword(name)
    if name == "VariableShowStmt":
        return StatementInfo("SHOW", "read", "shows a setting")
    if name == "SelectStmt":
        return StatementInfo("SELECT", "read", "query")
    if name in _PG_DESTRUCTIVE:
        return StatementInfo(keyword, "destructive", _PG_DESTRUCTIVE[name])
    if name == "GrantStmt":
        return StatementInfo("GRANT" if fields.get("is_grant") else "REVOKE", "destructive", "changes privileges")
    if name in ("DeleteStmt", "UpdateStmt"):
        if fields.get("whereClause") is None:
            return StatementInfo(keyword, "destructive", f"{keyword} without WHERE touches every row")
        return StatementInfo(keyword, "write", "changes rows")
    if name in ("InsertStmt", "MergeStmt"):
        return StatementInfo(keyword, "write", "changes rows")
    if name == "AlterTableStmt":
        subtypes = {c.get("AlterTableCmd", {}).get("subtype") for c in fields.get("cmds") or ()}
        if subtypes & {"AT_DropColumn", "AT_DropConstraint"}:
            return StatementInfo("ALTER", "destructive", "ALTER ... DROP")
    if name == "RenameStmt":
        return StatementInfo("ALTER", "destructive", "ALTER ... RENAME")
    return StatementInfo(keyword, "write", "not a plain query: changes the database or session")


# --------------------------------------------------------------------------- DuckDB

_DUCKDB_READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE",
                                "BOUND_SUBQUERY_NODE"})
"""Query node types of DuckDB's parse tree that only read; any other ``*_NODE`` (``DELETE_QUERY_NODE``,
``INSERT_QUERY_NODE``, ``UPDATE_QUERY_NODE``, ``MERGE_QUERY_NODE``, ``COPY_QUERY_NODE``, ``STATEMENT_NODE``,
``EXECUTE_QUERY_NODE``, one a later DuckDB adds) is a write."""
_DUCKDB_DML = {"DELETE": "DELETE_QUERY_NODE", "UPDATE": "UPDATE_QUERY_NODE", "INSERT": "INSERT_QUERY_NODE"}
"""Statement types whose own tree is read as the body of a CTE (DuckDB serialises only SELECT statements)."""
_DUCKDB_DML_CTE = "__harness_classified"
SQL_FROM_STRING_DEPTH = 3
"""How deep ``query('...')`` inside ``query('...')`` is followed before it counts as a write (no read needs it)."""

_duckdb_parser_lock = threading.Lock()
"""One classification at a time uses the private parsing connection (a DuckDB connection is not thread-safe)."""
_duckdb_parser: Any = None


def _duckdb_parse_tree(sql: str) -> dict[str, Any]:
    """DuckDB's own parse tree of ``sql`` (``json_serialize_sql``), from a private in-memory connection with no
    file access: the text is parsed only, never bound or run. Raises SQLClassificationError."""
    import json

    import duckdb

    global _duckdb_parser
    with _duckdb_parser_lock:
        if _duckdb_parser is None:
            _duckdb_parser = duckdb.connect(":memory:", config={
                "enable_external_access": False, "autoinstall_known_extensions": False,
                "autoload_known_extensions": False, "lock_configuration": True})
        try:
            text = _duckdb_parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
        except duckdb.Error as exc:
            raise SQLClassificationError(f"DuckDB cannot show its parse tree: "
                                         f"{str(exc).strip().splitlines()[0]}") from None
    try:
        tree = json.loads(text)
    except RecursionError:
        raise SQLClassificationError("the statement is nested too deeply to classify") from None
    if not isinstance(tree, dict) or tree.get("error"):
        message = tree.get("error_message", "unknown error") if isinstance(tree, dict) else "no tree"
        raise SQLClassificationError(f"DuckDB cannot show its parse tree: {message}")
    return tree


def _classify_duckdb(sql: str, depth: int = 0) -> list[StatementInfo]:
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise SQLClassificationError(f"DuckDB's parser rejects it: {str(exc).strip().splitlines()[0]}") from None
    except RecursionError:
        raise SQLClassificationError("the statement is nested too deeply to classify") from None
    return [_duckdb_statement(s, depth) for s in statements]


def _duckdb_statement(statement: Any, depth: int = 0) -> StatementInfo:
    import duckdb

    kind = statement.type
    keyword = kind.name
    if kind == duckdb.StatementType.SELECT:
        own = StatementInfo("SELECT", "read", "query")
        try:
            tree = _duckdb_parse_tree(statement.query)
        except SQLClassificationError as exc:  # fail closed: a query we cannot see into is not a read
            return StatementInfo("SELECT", "write", f"cannot be checked for writes inside: {exc}")
        return _nested_info(own, _duckdb_worst(tree, own, depth))
    if kind == duckdb.StatementType.EXPLAIN:
        tokens = duckdb.tokenize(statement.query)
        words = [statement.query[start:end].strip().upper() for (start, _), (end, _) in
                 zip(tokens, tokens[1:] + [(len(statement.query), None)])]
        if len(words) > 1 and words[1] in ("ANALYZE", "ANALYSE", "("):
            return StatementInfo("EXPLAIN", "write", "EXPLAIN ANALYZE runs the statement")
        return StatementInfo("EXPLAIN", "read", "plan only")
    if kind in (duckdb.StatementType.DROP, duckdb.StatementType.DETACH):
        return StatementInfo(keyword, "destructive", f"{keyword} removes objects")
    if keyword in _DUCKDB_DML:
        return _duckdb_dml(statement, keyword, depth)
    return StatementInfo(keyword, "write", "not a plain query: changes the database, files or session")


def _duckdb_dml(statement: Any, keyword: str, depth: int) -> StatementInfo:
    """INSERT/UPDATE/DELETE: ``write``, or ``destructive`` when its tree (read as the body of a CTE, the one
    place DuckDB serialises it) is an UPDATE/DELETE without WHERE or holds one. The wrapped text only ever
    raises the class: if it does not parse back to exactly that statement, the class stays ``write``."""
    own = StatementInfo(keyword, "write", "changes rows")
    try:
        tree = _duckdb_parse_tree(f"WITH {_DUCKDB_DML_CTE} AS (\n{statement.query}\n) SELECT 1")
    except SQLClassificationError:
        return own
    statements = tree.get("statements") or []
    ctes = ((statements[0].get("node") or {}).get("cte_map") or {}).get("map") if len(statements) == 1 else None
    if not ctes or len(ctes) != 1 or ctes[0].get("key") != _DUCKDB_DML_CTE:
        return own
    body = (ctes[0].get("value") or {}).get("query_node") or {}
    if body.get("type") != _DUCKDB_DML[keyword]:
        return own
    own = _duckdb_own(body) or own
    return _nested_info(own, _duckdb_worst(body, own, depth))


def _duckdb_own(node: dict[str, Any]) -> StatementInfo | None:
    """The class of one query node of DuckDB's tree by itself (None: a read-only node)."""
    node_type = node["type"]
    if node_type in _DUCKDB_READ_NODES:
        return None
    keyword = node_type.removesuffix("_NODE").removesuffix("_QUERY").replace("_", " ")
    if node_type == "DELETE_QUERY_NODE" and node.get("condition") is None:
        return StatementInfo(keyword, "destructive", "DELETE without WHERE touches every row")
    if node_type == "UPDATE_QUERY_NODE" and (node.get("set_info") or {}).get("condition") is None:
        return StatementInfo(keyword, "destructive", "UPDATE without WHERE touches every row")
    if node_type in ("DELETE_QUERY_NODE", "UPDATE_QUERY_NODE", "INSERT_QUERY_NODE", "MERGE_QUERY_NODE"):
        return StatementInfo(keyword, "write", "changes rows")
    if node_type == "COPY_QUERY_NODE":
        return StatementInfo(keyword, "write", "writes a file")
    return StatementInfo(keyword, "write", "not a plain query")


def _duckdb_worst(tree: Any, own: StatementInfo, depth: int) -> StatementInfo:
    """The worst of ``own`` and every finding in DuckDB's JSON tree: data-modifying query nodes (in CTEs,
    subqueries, set operations, at any depth), side-effect functions, and the SQL text ``query('...')`` runs."""
    found = own
    stack = [tree]
    while stack:
        current = stack.pop()
        if isinstance(current, list):
            stack.extend(current)
            continue
        if not isinstance(current, dict):
            continue
        finding = None
        node_type = current.get("type")
        if "class" not in current and isinstance(node_type, str) and node_type.endswith("_NODE"):
            finding = _duckdb_own(current)
        elif current.get("class") == "FUNCTION" and isinstance(current.get("function_name"), str):
            finding = _duckdb_call(current, depth)
        if finding is not None and _SEVERITY[finding.kind] > _SEVERITY[found.kind]:
            found = finding
        stack.extend(v for v in current.values() if isinstance(v, (dict, list)))
    return found


def _duckdb_call(node: dict[str, Any], depth: int) -> StatementInfo | None:
    """A function call of DuckDB's tree: a side-effect function is a write; ``query('<sql>')`` takes the class
    of the SQL it runs (a text not written in the call is a write: it cannot be checked)."""
    name = node["function_name"]
    schema = node.get("schema") or ""
    qualified = f"{schema}.{name}" if schema else name
    reason = side_effect(qualified)
    if reason:
        return StatementInfo("", "write", f"calls {qualified}: {reason}")
    if name.lower() != "query" or schema.lower() not in ("", "main", "system"):
        return None
    arguments = [a.get("expression") if isinstance(a, dict) and "expression" in a else a
                 for a in node.get("arguments") or node.get("children") or []]
    literal = (arguments[0] or {}).get("literal") if len(arguments) == 1 and isinstance(arguments[0], dict) else None
    if not isinstance(literal, dict) or literal.get("kind") != "STRING" or not isinstance(literal.get("text"), str):
        return StatementInfo("", "write", "query() runs SQL text that is not written in the call")
    if depth >= SQL_FROM_STRING_DEPTH:
        return StatementInfo("", "write", f"query() nested more than {SQL_FROM_STRING_DEPTH} deep")
    try:
        inner = _classify_duckdb(literal["text"], depth + 1)
    except SQLClassificationError as exc:
        return StatementInfo("", "write", f"query() runs SQL that cannot be classified ({exc})")
    worst = _worst(inner)
    if worst is None or (worst.kind == "read" and len(inner) == 1):
        return None
    return StatementInfo("", "write" if worst.kind == "read" else worst.kind,
                         f"query() runs {worst.keyword} ({worst.reason})")


# --------------------------------------------------------------------------- other dialects (sqlglot)


def _classify_sqlglot(sql: str, dialect: str | None) -> list[StatementInfo]:
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
        return [_sqlglot_statement(t, exp) for t in trees]
    except (ParseError, TokenError) as exc:
        raise SQLClassificationError(f"the {dialect or 'generic'} SQL parser rejects it: "
                                     f"{str(exc).strip().splitlines()[0]}") from None
    except RecursionError:
        raise SQLClassificationError("the statement is nested too deeply to classify") from None


def _sqlglot_writes(exp: Any) -> tuple[type, ...]:
    return (exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter, exp.Command,
            exp.Copy, exp.TruncateTable, exp.Set, exp.Transaction, exp.Commit, exp.Rollback, exp.Grant)


def _sqlglot_own(tree: Any, exp: Any) -> StatementInfo:
    """The class of one sqlglot statement node by itself, not looking inside it."""
    keyword = tree.key.upper()
    if isinstance(tree, (exp.Drop, exp.TruncateTable, exp.Grant)):
        return StatementInfo(keyword, "destructive", f"{keyword} removes data or changes privileges")
    if isinstance(tree, (exp.Delete, exp.Update)):
        if tree.args.get("where") is None:
            return StatementInfo(keyword, "destructive", f"{keyword} without WHERE touches every row")
        return StatementInfo(keyword, "write", "changes rows")
    if isinstance(tree, (exp.Insert, exp.Merge)):
        return StatementInfo(keyword, "write", "changes rows")
    if isinstance(tree, (exp.Query, exp.Show, exp.Describe)):
        return StatementInfo(keyword, "read", "query")
    return StatementInfo(keyword, "write", "not a plain query: changes the database or session")


def _sqlglot_statement(tree: Any, exp: Any) -> StatementInfo:
    """The class of one statement: its own, or the worst its whole tree holds, at any depth."""
    own = _sqlglot_own(tree, exp)
    writes = _sqlglot_writes(exp)
    found = own
    for sub in tree.walk():
        finding = None
        if sub is not tree and isinstance(sub, writes):
            finding = _sqlglot_own(sub, exp)
            if finding.kind == "read":  # a node listed as a write whatever sqlglot makes of it
                finding = StatementInfo(finding.keyword, "write", "not a plain query")
        elif isinstance(sub, exp.Select) and (sub.args.get("into") is not None or sub.args.get("locks")):
            finding = StatementInfo("", "write", "SELECT ... INTO or row locks")
        elif isinstance(sub, exp.Func):
            name = sub.name if isinstance(sub, exp.Anonymous) else sub.sql_name()
            reason = side_effect(str(name))
            if reason:
                finding = StatementInfo("", "write", f"calls {str(name).lower()}: {reason}")
        if finding is not None and _SEVERITY[finding.kind] > _SEVERITY[found.kind]:
            found = finding
    return _nested_info(own, found)


def require_one_read(sql: Any, dialect: str, query_tool: str, advice: str) -> Classification:
    """The check an engine's read tool makes before anything is sent: ``sql`` is one read-only statement.

    Raises ToolError naming what was found and ``advice`` (what to use instead).
    This decides what the model is told; the engine's own read-only setup is what stops harm.
    """
    from harness_magic.core.execution.tools import ToolError

    if not isinstance(sql, str) or not sql.strip():
        raise ToolError("sql must be a non-empty string holding one SQL query")
    try:
        classification = classify_sql(sql, dialect)
    except SQLClassificationError as exc:
        raise ToolError(f"Cannot run this SQL: {exc}.") from None
    if len(classification.statements) > 1:
        raise ToolError(f"Refused: {len(classification.statements)} statements; send one query per call "
                        f"({classification.summary}).")
    if not classification.is_read:
        raise ToolError(f"Refused: the statement is classified {classification.summary}; "
                        f"{query_tool} runs read-only queries only ({advice}).")
    return classification
