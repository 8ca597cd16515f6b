"""Connectors: groups of tools the model discovers progressively.

A :class:`Connector` is a named group of tools. Tools are plain functions; the
tool schema comes from their type hints and the docstring::

    warehouse = Connector("crm", "Customer records from the CRM API.")

    @warehouse.tool()
    def lookup(customer_id: int, fields: list[str] | None = None) -> pd.DataFrame:
        \"\"\"Fetch one customer.

        Args:
            customer_id: The CRM id.
            fields: Columns to return (all when omitted).
        \"\"\"

Supported parameter types: ``str``, ``int``, ``float``, ``bool``, ``list[T]``,
``dict``, ``Literal[...]`` and ``Optional`` of those; anything else is a
:class:`TypeError` at registration naming the function, parameter and type.
A parameter annotated :class:`ToolContext` is injected by the harness (cache,
harness) and is not part of the schema.

A :class:`ConnectorRegistry` holds connectors. :meth:`ConnectorRegistry.install`
adds to a harness, in a stable order: ``load_connectors`` (its description is
the one-line-per-connector catalogue), then every connector tool, hidden, named
``<connector>__<tool>``. ``load_connectors(connector_name=...)`` reveals that
connector's tools from the next provider call on, for the rest of the
conversation; the load is written to the run log (``event`` record,
``event: connector_loaded``) and announced as a :class:`Notice`. Hidden tools
cannot be dispatched (the loop answers with an error naming the available
tools). Install also adds the approval guard (see :mod:`.approval`).

Connector tools return values that go through the one formatter: frames become
handles named after the tool (or the ``name`` a tool passes in a
:class:`ConnectorResult`), small values inline. A :class:`ConnectorResult`
adds a note (e.g. "truncated at 1,000,000 rows") ahead of the snapshot.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.execution.connectors.host import ConnectorHost
from harness_magic.core.execution.connectors.lineage import column_sources
from harness_magic.core.execution.connectors.approval import ApprovalDecision, ApprovalPolicy, ApprovalRequest
from harness_magic.core.execution.connectors.guard import ApprovalGuard
from harness_magic.core.transcript.events import Notice
from harness_magic.core.execution.format import format_tool_output
from harness_magic.core.execution.tools import SAFETY_CLASSES, ToolError, ToolSpec

__all__ = [
    "Connector",
    "ConnectorRegistry",
    "ConnectorResult",
    "InstalledConnectors",
    "Registration",
    "RelatedEntry",
    "ToolContext",
    "Classifier",
    "tool_from_function",
    "LOAD_TOOL_NAME",
    "TOOL_SEPARATOR",
]

LOAD_TOOL_NAME = "load_connectors"
TOOL_SEPARATOR = "__"
"""Full tool names are ``<connector>__<tool>``: readable, and valid for every provider."""
CATALOGUE_LINE_MAX_CHARS = 160
"""Each catalogue line is cut here so the always-visible tool list stays short."""

Classifier = Callable[[dict[str, Any]], "tuple[str, str]"]
"""``classify(arguments) -> (effective safety class, one-line summary)`` for approval."""

_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,30}")


@dataclass
class ToolContext:
    """Injected into connector tools that declare a parameter of this type."""

    cache: HandleCache
    """The session cache of the harness the tool runs in."""
    harness: ConnectorHost | None
    """The harness (``current_run``, ``current_turn``, ``emit``); None for a tool called outside one."""
    tool_name: str
    """Full tool name (``<connector>__<tool>``)."""
    approve: "Callable[[ApprovalRequest], ApprovalDecision] | None" = None
    """Ask the approval policy (status line, run log, audit): a previewed tool after its preview, a read whose
    estimate is over the query budget (:mod:`.estimates`) before it runs."""
    glossary_classes: Mapping[str, str] = field(default_factory=dict)
    """``{"[table.]column": class}`` the session's glossaries declare (:meth:`ConnectorRegistry.glossary_classes`)."""
    related: "Callable[[str, int], list[RelatedEntry]]" = field(default=lambda text, k: [])
    """``related(text, k)``: at most ``k`` entries of the session's other connectors that answer ``text``
    (:meth:`ConnectorRegistry.related_entries`), for a knowledge tool to show beside its own results."""


