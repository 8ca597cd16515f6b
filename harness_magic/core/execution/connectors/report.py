"""What each connector lets the model do: tools, safety classes, and the SQL role's reach.

:func:`connectors_report` is the data behind ``%agent_connectors``; each entry
names the connector, its tools with their safety class (``read`` runs
freely, anything else passes the approval policy), and for SQL connectors
the read role's privileges that matter past a read-only transaction, with
plain warnings (superuser, signalling backends, server files, dblink,
foreign servers). :func:`format_report` renders it as text.
"""

from __future__ import annotations

from typing import Any

__all__ = ["connectors_report", "format_report"]

_PRIVILEGE_LABELS = {
    "superuser": "superuser",
    "signal_backends": "can signal other backends (pg_signal_backend)",
    "read_server_files": "can read server files (pg_read_server_files)",
    "write_server_files": "can write server files (pg_write_server_files)",
    "execute_server_program": "can run server programs (pg_execute_server_program)",
    "dblink": "can use dblink",
    "create_role": "can create roles",
    "bypass_rls": "bypasses row-level security",
}


def connectors_report(registry: Any) -> list[dict[str, Any]]:
    """One dict per connector of ``registry`` (a ConnectorRegistry): ``name``, ``description``, ``tools``, ``sql``.

    ``tools`` is a list of ``{"name", "safety", "classified"}`` (``classified``: the class is decided per
    call by the engine's parser). ``sql`` (SQL connectors) holds ``dialect``, ``privileges`` and
    ``warnings``; a privilege check that fails is reported in ``warnings``, never raised.
    """
    out = []
    for name in registry.names:
        connector = registry[name]
        tools = [{"name": spec.name, "safety": spec.safety, "classified": connector.classifier(spec.name) is not None}
                 for spec in connector.tools]
        entry: dict[str, Any] = {"name": name, "description": connector.description, "tools": tools}
        connection = getattr(connector, "connection", None)
        if connection is not None and hasattr(connection, "privileges"):
            try:
                privileges = connection.privileges()
                warnings = connection.warnings(privileges) if privileges else []
            # broad: the database may be down or refuse the catalogue query (driver errors have no common base); reported
            except Exception as exc:
                privileges, warnings = {}, [f"privileges could not be checked: {type(exc).__name__}: {exc}"]
            entry["sql"] = {"dialect": connection.dialect, "privileges": privileges, "warnings": warnings}
        out.append(entry)
    return out


def format_report(report: list[dict[str, Any]]) -> str:
    """Plain text for :func:`connectors_report`'s entries."""
    if not report:
        return "No connectors registered."
    lines: list[str] = []
    for entry in report:
        lines.append(f"{entry['name']}: {entry['description'].split(' WARNING: ')[0]}")
        for tool in entry["tools"]:
            note = "runs freely" if tool["safety"] == "read" else "needs approval"
            if tool["classified"]:
                note += "; each call classified by the engine's parser (destructive statements say so)"
            lines.append(f"  - {tool['name']}: {tool['safety']} ({note})")
        sql = entry.get("sql")
        if sql is not None:
            privileges = sql["privileges"]
            if privileges:
                held = [label for key, label in _PRIVILEGE_LABELS.items() if privileges.get(key)]
                servers = privileges.get("foreign_servers") or []
                if servers:
                    held.append(f"can use foreign servers {', '.join(servers)}")
                lines.append(f"  read role {privileges.get('role')!r}: {', '.join(held) or 'no privileges beyond its grants'}")
            for warning in sql["warnings"]:
                lines.append(f"  WARNING: {warning}")
    return "\n".join(lines)
