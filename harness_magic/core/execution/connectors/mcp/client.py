"""A synchronous MCP client over the SDK's async one, on a private event loop thread the connector owns.

:class:`McpClient` keeps one MCP session open (stdio to a local server it starts, or streamable HTTP to a remote
one) on an event loop running in its own daemon thread, so no caller's loop (the kernel's) is ever blocked or
used. Each request waits on that loop for at most its timeout. Any failure of the connection itself (the server
process died, hung past the timeout, sent a line that is not a protocol message, the HTTP endpoint went away)
closes the session and raises :class:`McpUnavailable` with a sentence saying what happened; the next request
starts a fresh session (for a local server: a fresh process). A tool's own error (``isError`` in its result) is
not a connection failure: it comes back in the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

__all__ = ["McpClient", "McpUnavailable", "TransportFactory", "CLOSE_TIMEOUT_S"]

CLOSE_TIMEOUT_S = 5.0
"""How long closing a session may take (the SDK stops a local server: SIGTERM, then SIGKILL)."""
ERROR_DETAIL_MAX_CHARS = 300
"""How much of a transport error (a malformed line, an HTTP failure) a tool error quotes."""

T = TypeVar("T")

TransportFactory = Callable[[], "contextlib.AbstractAsyncContextManager[tuple[Any, Any]]"]
"""``factory() -> async context manager yielding (read_stream, write_stream)``: one connection per call."""


class McpUnavailable(RuntimeError):
    """The server could not answer: the message says why (crashed, timed out, malformed message, unreachable)."""


@dataclass
class _Connection:
    session: Any
    stop: asyncio.Event
    holder: "asyncio.Task[None]"
    problems: list[str] = field(default_factory=list)
    """Transport-level errors the session saw (a malformed line), newest last."""
    broken: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at the first transport-level error: the request in flight fails at once instead of waiting."""