@dataclass(frozen=True)
class RelatedEntry:
    """One entry a connector offers to other knowledge tools: its one-line text and its citation source.

    ``source`` is a :class:`~harness_magic.core.knowledge.citations.Source` (its id is what the line cites).
    """

    line: str
    source: Any


@dataclass
class ConnectorResult:
    """A tool value plus a note shown to the model ahead of the formatted value."""

    value: Any
    note: str = ""
    name: str | None = None
    """Preferred cache handle (defaults to the tool's result name)."""


_PATH_LIKE = re.compile(r"(?:file:|s3a?:|hdfs:)?/[^\s'\"]*")
"""A quoted absolute path or file URL in an error is where data lives, not a value from it."""
ECHO_HIDDEN = "'[value hidden]'"
"""What a quoted value in an engine's error becomes when the model's own SQL does not hold it."""


def hide_echoed_values(message: str, sql: str) -> str:
    """``message`` (an engine's error) with every quoted value (single or double quotes) the model's ``sql`` does
    not contain hidden.

    Engines echo data in errors ("Could not convert string 'Alice Smith' to INT32"): the value never entered
    the agent's side, so its error must not carry it there. What the model wrote itself stays readable.
    """
    def hide(match: re.Match[str]) -> str:
        inner = match.group(1) if match.group(1) is not None else match.group(2)
        if inner in sql or _PATH_LIKE.fullmatch(inner):  # the model's own words, or a file our checks name
            return match.group()
        return ECHO_HIDDEN

    return re.sub(r"'((?:[^'\\\n]|\\.|''){1,2000})'|\"((?:[^\"\\\n]|\\.){1,2000})\"", hide, message)


# --------------------------------------------------------------------------- schema from hints


