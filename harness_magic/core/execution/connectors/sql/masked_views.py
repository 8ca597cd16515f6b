"""PostgreSQL: may the read role read a sensitive column directly? And the masked views a DBA would give it.

Where data stays in PostgreSQL, the engine can serve pseudonyms only if the
role the connector reads with can read *masked views* and not the base tables
(issue 31). The product cannot make that so; it checks and says what to do:

* :func:`sensitive_column_access` lists every column of a base table (or a
  partitioned one) in a user schema that the read role may ``SELECT``
  (PostgreSQL's ``has_column_privilege``, which counts table-level grants,
  column grants and ``PUBLIC``) and that the connector's ``sensitivity``
  option (or a glossary) classes ``pii`` or ``restricted``. A key
  ``table.column`` or ``schema.table.column`` names one column, a bare
  ``column`` every column of that name.
* :func:`masked_view_warnings` turns those into one line each, naming the
  column, for the connector's first query result (the run goes on: what comes
  back is still pseudonymised at entry, but the model's SQL ran over real
  values, so ``substr(email, 1, 1) = 'a'`` can probe them).
* :func:`masked_view_ddl` prints the DDL for a DBA: per table, ``CREATE VIEW
  <masked schema>.<table>`` selecting every column, a ``pii`` one as a keyed
  hash (``md5`` of a secret salt and the value: stable, so joins and counts
  stay right), a ``restricted`` one as NULL; then ``GRANT USAGE``/``GRANT
  SELECT`` on the views to the role and ``REVOKE SELECT`` on the base tables
  from it. The salt is drawn here, once, and appears only in that DDL.

PostgreSQL only (ValueError naming the dialect otherwise).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["ColumnAccess", "sensitive_column_access", "masked_view_warnings", "masked_view_ddl",
           "MASKED_SCHEMA", "MASKED_CLASSES", "SALT_BYTES"]

MASKED_CLASSES = ("pii", "restricted")
"""Classes a read role should never read directly (financial numbers stay real by design: sums must be exact)."""
MASKED_SCHEMA = "masked"
"""The schema the suggested views go into."""
SALT_BYTES = 16
"""Random bytes of the secret salt the suggested views hash ``pii`` values with."""

_READABLE_COLUMNS = """
SELECT n.nspname AS schema, c.relname AS "table", a.attname AS "column", current_user AS role
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%'
  AND has_column_privilege(c.oid, a.attnum, 'SELECT')
ORDER BY 1, 2, a.attnum
"""
_TABLE_COLUMNS = """
SELECT a.attname FROM pg_attribute a
WHERE a.attrelid = CAST(:qualified AS regclass) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""


@dataclass(frozen=True)
class ColumnAccess:
    """A sensitive column of a base table the read role may read directly."""

    role: str
    schema: str
    table: str
    column: str
    cls: str

    def __str__(self) -> str:
        return (f"the read role {self.role!r} can read {self.cls} column {self.schema}.{self.table}.{self.column} "
                f"directly")


def _class_of(classes: Mapping[str, str], schema: str, table: str, column: str) -> str | None:
    for key in (f"{schema}.{table}.{column}", f"{table}.{column}", column):
        for name, cls in classes.items():
            if name.lower() == key.lower() and cls in MASKED_CLASSES:
                return cls
    return None


def _require_postgres(connection: Any) -> None:
    if connection.dialect != "postgresql":
        raise ValueError(f"masked views are checked on PostgreSQL only; this connection is {connection.dialect!r}")


def sensitive_column_access(connection: Any, classes: Mapping[str, str]) -> list[ColumnAccess]:
    """Sensitive columns of base tables the read role of ``connection`` (a :class:`~.connector.SQLConnection`) may
    ``SELECT`` directly, per ``classes`` (``{"[schema.]table.column" or "column": class}``)."""
    _require_postgres(connection)
    wanted = {k: v for k, v in classes.items() if v in MASKED_CLASSES}
    if not wanted:
        return []
    import sqlalchemy as sa

    with connection.read_engine.connect() as conn:
        rows = conn.execute(sa.text(_READABLE_COLUMNS)).mappings().all()
    out = []
    for row in rows:
        cls = _class_of(wanted, row["schema"], row["table"], row["column"])
        if cls is not None:
            out.append(ColumnAccess(row["role"], row["schema"], row["table"], row["column"], cls))
    return out


def masked_view_warnings(connection: Any, classes: Mapping[str, str]) -> list[str]:
    """One line per column :func:`sensitive_column_access` finds, saying what to do (empty: nothing found)."""
    return [f"{found}: the model's SQL runs over its real values (what comes back is still pseudonymised); "
            f"give the role masked views instead (masked_view_ddl prints the DDL for a DBA)"
            for found in sensitive_column_access(connection, classes)]


def masked_view_ddl(connection: Any, classes: Mapping[str, str], role: str | None = None, *,
                    schema: str = MASKED_SCHEMA, salt: str | None = None) -> str:
    """The DDL a DBA runs so that ``role`` (the read role by default) reads masked views only (see module doc).

    Covers every base table holding a column :func:`sensitive_column_access` finds for the read role."""
    found = sensitive_column_access(connection, classes)
    if not found:
        return "-- nothing to do: the read role reads no pii or restricted column of a base table directly\n"
    import sqlalchemy as sa

    role = role or found[0].role
    salt = salt if salt is not None else secrets.token_hex(SALT_BYTES)
    tables: dict[tuple[str, str], dict[str, str]] = {}
    for access in found:
        tables.setdefault((access.schema, access.table), {})[access.column] = access.cls
    lines = [f"-- masked views for role {role}: pii hashed with a secret salt (keep this file private), "
             f"restricted as NULL", f"CREATE SCHEMA IF NOT EXISTS {_ident(schema)};"]
    grants = [f"GRANT USAGE ON SCHEMA {_ident(schema)} TO {_ident(role)};"]
    with connection.read_engine.connect() as conn:
        for (source_schema, table), masked in sorted(tables.items()):
            qualified = f"{_ident(source_schema)}.{_ident(table)}"
            columns = [r[0] for r in conn.execute(sa.text(_TABLE_COLUMNS), {"qualified": qualified})]
            select = ", ".join(_masked(column, masked.get(column), salt) for column in columns)
            view = f"{_ident(schema)}.{_ident(table)}"
            lines.append(f"CREATE OR REPLACE VIEW {view} AS SELECT {select} FROM {qualified};")
            grants += [f"GRANT SELECT ON {view} TO {_ident(role)};",
                       f"REVOKE SELECT ON {qualified} FROM {_ident(role)};"]
    return "\n".join(lines + grants) + "\n"


def _masked(column: str, cls: str | None, salt: str) -> str:
    name = _ident(column)
    if cls is None:
        return name
    if cls == "restricted":
        return f"NULL::text AS {name}"
    return f"'pii:' || left(md5({_literal(salt)} || {name}::text), 16) AS {name}"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
