"""Spark's own plan decides what a Spark query may touch, checked before any job runs.

Classification (sqlglot) words what to ask; it cannot see what a name stands for
(a view that runs ``TRANSFORM ... USING``, a table-valued path). Spark's
``EXPLAIN EXTENDED`` text can: the parsed, analyzed (views expanded), optimized
and physical plans of a query, computed without running it. Contract:

* :func:`read_findings` lists what a *read* may not hold, anywhere in any of the
  four plans: a script transformation (``TRANSFORM``/``MAP``/``REDUCE ... USING``
  runs a program on the server), a command node (``...Command``, ``Insert...``,
  ``Create...``, ``Execute ...``), a reflection call (``reflect``/``java_method``/
  ``try_reflect``), a path-based file scan whose location is not exactly one of
  the configured file views' locations (or is listed only in part), and any scan
  of a source this check does not know. Catalog tables (a scan naming its
  table), cached handles (``LocalTableScan``), ``range`` and cached tables pass:
  the catalog's own authorization governs tables.
* :func:`script_findings` is the part that also holds for an approved
  ``execute``: an approval for a statement never covers running a program.
* Nodes are matched at tree positions (the start of a plan line, after the
  tree-drawing prefix), never as substrings, so a literal ``'ScriptTransformation'``
  in a harmless query passes. Spark prints string literals raw: a literal whose
  own text starts a new line with a node name (``'a\\n+- ScriptTransformation'``)
  or contains ``reflect(`` reads as such and is refused (fail closed; never
  the other way round: a real node always starts its own line).
* :data:`PINNED_CONF` is what every session runs with: SQL on raw files off
  (``text.`/path```` resolves to nothing) and plan metadata long enough that
  file locations are listed whole. The local server starts with it; each
  session sets it again (a remote cluster may refuse: then the plan check is
  what stops a raw-file read, after Spark's analysis has listed, and for
  CSV/JSON sampled, the file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

from harness_magic.core.execution.tools import ToolError

__all__ = ["Finding", "PINNED_CONF", "PLAN_METADATA_CHARS", "check_read", "check_statement", "explain_query",
           "explain_statement", "file_locations", "read_findings", "script_findings", "view_locations"]

PLAN_METADATA_CHARS = 100_000
"""``spark.sql.maxMetadataStringLength`` for our sessions (Spark's default 100 cuts file locations short,
which would make two different paths look alike); a location longer than this is refused as listed in part."""
PINNED_CONF: dict[str, str] = {
    "spark.sql.runSQLOnFiles": "false",
    "spark.sql.maxMetadataStringLength": str(PLAN_METADATA_CHARS),
}
"""Settings every Spark session of this connector runs with (server start and per session, again after each
``execute``); a connector ``conf`` may not change them."""
QUOTE_CHARS = 200
"""How much of a node's own text an error quotes (the command of a script, a scan's description)."""

_NODE = re.compile(r"^[ :|+\-]*(?:\*\(\d+\) )?[!']?(?P<name>[A-Za-z_][\w$]*)(?P<rest>.*)$")
"""A plan line: the tree-drawing prefix, whole-stage-codegen id, unresolved marker, then the node's name."""
_COMMAND = re.compile(
    r"(?:Command\$?|Statement|^Execute|^CommandResult|^WriteFiles"
    r"|^(?:Create|Replace|Drop|Alter|Insert|Overwrite|Append|Write|Cache|Uncache|Merge|Update|Delete|Truncate"
    r"|Refresh|Set|Reset|Add|Use|Analyze|Load|Repair)[A-Z]\w*)$")
"""Node names of commands (DDL, DML, cache, settings): none belongs in a query's plan."""
_REFLECTION = re.compile(r"(?<![\w.$])(reflect|java_method|try_reflect)\(", re.IGNORECASE)
_SAFE_SCANS = frozenset({"LocalTableScan", "InMemoryTableScan", "HiveTableScan"})
"""Scans of data already in Spark (uploaded handles, cached tables) or of a catalog table."""
_SAFE_GENERIC_SCANS = ("OneRowRelation", "ExistingRDD")
"""What a plain ``Scan <source>`` node may read: no source at all, or rows already in the session."""
_CATALOG_SCAN = re.compile(r"^ \S+ (?P<table>[^\s\[]+)\[")
"""``FileScan parquet spark_catalog.default.sales[...]``: a scan naming its table reads a catalog table."""
_LOCATION = re.compile(r"Location: (?P<index>\w+)\((?P<count>\d+) paths\)\[(?P<paths>.*)$")

Kind = Literal["script", "command", "reflection", "file", "source"]


@dataclass(frozen=True)
class Finding:
    """One thing in a plan that the check refuses."""

    kind: Kind
    """``script``: runs a program; ``command``: changes something; ``reflection``: calls a Java method;
    ``file``: reads files outside the configured views; ``source``: reads a source the check cannot place."""
    node: str
    """The plan node's name (``ScriptTransformation``, ``FileScan``, ...)."""
    detail: str
    """What the node names: the script's command, the file's path, the reflection call, the node's text."""


def _nodes(plan: str) -> Iterable[tuple[str, str]]:
    for line in plan.splitlines():
        if line.startswith("== "):
            continue
        match = _NODE.match(line)
        if match and not match.group("rest").startswith(":"):  # "name: type, ...": the analyzed plan's schema
            yield match.group("name"), match.group("rest")


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "..."


def script_findings(plan: str) -> list[Finding]:
    """Every script transformation in ``plan`` (any of its sections), with the command it runs."""
    found = []
    for name, rest in _nodes(plan):
        if "ScriptTransformation" in name:
            found.append(Finding("script", name, _short(rest.split(", [", 1)[0])))
    return _distinct(found)


