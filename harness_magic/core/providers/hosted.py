"""The kernel's side of the provider host: :class:`HostedTransport` sends each litellm call to a child process.

``import litellm`` costs a kernel about 150 MB that can never be given back; on a shared node most
sessions are idle. With ``provider_host`` on (the default) the kernel never imports litellm: every
completion and every lookup (route, model information, prompt caching, token counts) goes to one
provider host per kernel (:mod:`.host`, a child process started on first use, shared by every
transport and adapter of this process, stopped after ``provider_idle_s`` seconds without a request;
the next request starts it again; an ``%%agent`` cell starts it in the background first,
:meth:`HostedTransport.warm_up`, so litellm's import overlaps the cell's setup). Contract of
:class:`HostedTransport`, the same as
:class:`~harness_magic.core.providers.transport.LiteLLMTransport`'s:

- ``complete`` / ``acomplete`` return the response dict; streamed text reaches ``on_text`` piece by
  piece as the host receives it; failures are the same :class:`ProviderError` subclasses with the same
  attributes, rebuilt from a tagged dict (:func:`~.channel.rebuild_error`: JSON only, nothing read back
  executes, each frame at most :data:`~.channel.FRAME_MAX_BYTES`; anything else is :class:`HostProtocolError`);
- ``notice`` / ``placeholder_for`` as in-process (a placeholder key sent to a local server, said once);
  keys are registered with the scrubber; ``repr`` never shows one;
- the kernel's environment at the time of each request travels with it (a key set later is used);
- an interrupt (KeyboardInterrupt from ``on_text`` or while waiting) closes the connection at once: the
  host closes litellm's stream and serves the next request;
- a host found dead (killed, or exited when idle) is started again by the next request, once, unseen:
  a request the host never acknowledged was never sent to a provider; a host that dies during a
  request is one :class:`ProviderUnreachable` naming it (retryable, as a dropped connection is);
- a model the provider host refused for want of keys, in an environment where that answer must be the same
  (:mod:`.key_record`: same litellm, each variable its check looked at unchanged; no ``api_base``, key or
  ``extra`` given), is refused here with the same error, no host started, and :meth:`HostedTransport.warm_up`
  starts nothing (lookups asked directly still go to the host: they need no key);
- ``extra`` must be JSON (it crosses a process boundary): Python objects for litellm need
  ``provider_host`` off, as do litellm module globals or custom providers registered in the kernel.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections import deque
from typing import IO, Any, Iterator

from harness_magic.core.confinement.owned_dirs import owned_tempdir
from harness_magic.core.providers.channel import (
    DEFAULT_IDLE_S,
    FrameError,
    check_idle_s,
    decode_frame,
    encode_frame,
    frame_length,
    read_frame,
    rebuild_error,
)
from harness_magic.core.providers.errors import ProviderError, ProviderUnreachable
from harness_magic.core.providers.key_record import KeyRefusal, recorded_refusal
from harness_magic.core.providers.transport import MODELS_LIST_TIMEOUT_S, TextCallback, TransportOptions, no_key_error

__all__ = ["HostedTransport", "ProviderHost", "HostProtocolError", "shared_host", "HOST_MODULE",
           "ACK_TIMEOUT_S", "REPLY_GRACE_S", "LOOKUP_TIMEOUT_S", "STDERR_LINES", "STDERR_LINE_MAX_CHARS",
           "LISTEN_BACKLOG", "HOST_URL", "LAST_WORDS_WAIT_S"]

HOST_MODULE = "harness_magic.core.providers.host"
"""The module the host process runs."""
ACK_TIMEOUT_S = 120.0
"""Wait for the host to take a request: a fresh host imports litellm first (2-3 s idle, far more on a busy node)."""
REPLY_GRACE_S = 30.0
"""Beyond the transport's own timeouts, how long the host may go silent during a call before it is called hung."""
LOOKUP_TIMEOUT_S = 60.0
"""Wait for a lookup's answer once the host took it (litellm's tables are local: seconds at most)."""
STDERR_LINES = 40
"""Lines of the host's stderr kept (the latest), to name why a host died; the rest is dropped."""
STDERR_LINE_MAX_CHARS = 500
"""Each kept stderr line is cut to this many characters."""
LISTEN_BACKLOG = 64
SOCKET_PATH_MAX_BYTES = 107
"""The longest path an AF_UNIX socket may be bound to or reached at on Linux (``sun_path``'s 108 bytes with its
NUL). A socket path in a deeper temporary directory is reached through ``/proc/self/fd/<folder's descriptor>``."""
"""Requests that may wait for the host to accept them (a fresh host accepts after importing litellm)."""
LAST_WORDS_WAIT_S = 1.0
"""When a host is found dead, how long its exit and the rest of its stderr are waited for, to name why."""
HOST_URL = "the provider host"
"""How errors about the host process itself name where the call went."""
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
"""The folder holding the ``harness_magic`` package: on the host's PYTHONPATH, whatever the kernel's sys.path."""


