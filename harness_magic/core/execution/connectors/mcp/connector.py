"""The ``mcp`` connector: an MCP server's tools and resources, untrusted, as one connector.

Configuration (``{"type": "mcp", ...}``, checked by :func:`parse_options`; a bad key or value is a ValueError
naming it and what is allowed)::

    {"type": "mcp", "name": "crm", "command": ["python", "crm_server.py"],   # a local server (stdio)
     "env": ["CRM_TOKEN"], "read_paths": ["data/"], "network": false,
     "read_tools": ["lookup_customer"], "trust_annotations": false}
    {"type": "mcp", "name": "tickets", "url": "https://mcp.example.com/mcp",  # a remote one (streamable HTTP)
     "headers": {"Authorization": "Bearer $TICKETS_TOKEN"}}

* Each server tool becomes ``<name>__<tool>`` (the server's name made a valid tool name), disclosed
  progressively like every connector's; its schema and description are the server's (the description bounded
  by :data:`DESCRIPTION_MAX_CHARS`).
* Every tool is ``external`` (asks the approval policy) unless ``read_tools`` names it, or
  ``trust_annotations`` is true and the server annotates it ``readOnlyHint: true``.
* A server with resources also gets ``<name>__search_resources(query, k)`` and ``<name>__read_resource(uri)``
  (read): results cite ``[doc:<uri>]`` and enter the run's citation ledger like docs search.
* Results are bounded (:data:`RESULT_MAX_CHARS`, then the one formatter) and in time (``timeout_s``), are
  scrubbed of credentials here (a server may echo a token it was given), pass the run's masking step like every
  tool result, and are logged like them. A server that crashes,
  hangs or sends a malformed message gives the model a tool error saying so; the next call starts it again.
* A local server runs confined (:mod:`.launch`): only the named environment variables, read only the Python
  install, its own files and ``read_paths``, write only its private directory, execute nothing but its own
  command, network only as configured, and it dies with the kernel.
* Header values name environment variables (``"$VAR"``, ``"Bearer ${VAR}"``), read at each connection: the
  configuration, the logs and ``%agent_connectors`` never hold the secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import weakref
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Mapping

from harness_magic.core.confinement.owned_dirs import owned_tempdir
from harness_magic.core.execution.connectors.mcp.client import McpClient, McpUnavailable
from harness_magic.core.execution.connectors.registry import TOOL_SEPARATOR, Connector, ToolContext
from harness_magic.core.execution.connectors.sameness import records_configuration
from harness_magic.core.execution.tools import ToolError, ToolSpec
from harness_magic.core.knowledge.citations import Source, ledger_host, record_retrieval
from harness_magic.core.knowledge.ranking import lead, snippet
from harness_magic.core.transcript.scrub import scrub

__all__ = ["McpConnector", "McpServerConfig", "mcp_connector", "parse_options", "CALL_TIMEOUT_S",
           "CONNECT_TIMEOUT_S", "RESULT_MAX_CHARS", "DESCRIPTION_MAX_CHARS", "RESOURCES_MAX",
           "RESOURCE_MAX_CHARS", "SEARCH_MAX_K", "REQUIRED_LAYERS"]

CALL_TIMEOUT_S = 60.0
"""Default ``timeout_s``: a tool call or resource read that takes longer is abandoned and the server restarted."""
CONNECT_TIMEOUT_S = 30.0
"""Default ``connect_timeout_s``: starting (or reaching) the server and the MCP handshake."""
TIMEOUT_MAX_S = 3600.0
"""The largest timeout a configuration may set."""
RESULT_MAX_CHARS = 100_000
"""Text kept of one tool result (the one formatter then bounds what the model sees)."""
DESCRIPTION_MAX_CHARS = 1_000
"""A server's tool description (untrusted text shown to the model) is cut here."""
RESOURCES_MAX = 200
"""Resources listed and searched per server."""
RESOURCE_MAX_CHARS = 200_000
"""Text kept of one resource."""
SEARCH_MAX_K = 10
"""Most resources one search returns."""
SEARCH_SNIPPET_WORDS = 40
"""Words of a resource shown per search hit."""
REQUIRED_LAYERS = ("landlock", "seccomp")
"""A local server does not start unless these layers hold (see :mod:`.launch`)."""
SYSTEM_READ = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache", "/etc/localtime",
               "/usr/share/zoneinfo")
"""What every local server may read besides the Python install: shared libraries, the loader cache, time zones."""
LOG_TAIL_CHARS = 600
"""How much of a local server's stderr a start failure quotes."""