def _describe_type(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or repr(annotation)


def _json_schema(annotation: Any, where: str) -> tuple[dict[str, Any], bool]:
    """(schema, optional) for a parameter annotation; TypeError when unsupported."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(args):
            schema, _ = _json_schema(rest[0], where)
            return schema, True
        raise TypeError(f"{where}: unions other than Optional[X] are not supported ({annotation!r})")
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in simple:
        return {"type": simple[annotation]}, False
    if origin is Literal:
        kinds = {type(a) for a in args}
        if len(kinds) != 1 or next(iter(kinds)) not in simple:
            raise TypeError(f"{where}: Literal values must share one of str/int/float/bool ({annotation!r})")
        return {"type": simple[next(iter(kinds))], "enum": list(args)}, False
    if annotation in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        if not args:
            return {"type": "array"}, False
        item_args = [a for a in args if a is not Ellipsis]
        if len(item_args) != 1:
            raise TypeError(f"{where}: use list[T] with one item type ({annotation!r})")
        item, _ = _json_schema(item_args[0], where)
        return {"type": "array", "items": item}, False
    if annotation is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"{where}: dict keys must be str ({annotation!r})")
        return {"type": "object"}, False
    raise TypeError(
        f"{where}: unsupported parameter type {_describe_type(annotation)}; "
        "supported: str, int, float, bool, list[T], dict, Literal[...], Optional[T]"
    )


_SECTION_RE = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Example|Examples)\s*:\s*$")
_GOOGLE_ARG_RE = re.compile(r"^\s{2,}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG_RE = re.compile(r"^\s*:param\s+(?:[\w\[\], |]+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a Google- or Sphinx-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    body: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        match = _SECTION_RE.match(line)
        if match:
            section, current = match.group(1), None
            continue
        sphinx = _SPHINX_ARG_RE.match(line)
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            continue
        if section in ("Args", "Arguments", "Parameters"):
            arg = _GOOGLE_ARG_RE.match("  " + line if not line.startswith(" ") else line)
            if arg and not line.startswith("        "):
                current = arg.group(1)
                params[current] = arg.group(2).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
            continue
        if section == "sphinx" and current and line.startswith(" ") and line.strip():
            params[current] = f"{params[current]} {line.strip()}"
            continue
        if section is None:
            body.append(line)
    description = re.sub(r"\s+", " ", " ".join(body)).strip()
    return description, params


def tool_from_function(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    safety: str = "read",
    connector: str | None = None,
    result_name: str | None = None,
) -> ToolSpec:
    """A :class:`ToolSpec` whose schema comes from ``fn``'s hints and docstring.

    Raises TypeError (naming function, parameter and type) for parameters the
    schema cannot express, and ValueError for an unknown safety class.
    """
    if not callable(fn):
        raise TypeError(f"tool_from_function needs a callable, got {fn!r}")
    if safety not in SAFETY_CLASSES:
        raise ValueError(f"safety {safety!r} is invalid; allowed: {', '.join(SAFETY_CLASSES)}")
    fn_name = getattr(fn, "__name__", type(fn).__name__)
    try:
        hints = typing.get_type_hints(fn)
    # broad: get_type_hints evaluates the tool author's annotations (NameError, TypeError, ...)
    except Exception as exc:
        raise TypeError(f"tool {fn_name!r}: cannot resolve type hints ({exc})") from exc
    doc_description, doc_params = parse_docstring(inspect.getdoc(fn))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        where = f"tool {fn_name!r}, parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{where}: *args/**kwargs cannot be described to the model; name each parameter")
        if param.name not in hints:
            raise TypeError(f"{where}: missing type annotation")
        if hints[param.name] is ToolContext:
            continue
        schema, optional = _json_schema(hints[param.name], where)
        if param.name in doc_params:
            schema["description"] = doc_params[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif param.default is not None:
            schema["default"] = param.default
        properties[param.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    text = description or doc_description
    if not text:
        raise ValueError(f"tool {fn_name!r} needs a description: add a docstring or pass description=")
    return ToolSpec(
        name=name or fn_name,
        description=text,
        parameters=parameters,
        handler=fn,
        safety=safety,  # type: ignore[arg-type]  # one of SAFETY_CLASSES: checked above
        connector=connector,
        result_name=result_name,
    )


# --------------------------------------------------------------------------- connector


class Connector:
    """A named group of tools, hidden from the model until loaded."""

    serves_pseudonyms: frozenset[str] = frozenset()
    """Tools (full names) whose SQL runs over views that serve pseudonyms (a DuckDB connector's ``query``): a
    pseudonym the query compares against is left as it is, not widened to its real value (see
    :meth:`~harness_magic.core.control.pseudonyms.Pseudonyms.query_for_engine`)."""

    def __init__(self, name: str, description: str) -> None:
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or TOOL_SEPARATOR in name:
            raise ValueError(
                f"connector name {name!r} is invalid: start with a letter, then letters, digits or single '_' "
                "(at most 31 characters, no '__')"
            )
        if not isinstance(description, str) or not description.strip():
            raise ValueError(f"connector {name!r} needs a one-line description")
        self.name = name
        self.description = " ".join(description.split())
        self._tools: list[ToolSpec] = []
        self._classifiers: dict[str, Classifier] = {}
        self._context_tools: set[str] = set()
        self._previewed: set[str] = set()
        self.sensitivity: dict[str, str] = {}
        """``{"table.column" or "column": class}`` from the ``sensitivity`` option: what the masker applies."""
        self.environment = "dev"
        """``dev``, ``staging`` or ``prod`` (see :mod:`.policy`); set by the builder or configuration."""
        self.allow_writes = False
        """The connector's configuration explicitly allows writes (``prod`` requires it)."""
        self.configuration: dict[str, Any] | None = None
        """How a builder made it (its name and arguments, :func:`.sameness.records_configuration`); None for a
        connector built by hand. What :meth:`ConnectorRegistry.put` compares to keep or replace a connector."""
        self.dialect: str | None = None
        """SQL dialect of its tools' ``sql`` arguments (``duckdb``, ``postgresql``...), for query lineage."""

    def glossary_classes(self) -> dict[str, str]:
        """``{"[table.]column": class}`` declared by this connector's glossary entries; none but a glossary's."""
        return {}

    def related_entries(self, text: str, k: int) -> list[RelatedEntry]:
        """At most ``k`` of this connector's entries that answer ``text`` (a term or search words), best first,
        for the glossary and docs tools to serve beside their own; none but a knowledge connector's (dbt)."""
        return []

    def __repr__(self) -> str:
        return f"Connector({self.name!r}, tools={self.tool_names})"

    @property
    def tools(self) -> list[ToolSpec]:
        """Template specs (the registry installs copies), in registration order."""
        return list(self._tools)

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self._tools]

    def classifier(self, tool_name: str) -> Classifier | None:
        return self._classifiers.get(tool_name)

    def wants_context(self, tool_name: str) -> bool:
        return tool_name in self._context_tools

    def retired(self) -> None:
        """Called once a registry has taken this connector out (removed, or replaced by a new configuration).

        The default keeps it usable: lazy engine handles made through it still read. A connector that holds
        what no handle needs (an MCP server's process) releases it here.
        """

    def previews(self, tool_name: str) -> bool:
        """The tool previews its write in a transaction and asks itself (through ``ToolContext.approve``)."""
        return tool_name in self._previewed

    def add_function(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        safety: str = "read",
        result_name: str | None = None,
        classify: Classifier | None = None,
        previewed: bool = False,
    ) -> ToolSpec:
        """Register ``fn`` as ``<connector>__<name or fn.__name__>``.

        ``previewed``: the guard only gates the call (refusals); ``fn`` takes a
        :class:`ToolContext` and asks through ``context.approve`` after its preview.
        """
        short: str | None = name or getattr(fn, "__name__", "")
        if short is None or not _NAME_RE.fullmatch(short) or TOOL_SEPARATOR in short:
            raise ValueError(f"tool name {short!r} of connector {self.name!r} is invalid")
        full = f"{self.name}{TOOL_SEPARATOR}{short}"
        if full in self.tool_names:
            raise ValueError(f"connector {self.name!r} already has a tool {short!r}")
        spec = tool_from_function(fn, name=full, description=description, safety=safety, connector=self.name,
                                  result_name=result_name or f"{self.name}_{short}")
        spec.visible = False
        hints = typing.get_type_hints(fn)
        if any(h is ToolContext for h in hints.values()):
            self._context_tools.add(full)
        if classify is not None:
            self._classifiers[full] = classify
        if previewed:
            if full not in self._context_tools:
                raise TypeError(f"previewed tool {full!r} needs a ToolContext parameter to ask after its preview")
            self._previewed.add(full)
        self._tools.append(spec)
        return spec

    def tool(
        self,
        name: str | None = None,
        *,
        safety: str = "read",
        description: str | None = None,
        result_name: str | None = None,
        classify: Classifier | None = None,
        previewed: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of :meth:`add_function`; returns the function unchanged."""

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add_function(fn, name=name, description=description, safety=safety,
                              result_name=result_name, classify=classify, previewed=previewed)
            return fn

        return decorate

    def catalogue_line(self) -> str:
        line = f"- {self.name}: {self.description} ({len(self._tools)} tools)"
        return line if len(line) <= CATALOGUE_LINE_MAX_CHARS else line[: CATALOGUE_LINE_MAX_CHARS - 3] + "..."


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Registration:
    """What :meth:`ConnectorRegistry.put` did with a connector."""

    connector: Connector
    """The connector registered now under that name (the earlier one when it was kept)."""
    outcome: Literal["added", "kept", "replaced"]
    """``kept``: one of that name with the same configuration was registered (it stays, state and all);
    ``replaced``: one of that name with another configuration was (the new one took its place)."""
    changed: tuple[str, ...] = ()
    """For ``replaced``: what differed (``files``, ``database``, ``tools``...)."""

    @property
    def message(self) -> str:
        """One line saying what happened, for the cell (``""`` for ``added``)."""
        name = self.connector.name
        if self.outcome == "kept":
            return f"connector {name!r} is already registered with this configuration: kept (its state too)"
        if self.outcome == "replaced":
            return f"connector {name!r} replaced: its configuration changed ({', '.join(self.changed)})"
        return ""


class ConnectorRegistry:
    """Connectors available to a session, and the approval policy for their tools."""

    def __init__(self, connectors: Iterable[Connector] = (), *, approval: ApprovalPolicy | None = None) -> None:
        self.approval = approval if approval is not None else ApprovalPolicy()
        self._connectors: dict[str, Connector] = {}
        self._installed: list[InstalledConnectors] = []
        for connector in connectors:
            self.register(connector)

    def register(self, connector: Connector) -> Connector:
        """Add a connector; harnesses already installed get its tools (hidden) appended."""
        if not isinstance(connector, Connector):
            raise TypeError(f"register() needs a Connector, got {type(connector).__name__}")
        if connector.name in self._connectors:
            raise ValueError(f"a connector named {connector.name!r} is already registered")
        if not connector.tools:
            raise ValueError(f"connector {connector.name!r} has no tools")
        self._connectors[connector.name] = connector
        for installed in self._installed:
            installed._add_connector(connector)
        return connector

    def put(self, connector: Connector) -> Registration:
        """Register ``connector``; under a name in use, keep the registered one when its configuration is the
        same (:func:`.sameness.differences`), else replace it (harnesses swap its tools; a connector their
        conversation loaded stays loaded). The replaced one is told (:meth:`Connector.retired`); it is not
        closed: handles made through it (lazy engine handles) keep working."""
        if not isinstance(connector, Connector):
            raise TypeError(f"put() needs a Connector, got {type(connector).__name__}")
        registered = self._connectors.get(connector.name)
        if registered is None:
            return Registration(self.register(connector), "added")
        from harness_magic.core.execution.connectors.sameness import differences

        changed = differences(registered, connector)
        if not changed:
            return Registration(registered, "kept")
        if not connector.tools:
            raise ValueError(f"connector {connector.name!r} has no tools")
        self._connectors[connector.name] = connector  # the same place in the catalogue
        for installed in self._installed:
            installed._replace_connector(registered, connector)
        registered.retired()
        return Registration(connector, "replaced", tuple(changed))

    def remove(self, name: str) -> Connector:
        """Take connector ``name`` out (harnesses drop its tools); returns it. KeyError naming the registered
        ones when there is none."""
        connector = self[name]
        del self._connectors[name]
        for installed in self._installed:
            installed._remove_connector(connector)
        connector.retired()
        return connector

    def connector(self, name: str, description: str) -> Connector:
        """Builder: a new connector registered here (add tools with ``@c.tool()``)."""
        connector = Connector(name, description)
        self._connectors[name] = connector  # tools come later; install picks them up lazily
        return connector

    @property
    def names(self) -> list[str]:
        return list(self._connectors)

    def glossary_classes(self) -> dict[str, str]:
        """Every glossary connector's column classes, merged in registration order (a later entry wins)."""
        merged: dict[str, str] = {}
        for connector in self._connectors.values():
            merged.update(connector.glossary_classes())
        return merged

    def related_entries(self, text: str, k: int, *, asking: str | None = None) -> list[RelatedEntry]:
        """At most ``k`` entries answering ``text`` from every connector but ``asking`` (registration order)."""
        found: list[RelatedEntry] = []
        for connector in self._connectors.values():
            if connector.name != asking and len(found) < k:
                found.extend(connector.related_entries(text, k - len(found))[: k - len(found)])
        return found

    def __getitem__(self, name: str) -> Connector:
        try:
            return self._connectors[name]
        except KeyError:
            raise KeyError(f"no connector {name!r}; registered: {', '.join(self._connectors) or '(none)'}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._connectors

    def catalogue(self) -> str:
        """One line per connector: the text the model sees before loading anything."""
        lines = [c.catalogue_line() for c in self._connectors.values()]
        return "\n".join(lines) if lines else "(no connectors registered)"

    def install(self, harness: ConnectorHost) -> "InstalledConnectors":
        """Add ``load_connectors``, every connector tool (hidden) and the approval guard to ``harness``."""
        installed = InstalledConnectors(self, harness)
        self._installed.append(installed)
        return installed


class InstalledConnectors:
    """The registry's tools inside one harness (visibility is per harness)."""

    def __init__(self, registry: ConnectorRegistry, harness: ConnectorHost) -> None:
        self.registry = registry
        self.harness = harness
        self.loaded: list[str] = []
        self._specs: dict[str, ToolSpec] = {}
        self._owner: dict[str, Connector] = {}
        self._load_spec = ToolSpec(
            name=LOAD_TOOL_NAME,
            description="",
            parameters={"type": "object", "properties": {}, "required": ["connector_name"]},
            handler=self.load,
        )
        self._refresh_load_spec()
        harness.add_tool(self._load_spec)
        for connector in registry._connectors.values():
            self._add_connector(connector)
        self._approvals = ApprovalGuard(registry, harness)
        harness.add_tool_guard(self._guard)

    # -- building ----------------------------------------------------------------------------

    def _refresh_load_spec(self) -> None:
        names = list(self.registry._connectors)
        self._load_spec.description = (
            "Reveal a connector's tools (named <connector>__<tool>) from your next step on. "
            "Connectors:\n" + self.registry.catalogue()
        )
        self._load_spec.parameters = {
            "type": "object",
            "properties": {"connector_name": {"type": "string", "enum": names,
                                              "description": "Name of the connector to load."}},
            "required": ["connector_name"],
        }

    def _add_connector(self, connector: Connector) -> None:
        for template in connector.tools:
            if template.name in self._specs:
                continue
            spec = dataclasses.replace(template, handler=self._bind(connector, template), visible=False)
            self.harness.add_tool(spec)
            self._specs[spec.name] = spec
            self._owner[spec.name] = connector
        self._refresh_load_spec()

    def _remove_connector(self, connector: Connector) -> bool:
        """Drop ``connector``'s tools from the harness; returns whether the conversation had loaded it."""
        for name in [n for n, owner in self._owner.items() if owner is connector]:
            self.harness.remove_tool(name)
            del self._specs[name], self._owner[name]
        was_loaded = connector.name in self.loaded
        if was_loaded:
            self.loaded.remove(connector.name)
        self._refresh_load_spec()
        return was_loaded

    def _replace_connector(self, old: Connector, new: Connector) -> None:
        """``new``'s tools in place of ``old``'s, visible when the conversation had loaded ``old``."""
        was_loaded = self._remove_connector(old)
        self._add_connector(new)
        if was_loaded:
            for spec in self._specs.values():
                if spec.connector == new.name:
                    spec.visible = True
            self.loaded.append(new.name)

    def _bind(self, connector: Connector, template: ToolSpec) -> Callable[..., Any]:
        fn = template.handler
        context_name = None
        if connector.wants_context(template.name):
            context_name = next(n for n, h in typing.get_type_hints(fn).items() if h is ToolContext)
        harness = self.harness
        preferred = template.result_name or template.name

        def handler(**arguments: Any) -> Any:
            unknown = sorted(set(arguments) - set(template.parameters.get("properties", {})))
            if unknown:
                raise ToolError(f"Bad arguments for {template.name!r}: unexpected {', '.join(unknown)}. "
                                f"Parameters: {', '.join(template.parameters.get('properties', {})) or 'none'}.")
            missing = [p for p in template.parameters.get("required", []) if p not in arguments]
            if missing:
                raise ToolError(f"Bad arguments for {template.name!r}: missing {', '.join(missing)}.")
            if context_name is not None:
                approve = self._approver(template, connector)  # previewed writes, reads over the query budget
                registry, asking = self.registry, connector.name
                arguments[context_name] = ToolContext(
                    harness.cache, harness, template.name, approve, registry.glossary_classes(),
                    lambda text, k: registry.related_entries(text, k, asking=asking))
            sql = arguments.get("sql")
            sources = None
            guard = harness.cache.guard
            if isinstance(sql, str) and guard is not None:  # lineage and pseudonyms matter only to an entry guard
                sources = column_sources(sql, connector.dialect)
                if template.name not in connector.serves_pseudonyms:  # an engine holding real values
                    arguments["sql"] = guard.query_for_engine(sql, connector.dialect)  # compared pseudonyms made real
            try:
                value = fn(**arguments)
            except ToolError as exc:
                if not isinstance(sql, str):
                    raise
                raise ToolError(hide_echoed_values(str(exc), sql)) from None
            if isinstance(value, ConnectorResult):
                output = format_tool_output(value.value, harness.cache, value.name or preferred,
                                            turn=harness.current_turn, tool=template.name, sources=sources)
                text = f"{value.note}\n{output.text}" if value.note else output.text
                return dataclasses.replace(output, text=text)
            return format_tool_output(value, harness.cache, preferred, turn=harness.current_turn,
                                      tool=template.name, sources=sources)

        handler.__name__ = template.name
        return handler

    # -- loading -----------------------------------------------------------------------------

    @property
    def specs(self) -> list[ToolSpec]:
        return list(self._specs.values())

    def is_loaded(self, connector_name: str) -> bool:
        return connector_name in self.loaded

    def load(self, connector_name: str) -> str:
        """Reveal a connector's tools (the ``load_connectors`` tool)."""
        registry = self.registry
        if connector_name not in registry:
            raise ToolError(f"No connector {connector_name!r}. Connectors: {', '.join(registry.names) or '(none)'}.")
        connector = registry[connector_name]
        self._add_connector(connector)  # tools added to a builder connector after install
        specs = [s for s in self._specs.values() if s.connector == connector_name]
        if connector_name in self.loaded:
            return f"Connector {connector_name!r} is already loaded: {', '.join(s.name for s in specs)}."
        for spec in specs:
            spec.visible = True
        self.loaded.append(connector_name)
        run = self.harness.current_run
        if run is not None:
            use = run.current_tool_use
            run.logger.write("event", event="connector_loaded", connector=connector_name,
                             tools=[s.name for s in specs], turn=run.turn, tool_use_id=use.id if use else None)
        self.harness.emit(Notice(text=f"Loaded connector {connector_name}: {', '.join(s.name for s in specs)}"))
        lines = [f"Loaded connector {connector_name!r}; these tools are available from your next step:"]
        for spec in specs:
            marker = "" if spec.safety == "read" else f" [{spec.safety}: needs approval]"
            lines.append(f"- {spec.name}: {_first_sentence(spec.description)}{marker}")
        return "\n".join(lines)

    def unload_all(self) -> None:
        """Hide every connector tool again (a fresh conversation)."""
        self.restore_loaded(())

    def restore_loaded(self, names: Iterable[str]) -> None:
        """Show exactly the tools of the connectors ``names`` (those still registered), hiding the others: a
        re-run cell starts from the connectors loaded when its previous run began."""
        keep = [n for n in dict.fromkeys(names) if n in self.registry]
        for name in keep:
            self._add_connector(self.registry[name])
        for spec in self._specs.values():
            spec.visible = spec.connector in keep
        self.loaded[:] = keep

    # -- approval ----------------------------------------------------------------------------

    def _guard(self, spec: ToolSpec, use: Any) -> str | None:
        return self._approvals.guard(spec, use, self._owner.get(spec.name))

    def _approver(self, template: ToolSpec, connector: Connector) -> Callable[[ApprovalRequest], ApprovalDecision]:
        return self._approvals.approver(template.name, connector)


def _first_sentence(text: str) -> str:
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return match.group(1) if match else text