def file_locations(plan: str) -> list[tuple[str, str]]:
    """(node, text after ``Location:`` to the line's end) of every path-based file scan in ``plan``; a scan
    naming its table (a catalog table) is not one."""
    found = []
    for name, rest in _nodes(plan):
        if name not in ("FileScan", "BatchScan"):
            continue
        at = rest.find("Location: ")
        if name == "FileScan" and _CATALOG_SCAN.match(rest):
            continue
        if name == "BatchScan" and at < 0:
            continue  # a catalog (V2) table: no file index
        found.append((name, rest[at + len("Location: "):] if at >= 0 else ""))
    return found


def view_locations(plan: str) -> list[str]:
    """The file locations a configured view's own plan (``SELECT * FROM view``) scans, each as
    ``Index(N paths)[path, ...]``; a location Spark listed only in part (``...``) is left out."""
    found = []
    for _, text in file_locations(plan):
        end = text.find("], ")
        location = text[:end + 1] if end >= 0 else text
        if _LOCATION.match("Location: " + location) and "..." not in location:
            found.append(location)
    return found


def _allowed(text: str, views: Mapping[str, str]) -> bool:
    """A query's scan location (to the end of its line) is exactly one view's location, then the next field."""
    return any(text == known or text.startswith(known + ", ") for known in views)


def _paths(text: str) -> list[str]:
    match = _LOCATION.match("Location: " + text)
    if match is None:
        return [f"(a location Spark printed only in part: {_short(text.split(', ', 1)[0])})"] if text else []
    listed = match.group("paths").split("], ", 1)[0].removesuffix("]")
    return [p.removeprefix("file:") for p in listed.split(", ")]


def read_findings(plan: str, views: Mapping[str, str]) -> list[Finding]:
    """What a read's ``plan`` may not hold (see module doc). ``views``: each configured view's location
    (:func:`view_locations` of its own plan) -> ``"name: path"`` for wording."""
    found = script_findings(plan)
    for name, rest in _nodes(plan):
        if _COMMAND.search(name):
            found.append(Finding("command", name, _short(rest)))
        elif "Scan" in name and name not in _SAFE_SCANS and name not in ("FileScan", "BatchScan"):
            if not (name == "Scan" and rest.strip().startswith(_SAFE_GENERIC_SCANS)):
                found.append(Finding("source", name, _short(rest)))
    for node, location in file_locations(plan):
        if not _allowed(location, views):
            paths = _paths(location) or ["(no location shown)"]
            found.append(Finding("file", node, ", ".join(paths)))
    for line in plan.splitlines():
        call = _REFLECTION.search(line)
        if call:
            found.append(Finding("reflection", call.group(1), _short(_call_text(line, call.start()))))
            break
    return _distinct(found)


def _call_text(line: str, start: int) -> str:
    """The call starting at ``start`` up to its closing parenthesis (or the line's end)."""
    depth = 0
    for at in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[at], 0)
        if depth == 0 and line[at] == ")":
            return line[start:at + 1]
    return line[start:]


def _distinct(found: list[Finding]) -> list[Finding]:
    """One finding per (kind, detail): the same node shows in up to four plans."""
    seen: dict[tuple[str, str], Finding] = {}
    for finding in found:
        seen.setdefault((finding.kind, finding.detail), finding)
    return list(seen.values())


def _views_text(views: Mapping[str, str]) -> str:
    described = sorted(set(views.values()))
    return f"the configured file views ({'; '.join(described)})" if described else \
        "a configured file view (none is configured)"


def _wording(finding: Finding, views: Mapping[str, str]) -> str:
    if finding.kind == "script":
        return (f"the plan runs an external script ({finding.node}: '{finding.detail}'); TRANSFORM/MAP/REDUCE "
                "... USING runs a program on the Spark server, which no tool may do")
    if finding.kind == "command":
        return f"the plan holds a command ({finding.node} {finding.detail}); a query only reads"
    if finding.kind == "reflection":
        return (f"the plan calls a Java method by reflection ({finding.detail}); if that text is only inside a "
                "string literal, build the string another way (e.g. concat)")
    if finding.kind == "file":
        return (f"the plan reads file '{finding.detail}', which is not one of {_views_text(views)}; read "
                "configured file views and catalog tables by name")
    return (f"the plan reads from a source this check cannot place ({finding.node} {finding.detail}); a query "
            f"reads catalog tables, {_views_text(views)} and cached handles")


def check_read(plan: str, views: Mapping[str, str], tool: str) -> None:
    """ToolError ``"<tool> refused: ..."`` naming the first thing :func:`read_findings` finds, if any."""
    found = read_findings(plan, views)
    if found:
        more = f" (and {len(found) - 1} more finding(s))" if len(found) > 1 else ""
        raise ToolError(f"{tool} refused: {_wording(found[0], views)}{more}.")


def check_statement(plan: str, tool: str) -> None:
    """ToolError ``"<tool> refused: ..."`` if a statement's ``plan`` runs a script (approval or not)."""
    found = script_findings(plan)
    if found:
        raise ToolError(f"{tool} refused: {_wording(found[0], {})}; an approval never covers running a "
                        "program on the server.")


def explain_query(df: Any) -> str:
    """The four plans of a Spark Connect DataFrame as text, from one analyze request (nothing runs)."""
    return df._explain_string(extended=True)


def explain_statement(spark: Any, sql: str) -> str:
    """The four plans of one statement as text (``EXPLAIN EXTENDED``: the statement itself does not run)."""
    return spark.sql("EXPLAIN EXTENDED " + sql).collect()[0][0]