DEFAULT_DESCRIPTION = "Tools of the MCP server {server} (an external service; calls need approval unless marked read)."
LOCAL_OPTIONS = ("command", "env", "read_paths", "network")
REMOTE_OPTIONS = ("url", "headers")
COMMON_OPTIONS = ("read_tools", "trust_annotations", "timeout_s", "connect_timeout_s")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_]+")
_QUERY_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class McpServerConfig:
    """A checked ``mcp`` entry (see the module docstring); exactly one of ``command`` and ``url`` is set."""

    command: tuple[str, ...] | None = None
    env: tuple[str, ...] = ()
    read_paths: tuple[str, ...] = ()
    network: bool | tuple[int, ...] = False
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    read_tools: tuple[str, ...] = ()
    trust_annotations: bool = False
    timeout_s: float = CALL_TIMEOUT_S
    connect_timeout_s: float = CONNECT_TIMEOUT_S


def _bad(name: str, key: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"mcp connector {name!r}: {key} {value!r} is invalid; {allowed}")


def _names(name: str, key: str, value: Any, pattern: str = r".+") -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and re.fullmatch(pattern, v)
                                                      for v in value):
        raise _bad(name, key, value, "allowed: a list of strings" + (
            " naming environment variables (letters, digits, '_')" if pattern != r".+" else ""))
    return tuple(value)


def parse_options(name: str, options: Mapping[str, Any]) -> McpServerConfig:
    """The checked configuration of connector ``name`` from its entry's ``options``; ValueError naming the bad key
    or value and what is allowed."""
    allowed = LOCAL_OPTIONS + REMOTE_OPTIONS + COMMON_OPTIONS
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"mcp connector {name!r}: unknown option {unknown[0]!r}; allowed: name, description, "
                         f"{', '.join(allowed)}, environment, sensitivity")
    local, remote = "command" in options, "url" in options
    if local == remote:
        raise ValueError(f"mcp connector {name!r}: give exactly one of 'command' (a local server started by the "
                         f"product) and 'url' (a remote server over streamable HTTP)")
    wrong = [k for k in (REMOTE_OPTIONS if local else LOCAL_OPTIONS) if k in options]
    if wrong:
        kind = "a local server ('command')" if local else "a remote server ('url')"
        raise ValueError(f"mcp connector {name!r}: option {wrong[0]!r} does not apply to {kind}")
    fields: dict[str, Any] = {}
    if local:
        command = options["command"]
        if not isinstance(command, (list, tuple)) or not command or not all(isinstance(c, str) and c and
                                                                             "\0" not in c for c in command):
            raise _bad(name, "command", command, "allowed: a non-empty list of strings, e.g. "
                                                 "['python', 'server.py']")
        fields["command"] = tuple(command)
        fields["env"] = _names(name, "env", options.get("env", []), r"[A-Za-z_][A-Za-z0-9_]*")
        fields["read_paths"] = _names(name, "read_paths", options.get("read_paths", []))
        network = options.get("network", False)
        if isinstance(network, bool):
            fields["network"] = network
        elif isinstance(network, (list, tuple)) and network and all(
                isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in network):
            fields["network"] = tuple(network)
        else:
            raise _bad(name, "network", network, "allowed: false (none, the default), true (any), or a list of "
                                                 "TCP ports it may connect to")
    else:
        url = options["url"]
        if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s]+", url):
            raise _bad(name, "url", url, "allowed: an http:// or https:// URL of a streamable HTTP endpoint")
        fields["url"] = url
        headers = options.get("headers", {})
        if not isinstance(headers, Mapping):
            raise _bad(name, "headers", headers, "allowed: a mapping of header names to values naming "
                                                 "environment variables")
        for key, value in headers.items():
            if not isinstance(key, str) or not isinstance(value, str) or not _VARIABLE.search(value):
                raise ValueError(
                    f"mcp connector {name!r}: header {key!r} must name an environment variable (\"$VAR\" or "
                    f"\"Bearer ${{VAR}}\"), not hold its value: a literal would be kept in the configuration "
                    f"and its logs")
        fields["headers"] = tuple(sorted(headers.items()))
    fields["read_tools"] = _names(name, "read_tools", options.get("read_tools", []))
    trust = options.get("trust_annotations", False)
    if not isinstance(trust, bool):
        raise _bad(name, "trust_annotations", trust, "allowed: true or false")
    fields["trust_annotations"] = trust
    for key, default in (("timeout_s", CALL_TIMEOUT_S), ("connect_timeout_s", CONNECT_TIMEOUT_S)):
        value = options.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= TIMEOUT_MAX_S:
            raise _bad(name, key, value, f"allowed: seconds, more than 0 and at most {TIMEOUT_MAX_S:g}")
        fields[key] = float(value)
    return McpServerConfig(**fields)