class McpClient:
    """One MCP server, reached through ``transport`` (see the module docstring); thread-safe, one request at a
    time. ``describe`` names the server in errors (``"local MCP server 'crm'"``)."""

    def __init__(self, transport: TransportFactory, describe: str, *, connect_timeout_s: float,
                 diagnose: Callable[[], str] | None = None) -> None:
        self._transport = transport
        self._diagnose = diagnose
        """What to add to a start failure (a local server's stderr tail)."""
        self.describe = describe
        self.connect_timeout_s = connect_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connection: _Connection | None = None
        self._lock = threading.Lock()
        self.starts = 0
        """Sessions opened so far (a restart after a failure adds one)."""
        self.server_info: Any = None
        """The server's ``InitializeResult`` of the current session (name, version, capabilities)."""

    # -- the private loop --------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"mcp:{self.describe}", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def _submit(self, coroutine: Awaitable[T], timeout_s: float) -> T:
        """Run ``coroutine`` on the private loop; TimeoutError after ``timeout_s`` (the coroutine is cancelled)."""
        loop = self._ensure_loop()

        async def bounded() -> T:
            return await asyncio.wait_for(coroutine, timeout_s)

        future = asyncio.run_coroutine_threadsafe(bounded(), loop)
        try:
            return future.result(timeout_s + CLOSE_TIMEOUT_S)
        except BaseException:
            future.cancel()
            raise

    # -- sessions ----------------------------------------------------------------------------

    async def _open(self) -> _Connection:
        from mcp import ClientSession

        ready: asyncio.Future[_Connection] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        problems: list[str] = []
        broken = asyncio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):  # a line that is not a protocol message, a transport failure
                problems.append(" ".join(f"{type(message).__name__}: {message}".split())[:ERROR_DETAIL_MAX_CHARS])
                broken.set()

        async def hold() -> None:
            try:
                async with self._transport() as (read, write):
                    async with ClientSession(read, write, message_handler=on_message) as session:
                        info = await session.initialize()
                        if not ready.done():
                            self.server_info = info
                            ready.set_result(_Connection(session, stop, task, problems, broken))
                        await stop.wait()
            # broad: whatever the SDK or the transport raised ends this connection; the caller gets it as the reason
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise

        task = asyncio.get_running_loop().create_task(hold())
        try:
            return await ready
        except BaseException:
            task.cancel()
            raise

    async def _close(self, connection: _Connection) -> None:
        connection.stop.set()
        with contextlib.suppress(BaseException):  # closing a broken connection raises whatever broke it
            await asyncio.wait_for(asyncio.shield(connection.holder), CLOSE_TIMEOUT_S)
        if not connection.holder.done():
            connection.holder.cancel()
            with contextlib.suppress(BaseException):  # cancelled on purpose
                await asyncio.wait_for(connection.holder, CLOSE_TIMEOUT_S)

    def _connected(self) -> _Connection:
        if self._connection is not None and not self._connection.holder.done():
            return self._connection
        self._connection = None
        try:
            connection = self._submit(self._open(), self.connect_timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            raise McpUnavailable(f"the {self.describe} did not complete the MCP handshake within "
                                 f"{self.connect_timeout_s:g} s{self._diagnosis()}") from None
        except McpUnavailable:
            raise
        # broad: a server that cannot start or speak MCP raises anything from the SDK; the model gets one sentence
        except Exception as exc:
            raise McpUnavailable(f"the {self.describe} could not be started or reached: "
                                 f"{_root_cause(exc)}{self._diagnosis()}") from None
        self.starts += 1
        self._connection = connection
        return connection

    def _diagnosis(self) -> str:
        detail = self._diagnose() if self._diagnose is not None else ""
        return f" (its log ends: {detail[-ERROR_DETAIL_MAX_CHARS:]})" if detail else ""

    def request(self, what: str, call: Callable[[Any], Awaitable[T]], timeout_s: float) -> T:
        """``call(session)`` on a live session, within ``timeout_s``; McpUnavailable when the connection fails
        (and the session is closed, so the next request starts a fresh one). ``what`` names the request."""
        with self._lock:
            connection = self._connected()
            try:
                return self._submit(_unless_broken(call(connection.session), connection), timeout_s)
            except (TimeoutError, asyncio.TimeoutError):
                self._drop()
                raise McpUnavailable(f"the {self.describe} did not answer {what} within {timeout_s:g} s; it was "
                                     f"stopped and the next call starts it again") from None
            except McpUnavailable as exc:
                self._drop()
                raise McpUnavailable(f"the {self.describe} failed during {what}: {exc}; it was stopped and the "
                                     f"next call starts it again") from None
            # broad: any SDK or transport failure is this connection's failure, reported and restarted
            except Exception as exc:
                problems = list(connection.problems)
                if _is_protocol_answer(exc) and not problems and not connection.holder.done():
                    raise  # the server answered with a JSON-RPC error: the session is fine
                self._drop()
                detail = problems[-1] if problems else _root_cause(exc)
                raise McpUnavailable(f"the {self.describe} failed during {what} ({detail}); it was stopped and "
                                     f"the next call starts it again") from None

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and self._loop is not None:
            with contextlib.suppress(Exception):  # the close is bounded; a server that resists is killed by it
                self._submit(self._close(connection), CLOSE_TIMEOUT_S * 2)

    def close(self) -> None:
        """End the session (a local server is stopped) and the private loop thread."""
        with self._lock:
            self._drop()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(CLOSE_TIMEOUT_S)


async def _unless_broken(request: Awaitable[T], connection: _Connection) -> T:
    """``request``'s result, or McpUnavailable as soon as the connection sees a transport-level error."""
    call = asyncio.ensure_future(request)
    broken = asyncio.ensure_future(connection.broken.wait())
    try:
        await asyncio.wait({call, broken}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (call, broken):
            if not task.done():
                task.cancel()
    if call.done() and not call.cancelled():
        return call.result()
    raise McpUnavailable(f"it sent a message that is not MCP ({connection.problems[-1]})")


def _is_protocol_answer(exc: BaseException) -> bool:
    """``exc`` is the server's JSON-RPC error answer (unknown tool, bad arguments), not a transport failure."""
    from mcp.shared.exceptions import MCPError

    return isinstance(exc, MCPError) and "closed" not in str(exc).lower()


def _root_cause(exc: BaseException) -> str:
    """The innermost meaningful error of ``exc`` (exception groups from task groups unwrapped), one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:ERROR_DETAIL_MAX_CHARS]