class HostProtocolError(ProviderError):
    """The provider host answered something that is not the protocol (a frame too long, not JSON, an unknown
    error class or field): refused unread or unbuilt, the connection dropped; never retried."""


class ProviderHost:
    """One provider host process, started on demand: this process's handle on it.

    :meth:`endpoint` gives a running host's socket (starting one when none runs); requests connect to it.
    The socket lives in a private (0700) temporary folder, bound here and handed to the child as an
    inherited descriptor, so a request can wait in the backlog while the child imports litellm.
    ``argv`` (tests) replaces ``python -m harness_magic.core.providers.host``; ``--fd`` and ``--idle-s``
    are appended.
    """

    def __init__(self, *, idle_s: float = DEFAULT_IDLE_S, argv: list[str] | None = None) -> None:
        self.idle_s = check_idle_s(idle_s)
        self.argv = list(argv) if argv is not None else [sys.executable, "-m", HOST_MODULE]
        self.starts = 0
        """How many host processes this handle started."""
        self._lock = threading.Lock()
        self._dir: str | None = None
        self._dir_fd: int | None = None
        """The private folder held open when its path is too long for a socket (see :meth:`_socket_path`)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._path = ""
        self._generation = 0
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._drainer: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        """The running host's process id (None when none runs)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def last_pid(self) -> int | None:
        """The process id of the host started last, running or not (None before the first start)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def warm_up(self, idle_s: float | None = None) -> bool:
        """Start a host now when none runs, without waiting for it (it imports litellm in its own process while
        this one goes on; a request made meanwhile waits in the socket's backlog); whether one was started.
        ``idle_s`` (default: this handle's) is how long it lives if no request comes."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return False
            self._start(idle_s)
            return True

    def endpoint(self, failed: int | None = None) -> tuple[int, str]:
        """``(generation, socket path)`` of a running host: started when none runs, or again when ``failed``
        names the current generation (a connection to it found nobody)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None or failed == self._generation:
                self._start()
            return self._generation, self._path

    def _start(self, idle_s: float | None = None) -> None:
        if self._dir is None:
            self._dir = owned_tempdir("provider")  # mode 0700
        self._generation += 1
        old, self._path = self._path, self._socket_path(f"host-{self._generation}.sock")
        if old:
            _unlink(old)
        env = dict(os.environ)
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self._path)
            listener.listen(LISTEN_BACKLOG)
            fd = listener.fileno()
            argv = self.argv + ["--fd", str(fd), "--idle-s", repr(idle_s or self.idle_s)]
            proc = subprocess.Popen(argv, pass_fds=(fd,),
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True, env=env)
        finally:
            listener.close()  # the child holds it now: when the child ends, connecting is refused at once
        self._proc = proc
        self.starts += 1
        self._stderr.clear()
        self._drainer = threading.Thread(target=self._drain, args=(proc,), daemon=True, name="provider-host-stderr")
        self._drainer.start()

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        """Keep the host's last stderr lines (bounded), then reap it."""
        stream: IO[bytes] | None = proc.stderr
        if stream is not None:
            for line in stream:
                self._stderr.append(line.decode("utf-8", "replace").rstrip()[:STDERR_LINE_MAX_CHARS])
            stream.close()
        proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()

    def last_words(self) -> str:
        """The last host's last stderr lines, for an error message (empty when it said nothing); a host that
        is ending is given :data:`LAST_WORDS_WAIT_S` to end and have its stderr read."""
        proc, drainer = self._proc, self._drainer
        if proc is not None and drainer is not None:
            try:
                proc.wait(LAST_WORDS_WAIT_S)
            except subprocess.TimeoutExpired:
                pass  # still running (slow, not dead): what it said so far
            else:
                drainer.join(LAST_WORDS_WAIT_S)
        lines = [line for line in list(self._stderr)[-3:] if line.strip()]
        return f"; its stderr ended: {' | '.join(lines)}" if lines else ""

    def _socket_path(self, name: str) -> str:
        """Where the socket ``name`` in the private folder is bound and reached: its path, or, when that is longer
        than :data:`SOCKET_PATH_MAX_BYTES` (a deep ``TMPDIR``), the same file through this process's descriptor
        of the folder (only this process connects; the host is handed the bound socket itself)."""
        assert self._dir is not None
        path = os.path.join(self._dir, name)
        if len(os.fsencode(path)) <= SOCKET_PATH_MAX_BYTES:
            return path
        if self._dir_fd is None:
            self._dir_fd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{self._dir_fd}/{name}"

    def stop(self) -> None:
        """End the running host now (a later request starts a new one)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """:meth:`stop`, and remove the private folder."""
        self.stop()
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


_SHARED: ProviderHost | None = None
_SHARED_LOCK = threading.Lock()


def shared_host() -> ProviderHost:
    """This process's provider host handle (one per kernel, shared by every hosted transport; closed at exit)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ProviderHost()
            atexit.register(_SHARED.close)
        return _SHARED


class HostedTransport(TransportOptions):
    """Sends each call to the provider host; same contract as ``LiteLLMTransport`` (see the module docstring)."""

    def __init__(self, *, idle_s: float = DEFAULT_IDLE_S, host: ProviderHost | None = None, **options: Any) -> None:
        super().__init__(**options)
        for name, value in self.extra.items():
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                raise ValueError(f"extra[{name!r}] is a {type(value).__name__}, which cannot be sent to the provider "
                                 "host (JSON values only); set provider_host False to hand litellm Python "
                                 "objects") from None
        self.idle_s = check_idle_s(idle_s)
        self.host = host if host is not None else shared_host()

    def warm_up(self, model: str | None = None) -> bool:
        """Start the provider host in the background when none runs (:meth:`ProviderHost.warm_up`, living
        ``idle_s`` without a request); whether one was started. Nothing is started for a ``model`` the
        missing-key record refuses (:meth:`recorded_refusal`): its calls never reach the host."""
        if model is not None and self.recorded_refusal(model) is not None:
            return False
        return self.host.warm_up(self.idle_s)

    def recorded_refusal(self, model: str) -> KeyRefusal | None:
        """The provider host's recorded refusal of ``model`` for want of keys, when it applies to this transport
        unchanged (:func:`~.key_record.recorded_refusal`; never when ``api_base``, a key or ``extra`` is given)."""
        if self.api_base is not None or self._api_key is not None or self.extra:
            return None
        return recorded_refusal(model)

    def _refuse_recorded(self, payload: dict[str, Any]) -> None:
        """Raise the no-key error the host would, when the missing-key record says it would."""
        model = payload.get("model")
        refusal = self.recorded_refusal(model) if isinstance(model, str) else None
        if refusal is not None:
            raise no_key_error(refusal.model, refusal.missing)

    # -- the exchange --------------------------------------------------------------------------------------

    def _frame(self, op: str, **fields: Any) -> bytes:
        try:
            return encode_frame({"op": op, "env": dict(os.environ), "idle_s": self.idle_s, **fields})
        except FrameError as exc:
            raise ProviderError(f"the request cannot be sent to the provider host: {exc}", request_sent=False) from None

    def _complete_frame(self, payload: dict[str, Any]) -> bytes:
        options = {"api_base": self.api_base, "api_key": self._api_key, "stream": self.stream,
                   "timeout_s": self.timeout_s, "extra": self.extra}
        return self._frame("complete", options=options, payload=payload)

    def _gap_s(self) -> float:
        """The longest silence during a call: a request, its unstreamed retry and a model list, plus grace."""
        return 2 * self.timeout_s + MODELS_LIST_TIMEOUT_S + REPLY_GRACE_S

    def _unstarted(self, why: str) -> ProviderUnreachable:
        return ProviderUnreachable(f"{HOST_URL} could not be reached twice ({why}){self.host.last_words()}",
                                   url=HOST_URL, request_sent=False)

    @staticmethod
    def _out_of_protocol(detail: object) -> HostProtocolError:
        return HostProtocolError(f"{HOST_URL} answered out of protocol: {detail}")

    def _died(self) -> ProviderUnreachable:
        return ProviderUnreachable(f"{HOST_URL} ended during the request (the connection closed before an "
                                   f"answer){self.host.last_words()}", url=HOST_URL, retryable=True,
                                   request_sent=True)

    def _open(self, frame: bytes) -> socket.socket:
        """A connection whose request the host took (acknowledged); a host found dead is started again, once."""
        failed: int | None = None
        why = ""
        for _attempt in range(2):
            generation, path = self.host.endpoint(failed)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(ACK_TIMEOUT_S)
                sock.connect(path)
                sock.sendall(frame)
                ack = read_frame(sock)
            except socket.timeout:
                sock.close()
                raise ProviderUnreachable(f"{HOST_URL} did not take the request within {ACK_TIMEOUT_S:g} s"
                                          f"{self.host.last_words()}", url=HOST_URL, retryable=True,
                                          request_sent=False) from None
            except (ConnectionError, FileNotFoundError) as exc:  # nobody listens: the host is gone
                sock.close()
                failed, why = generation, type(exc).__name__
                continue
            except FrameError as exc:
                sock.close()
                raise self._out_of_protocol(exc) from None
            except BaseException:
                sock.close()
                raise
            if ack is None:  # it closed without taking the request (it was exiting): nothing was sent
                sock.close()
                failed, why = generation, "closed before taking the request"
                continue
            if not isinstance(ack.get("ack"), int):
                sock.close()
                raise self._out_of_protocol(f"expected an ack, got fields {sorted(ack)[:5]}")
            return sock
        raise self._unstarted(why)

    def _frames(self, sock: socket.socket, wait_s: float) -> Iterator[dict[str, Any]]:
        """The frames the host sends after its ack; ProviderError when it dies, hangs or breaks the protocol."""
        sock.settimeout(wait_s)
        while True:
            try:
                frame = read_frame(sock)
            except socket.timeout:
                raise ProviderUnreachable(f"{HOST_URL} sent nothing for {wait_s:g} s", url=HOST_URL, retryable=True,
                                          request_sent=True) from None
            except ConnectionError:
                frame = None
            except FrameError as exc:
                raise self._out_of_protocol(exc) from None
            if frame is None:
                raise self._died()
            yield frame

    def _final(self, frame: dict[str, Any]) -> dict[str, Any]:
        """The response a final frame holds; its error raised as the ProviderError it names."""
        placeholder = frame.get("placeholder_for")
        if isinstance(placeholder, str) and self.placeholder_for is None:
            self.placeholder_for = placeholder
            notice = frame.get("notice")
            self.notice = notice if isinstance(notice, str) else None
        if isinstance(frame.get("done"), dict):
            done: dict[str, Any] = frame["done"]
            return done
        if "error" in frame:
            try:
                error = rebuild_error(frame["error"])
            except FrameError as exc:
                raise self._out_of_protocol(exc) from None
            raise error
        raise self._out_of_protocol(f"unexpected fields {sorted(frame)[:5]}")

    def _piece(self, frame: dict[str, Any], on_text: TextCallback | None) -> bool:
        """Whether ``frame`` was a streamed piece (handed to ``on_text``)."""
        if set(frame) != {"text"}:
            return False
        if not isinstance(frame["text"], str):
            raise self._out_of_protocol("a text piece that is not text")
        if on_text is not None:
            on_text(frame["text"])
        return True

    # -- the transport ---------------------------------------------------------------------------------------

    def complete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]:
        self._refuse_recorded(payload)
        sock = self._open(self._complete_frame(payload))
        try:  # an interrupt anywhere below closes the connection at once: the host stops the stream
            for frame in self._frames(sock, self._gap_s()):
                if not self._piece(frame, on_text):
                    return self._final(frame)
            raise AssertionError("unreachable: _frames ends only by raising")
        finally:
            sock.close()

    async def acomplete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]:
        self._refuse_recorded(payload)
        frame = self._complete_frame(payload)
        failed: int | None = None
        why = ""
        for _attempt in range(2):
            generation, path = self.host.endpoint(failed)
            try:
                reader, writer = await asyncio.open_unix_connection(path)
            except (ConnectionError, FileNotFoundError) as exc:  # nobody listens: the host is gone
                failed, why = generation, type(exc).__name__
                continue
            try:
                writer.write(frame)
                await writer.drain()
                ack = await self._aread(reader, ACK_TIMEOUT_S, acked=False)
                if ack is None:
                    failed, why = generation, "closed before taking the request"
                    continue
                if not isinstance(ack.get("ack"), int):
                    raise self._out_of_protocol("expected an ack")
                while True:
                    reply = await self._aread(reader, self._gap_s(), acked=True)
                    if reply is None:
                        raise self._died()
                    if not self._piece(reply, on_text):
                        return self._final(reply)
            except ConnectionError as exc:
                failed, why = generation, type(exc).__name__
                continue
            finally:
                writer.close()
        raise self._unstarted(why)

    async def _aread(self, reader: asyncio.StreamReader, wait_s: float, *, acked: bool) -> dict[str, Any] | None:
        """The next frame (None: the host closed the connection); errors as :meth:`_frames` names them."""
        try:
            header = await asyncio.wait_for(reader.readexactly(4), wait_s)
            body = await asyncio.wait_for(reader.readexactly(frame_length(header)), wait_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        except TimeoutError:
            raise ProviderUnreachable(f"{HOST_URL} sent nothing for {wait_s:g} s", url=HOST_URL, retryable=True,
                                      request_sent=acked) from None
        except FrameError as exc:
            raise self._out_of_protocol(exc) from None
        try:
            return decode_frame(body)
        except FrameError as exc:
            raise self._out_of_protocol(exc) from None

    # -- lookups (ModelLookups) ----------------------------------------------------------------------------

    def _lookup(self, op: str, model: str, **fields: Any) -> Any:
        sock = self._open(self._frame(op, model=model, **fields))
        try:
            for frame in self._frames(sock, LOOKUP_TIMEOUT_S):
                if "value" in frame:
                    return frame["value"]
                if isinstance(frame.get("missing"), str):
                    raise LookupError(frame["missing"])
                return self._final(frame)  # an error frame raises; anything else is out of protocol
            raise AssertionError("unreachable: _frames ends only by raising")
        finally:
            sock.close()

    def route(self, model: str) -> str:
        """The litellm provider for ``model``; :class:`ModelRouteError` when litellm has none."""
        return str(self._lookup("route", model))

    def supports_caching(self, model: str) -> bool:
        """Whether litellm's model table says ``model`` caches prompts (LookupError when it does not know)."""
        return bool(self._lookup("supports_caching", model))

    def model_info(self, model: str) -> dict[str, Any]:
        """litellm's model information for ``model`` (LookupError when it has none)."""
        info = self._lookup("model_info", model)
        if not isinstance(info, dict):
            raise self._out_of_protocol("model information is not an object")
        return info

    def token_counts(self, model: str, batches: list[list[dict[str, Any]]]) -> list[int]:
        """litellm's token count of each message list (LookupError when it has no tokenizer for ``model``)."""
        counts = self._lookup("token_count", model, batches=batches)
        if not isinstance(counts, list) or len(counts) != len(batches) \
                or not all(type(n) is int for n in counts):
            raise self._out_of_protocol(f"token counts are not {len(batches)} whole numbers")
        return counts