def resolve_headers(name: str, headers: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Header values with their ``$VAR`` references replaced from the environment now; McpUnavailable naming a
    variable that is not set (never a value)."""
    def value_of(match: re.Match[str]) -> str:
        variable = match.group(1) or match.group(2)
        if variable not in os.environ:
            raise McpUnavailable(f"the environment variable {variable!r} that a header of MCP connector "
                                 f"{name!r} names is not set")
        return os.environ[variable]

    return {key: _VARIABLE.sub(value_of, template) for key, template in headers}


def tool_name_for(server_name: str, taken: set[str]) -> str:
    """A valid connector tool name for the server's tool ``server_name`` not in ``taken``."""
    base = re.sub(r"_{2,}", "_", _TOOL_NAME.sub("_", server_name)).strip("_") or "tool"
    if not base[0].isalpha():
        base = "t_" + base
    base = base[:31].rstrip("_")
    candidate, number = base, 2
    while candidate in taken:
        suffix = f"_{number}"
        candidate, number = base[:31 - len(suffix)].rstrip("_") + suffix, number + 1
    return candidate


def _parameters(schema: Any) -> dict[str, Any]:
    """The server's input schema as a tool's parameters (an object schema; anything else becomes an empty one)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    parameters = {k: v for k, v in schema.items() if k != "$schema"}
    if not isinstance(parameters.get("properties"), dict):
        parameters["properties"] = {}
    return parameters


def result_text(result: Any) -> str:
    """The text of an MCP ``CallToolResult``: text blocks, embedded text resources, links and what else was
    omitted; the structured content when there is no text."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            parts.append(f"[resource {inner.uri}]\n{text}" if isinstance(text, str)
                         else f"[binary resource {inner.uri} omitted]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content omitted ({getattr(block, 'mime_type', '') or 'no type'})]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _bounded(text: str, limit: int, what: str) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[{what} cut at {limit:,} of {len(text):,} characters]"


class McpConnector(Connector):
    """One MCP server as a connector (see the module docstring). ``close()`` stops a local server."""

    kind = "mcp"

    def __init__(self, name: str, description: str | None, config: McpServerConfig) -> None:
        super().__init__(name, description or DEFAULT_DESCRIPTION.format(server=name))
        self.config = config
        self.directory: str | None = None
        """A local server's private directory (its ``HOME``, the only place it may write)."""
        self._errlog: list[Any] = []
        """The local server's stderr file, once opened (closed with the connector)."""
        if config.command is not None:
            self.directory = owned_tempdir("mcp", name)
            transport, describe = self._local_transport, f"local MCP server {name!r}"
        else:
            transport, describe = self._remote_transport, f"remote MCP server {name!r}"
        self.client = McpClient(transport, describe, connect_timeout_s=config.connect_timeout_s,
                                diagnose=self._log_tail)
        self._finalizer = weakref.finalize(self, _shut, self.client, self.directory, self._errlog)
        self._server_names: dict[str, str] = {}
        self._resources: dict[str, Any] = {}
        self._resource_text: dict[str, str] = {}
        try:
            tools = self.client.request("the tool listing", lambda s: s.list_tools(), config.timeout_s)
            self._add_server_tools(tools.tools)
            capabilities = getattr(self.client.server_info, "capabilities", None)
            if getattr(capabilities, "resources", None) is not None:
                self._list_resources()
                self.add_function(self._search, name="search_resources")
                self.add_function(self._read, name="read_resource")
        except McpUnavailable as exc:
            self.close()
            raise ConnectionError(f"mcp connector {name!r}: {exc}") from None
        except ValueError:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def confinement(self) -> dict[str, Any]:
        """Each confinement layer's status for the running local server (``{}`` for a remote one or before start)."""
        if self.directory is None:
            return {}
        from harness_magic.core.execution.connectors.mcp.launch import LAYERS_FILE

        try:
            with open(os.path.join(self.directory, LAYERS_FILE)) as handle:
                return dict(json.load(handle))
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        """Stop the server's session (a local server process) and remove its private directory."""
        self._finalizer()

    def retired(self) -> None:
        """Taken out of its registry (removed or reconfigured): its tools left every harness and no handle reads
        through a server, so the server stops now rather than at kernel exit."""
        self.close()

    # -- transports --------------------------------------------------------------------------

    def _plan(self) -> dict[str, Any]:
        from harness_magic.core.confinement.layers import python_read_paths
        from harness_magic.core.execution.connectors.mcp.launch import program_loader

        assert self.config.command is not None and self.directory is not None
        command = list(self.config.command)
        executable = command[0] if os.sep in command[0] else shutil.which(command[0])
        if executable is None or not os.path.isfile(executable):
            raise McpUnavailable(f"the command {command[0]!r} of MCP connector {self.name!r} is not an executable "
                                 f"file on PATH")
        command[0] = os.path.abspath(executable)
        command[1:] = [os.path.realpath(a) if os.path.isfile(a) else a for a in command[1:]]  # it runs elsewhere
        own_files = [a for a in command[1:] if os.path.isabs(a) and os.path.isfile(a)]
        loader = program_loader()
        system = [os.path.realpath(p) for p in SYSTEM_READ if os.path.exists(p)]
        reads = [*python_read_paths(), *system, *own_files, *(os.path.realpath(p) for p in self.config.read_paths)]
        network = self.config.network
        return {"kernel_pid": os.getpid(), "directory": self.directory, "command": command,
                "env": list(self.config.env), "network": list(network) if isinstance(network, tuple) else network,
                "read_paths": reads, "exec_paths": [os.path.realpath(command[0]), *([loader] if loader else [])],
                "required": list(REQUIRED_LAYERS)}

    @contextlib.asynccontextmanager
    async def _local_transport(self) -> AsyncIterator[tuple[Any, Any]]:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        from harness_magic.core.execution.connectors.mcp import launch

        assert self.directory is not None
        plan = self._plan()
        passed = {name: os.environ[name] for name in self.config.env if name in os.environ}
        if not self._errlog:  # kept open for every start; closed by close()
            self._errlog.append(open(os.path.join(self.directory, "server.log"), "a"))  # noqa: SIM115
        parameters = StdioServerParameters(command=sys.executable,
                                           args=["-I", os.path.abspath(launch.__file__), json.dumps(plan)],
                                           env=passed, cwd=self.directory)
        async with stdio_client(parameters, errlog=self._errlog[0]) as (read, write):
            yield read, write

    @contextlib.asynccontextmanager
    async def _remote_transport(self) -> AsyncIterator[tuple[Any, Any]]:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        assert self.config.url is not None
        headers = resolve_headers(self.name, self.config.headers)
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(self.config.url, http_client=http) as streams:
                yield streams[0], streams[1]

    def _log_tail(self) -> str:
        """The end of a local server's stderr (the launcher's refusal, a traceback), for a start failure."""
        if self.directory is None:
            return ""
        try:
            with open(os.path.join(self.directory, "server.log"), "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - LOG_TAIL_CHARS))
                return handle.read().decode(errors="replace").strip()
        except OSError:
            return ""

    # -- tools -------------------------------------------------------------------------------

    def _safety(self, tool: Any) -> str:
        if tool.name in self.config.read_tools:
            return "read"
        hints = getattr(tool, "annotations", None)
        if self.config.trust_annotations and hints is not None and hints.read_only_hint is True \
                and hints.destructive_hint is not True:
            return "read"
        return "external"

    def _add_server_tools(self, tools: list[Any]) -> None:
        listed = {t.name for t in tools}
        missing = [t for t in self.config.read_tools if t not in listed]
        if missing:
            raise ValueError(f"mcp connector {self.name!r}: read_tools names {missing[0]!r}, which the server does "
                             f"not have; its tools: {', '.join(sorted(listed)) or '(none)'}")
        taken = {"search_resources", "read_resource"}
        for tool in tools:
            short = tool_name_for(tool.name, taken)
            taken.add(short)
            full = f"{self.name}{TOOL_SEPARATOR}{short}"
            self._server_names[full] = tool.name
            description = lead(tool.description or tool.title or f"The MCP server's tool {tool.name!r}.",
                               DESCRIPTION_MAX_CHARS)
            spec = ToolSpec(name=full, description=description, parameters=_parameters(tool.input_schema),
                            handler=self._caller(full), visible=False, safety=self._safety(tool),  # type: ignore[arg-type]  # one of SAFETY_CLASSES
                            connector=self.name, result_name=f"{self.name}_{short}")
            self._tools.append(spec)

    def _caller(self, full: str) -> Callable[..., Any]:
        def call(**arguments: Any) -> str:
            return self.call_tool(full, arguments)

        call.__name__ = full
        return call

    def call_tool(self, full: str, arguments: dict[str, Any]) -> str:
        """Call the server's tool behind ``full`` (``<name>__<tool>``); its text, bounded. ToolError when the
        tool reports an error, the server refuses the call, or the server fails (then it restarts next call)."""
        server_name = self._server_names[full]
        timeout = self.config.timeout_s
        try:
            result = self.client.request(f"the call of {server_name!r}", lambda s: s.call_tool(
                server_name, arguments, read_timeout_seconds=timeout), timeout)
        except McpUnavailable as exc:
            raise ToolError(f"{full} failed: {exc}.") from None
        # broad: the server's JSON-RPC error answer (unknown tool, invalid arguments) comes as the SDK's exception
        except Exception as exc:
            raise ToolError(f"{full} was refused by the server: {exc}") from None
        text = scrub(_bounded(result_text(result), RESULT_MAX_CHARS, "result"))  # a server may echo a credential
        if getattr(result, "is_error", False):
            raise ToolError(f"{full} reported an error: {text or '(no message)'}")
        return text

    # -- resources ---------------------------------------------------------------------------

    def _list_resources(self) -> None:
        listed = self.client.request("the resource listing", lambda s: s.list_resources(), self.config.timeout_s)
        self._resources = {str(r.uri): r for r in listed.resources[:RESOURCES_MAX]}

    def _resource(self, uri: str) -> str:
        if uri not in self._resource_text:
            result = self.client.request(f"the read of {uri!r}", lambda s: s.read_resource(uri),
                                         self.config.timeout_s)
            texts = [c.text for c in result.contents if isinstance(getattr(c, "text", None), str)]
            self._resource_text[uri] = scrub(_bounded("\n".join(texts) or "(no text content)", RESOURCE_MAX_CHARS,
                                                      "resource"))
        return self._resource_text[uri]

    def _search(self, query: str, ctx: ToolContext, k: int = 5) -> str:
        """Search the server's resources (documents it publishes); results cite [doc:<uri>].

        Args:
            query: Words to look for, e.g. "refund approval".
            k: How many resources to return (at most 10).
        """
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be non-empty text, e.g. search_resources(query='refund approval').")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= SEARCH_MAX_K:
            raise ToolError(f"k must be a whole number from 1 to {SEARCH_MAX_K}, got {k!r}.")
        words = {w[:5] for w in _QUERY_WORD.findall(query.lower()[:500])}
        scored = []
        try:
            for uri, resource in self._resources.items():
                text = self._resource(uri)
                haystack = f"{resource.name} {resource.description or ''} {text}".lower()
                found = {w[:5] for w in _QUERY_WORD.findall(haystack)}
                score = len(words & found)
                if score:
                    scored.append((-score, uri, text, resource))
        except McpUnavailable as exc:
            raise ToolError(f"{ctx.tool_name} failed: {exc}.") from None
        hits = sorted(scored)[:k]
        if not hits:
            return f"No resource of {self.name} matches {query[:200]!r}; {len(self._resources)} resources searched."
        sources = [Source(f"doc:{uri}", str(resource.name), snippet(text, sorted(words), SEARCH_SNIPPET_WORDS))
                   for _, uri, text, resource in hits]
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, sources)
        lines = [f"[{s.source_id}] {s.title}: {s.snippet}" for s in sources]
        return "\n".join([f"{len(hits)} resources of {self.name} match:", *lines,
                          f"Read one whole with {self.name}__read_resource(uri=...)."])

    def _read(self, uri: str, ctx: ToolContext) -> str:
        """Read one of the server's resources whole by its URI (from search_resources); cite it as [doc:<uri>].

        Args:
            uri: A resource URI, e.g. "docs://refunds".
        """
        wanted = uri.removeprefix("[").removesuffix("]").removeprefix("doc:") if isinstance(uri, str) else uri
        if wanted not in self._resources:
            listing = ", ".join(list(self._resources)[:40]) or "(none)"
            raise ToolError(f"No resource {str(uri)[:200]!r} on {self.name}; its resources: {listing}.")
        try:
            text = self._resource(wanted)
        except McpUnavailable as exc:
            raise ToolError(f"{ctx.tool_name} failed: {exc}.") from None
        resource = self._resources[wanted]
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, [Source(f"doc:{wanted}", str(resource.name), text)])
        return f"[doc:{wanted}] {resource.name}\n{text}"


def _shut(client: McpClient, directory: str | None, files: list[Any]) -> None:
    client.close()
    for handle in files:
        handle.close()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


@records_configuration
def mcp_connector(*, name: str = "mcp", description: str | None = None, **options: Any) -> McpConnector:
    """An MCP server as connector ``name`` (see the module docstring for ``options``). Starts (or reaches) the
    server to list its tools: ConnectionError when it cannot, ValueError for a bad option."""
    return McpConnector(name, description, parse_options(name, options))
