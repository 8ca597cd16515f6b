"""The provider host process: litellm imported here, once, serving the kernel's provider calls over a private socket.

Run as ``python -m harness_magic.core.providers.host --fd N --idle-s S`` by
:class:`~harness_magic.core.providers.hosted.ProviderHost` (the kernel side), which binds the listening
Unix socket in a 0700 directory and hands it over as fd ``N``. Contract:

- one connection per request, each served on its own thread (subagents call in parallel); a request is
  one frame (:mod:`.channel`), answered first by ``{"ack": pid}`` (the request is taken: a connection
  that ends before it was never served and may be sent again), then, for ``complete``, a ``{"text": ...}``
  frame per streamed piece as it arrives, then one final frame: ``{"done": response}`` or
  ``{"error": tagged}``, with ``placeholder_for`` and ``notice`` (a placeholder key was sent);
  lookups (``route``, ``model_info``, ``supports_caching``, ``token_count``) answer ``{"value": ...}``,
  ``{"missing": why}`` (litellm does not know) or, for ``route``, ``{"error": tagged}``;
- every call goes through :class:`~harness_magic.core.providers.transport.LiteLLMTransport` and
  :class:`~harness_magic.core.providers.transport.LiteLLMLookups`, exactly as in the kernel when
  ``provider_host`` is off; the kernel's environment (``env``) is the process's for each request, so a key
  set after the host started is used; a call refused for want of keys is written to the missing-key record
  (:mod:`.key_record`) that later kernels read before starting a host;
- a peer that closes mid-stream (an interrupt in the kernel) stops the request when the next piece
  arrives from the provider (the host learns of the closed peer by writing to it): the stream is closed
  (litellm's connection goes back to its pool) and the host serves the next request;
- it holds as little as it can: openai's resource index is left unexecuted (each resource
  loads on first use), openai's type indexes resolve each name on first use (:class:`LazyIndexes`: the type
  modules litellm never reads are never loaded), httpx's command-line client is left unloaded
  (:data:`DEFERRED_CALLABLES`), what litellm's import leaves behind unread is dropped
  (:data:`IMPORT_LEFTOVERS`), litellm's import is frozen out of the cyclic collector, a loaded tokenizer drops
  its Python copy of the merge table (its native copy counts), and freed heap goes back to the system after
  startup and after each burst of requests (once none came for ``POLL_S``);
- it exits after ``idle_s`` seconds with no request in flight (each request may change ``idle_s``),
  when its stdin reaches end of file (the kernel is gone) or when its parent changes (then it first removes the
  kernel's private folder holding its socket, :func:`remove_orphaned_folder`: a killed kernel cannot); it ignores SIGINT
  (the stop button interrupts the kernel's process group) and never writes to stdout (its stdout is
  /dev/null; its stderr is read by the kernel into a bounded buffer).
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import signal
import socket
import sys
import threading
import time
from types import ModuleType
from typing import Any, Callable, Sequence

from harness_magic.core.confinement.owned_dirs import owner_pid
from harness_magic.core.confinement.heap import trim_c_heap
from harness_magic.core.providers.channel import FrameError, read_frame, send_frame, tag_error
from harness_magic.core.providers.errors import ProviderError
from harness_magic.core.providers.transport import LiteLLMLookups, LiteLLMTransport, check_model_route, import_litellm

__all__ = ["HostServer", "PeerClosed", "main", "prepare", "remove_orphaned_folder", "defer_package_index",
           "shed_tokenizer_tables",
           "give_back_heap", "index_names", "LazyIndexes", "drop_import_leftovers", "defer_callable",
           "bind_stand_ins", "POLL_S",
           "MISSING_TEXT_MAX_CHARS", "TRANSPORT_OPTIONS", "DEFERRED_INDEXES", "LAZY_INDEXES", "IMPORT_LEFTOVERS",
           "DEFERRED_CALLABLES"]

POLL_S = 0.5
"""How often the accept loop wakes to check idleness and its parent."""
MISSING_TEXT_MAX_CHARS = 300
"""A failed lookup's reason is cut to this many characters."""
TRANSPORT_OPTIONS = ("api_base", "api_key", "stream", "timeout_s", "extra")
"""The :class:`LiteLLMTransport` options a ``complete`` request may carry."""
DEFERRED_INDEXES = ("openai.resources",)
"""Packages whose ``__init__`` imports every submodule but whose users import the submodule they need: openai's
client reaches each resource through a lazy property (``client.chat`` imports ``openai.resources.chat``), yet the
index runs first and loads all ~450 resource modules (13 MB). Registered unexecuted (:func:`defer_package_index`)."""
LAZY_INDEXES = ("openai.types",)
"""Packages, with every package below them, whose ``__init__`` only re-exports names from its own submodules
(``from .chat_completion import ChatCompletion as ChatCompletion``) and whose names are imported one by one
(``from openai.types.chat import ChatCompletion``): each index resolves a name on first use, loading the one
submodule that defines it (:class:`LazyIndexes`). Of openai's 776 type modules litellm's import loads 323:
10 MB less in the host."""
IMPORT_LEFTOVERS = (("litellm.utils", "json_data"),)
"""Module globals litellm leaves behind at import and never reads again, dropped once it is imported
(:func:`drop_import_leftovers`): the parsed Anthropic tokenizer file (8 MB), kept beside the text made from it
(``claude_json_str``, which its tokenizer reads)."""
DEFERRED_CALLABLES = (("httpx._main", "main"),)
"""Modules imported only so that one callable of theirs can be offered, which the host never calls: httpx
binds ``httpx.main``, its command-line client, and so imports click, rich and pygments (5 MB, 96 modules)
at its own import. Each is registered as a stand-in (:func:`defer_callable`) that loads the real module when
the callable is called or any other name of it is read."""
_LOOKUPS = LiteLLMLookups()


def index_names(source: str) -> dict[str, tuple[str, str | None]] | None:
    """``{name: (submodule, attribute)}`` of a package ``__init__`` made only of re-exports from its own
    submodules (``from .x import A as B``; ``from . import x``: attribute None), a docstring and ``from
    __future__`` lines; None for any other source (it runs as written)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__" and node.level == 0:
            continue
        if not isinstance(node, ast.ImportFrom) or node.level != 1 or any(a.name == "*" for a in node.names):
            return None
        for alias in node.names:
            if node.module is None:
                names[alias.asname or alias.name] = (alias.name, None)
            else:
                names[alias.asname or alias.name] = (node.module, alias.name)
    return names


class _LazyIndexLoader(importlib.abc.Loader):
    """Runs no index: gives the package a module ``__getattr__`` that imports the submodule defining a name."""

    def __init__(self, names: dict[str, tuple[str, str | None]]) -> None:
        self.names = names

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        names, package = self.names, module.__name__

        def resolve(name: str) -> Any:
            if name not in names:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            submodule, attribute = names[name]
            found = importlib.import_module(f"{package}.{submodule}")
            value = found if attribute is None else getattr(found, attribute)
            module.__dict__[name] = value  # asked once
            return value

        module.__dict__.update(__getattr__=resolve, __all__=list(names),
                               __dir__=lambda: sorted(set(module.__dict__) | set(names)))


class LazyIndexes(importlib.abc.MetaPathFinder):
    """Finds the packages under ``prefixes`` whose ``__init__`` is an index (:func:`index_names`) and loads
    them with nothing run: each name is resolved on first use (``from pkg import Name`` included); ``import *``
    gets every name (so loads everything). Any other package or module under them loads as usual."""

    def __init__(self, prefixes: Sequence[str]) -> None:
        self.prefixes = tuple(prefixes)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == prefix or fullname.startswith(prefix + ".") for prefix in self.prefixes):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.submodule_search_locations or not isinstance(spec.origin, str) \
                or not spec.origin.endswith("__init__.py"):
            return spec
        try:
            with open(spec.origin, encoding="utf-8") as source:
                names = index_names(source.read())
        except (OSError, UnicodeDecodeError):
            return spec
        if names is None:
            return spec
        lazy = importlib.machinery.ModuleSpec(fullname, _LazyIndexLoader(names), origin=spec.origin,
                                              is_package=True)
        lazy.submodule_search_locations = spec.submodule_search_locations
        lazy.has_location = True
        return lazy


def defer_callable(module_name: str, attribute: str) -> bool:
    """Register a stand-in for module ``module_name`` (not imported yet) whose ``attribute`` is a function that
    loads the real module (replacing the stand-in in ``sys.modules``) and calls the real ``attribute``; reading
    any other name loads it too. False (nothing done) when the module is already imported. Its package, once
    imported, is given the stand-in as an attribute by :func:`bind_stand_ins` (the import system does that
    only for a module it loads)."""
    if module_name in sys.modules:
        return False
    parent, _, _child = module_name.rpartition(".")
    stand_in = ModuleType(module_name, f"Stand-in for {module_name}: loaded when used (the provider host).")
    lock = threading.Lock()

    def real() -> ModuleType:
        with lock:
            if sys.modules.get(module_name) is stand_in:
                del sys.modules[module_name]
            module = importlib.import_module(module_name)
            stand_in.__dict__.pop("__getattr__", None)
            return module

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(real(), attribute)(*args, **kwargs)

    def other(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return getattr(real(), name)

    call.__name__ = call.__qualname__ = attribute
    stand_in.__dict__.update({attribute: call, "__getattr__": other, "__package__": parent})
    sys.modules[module_name] = stand_in
    return True


def bind_stand_ins() -> None:
    """Each stand-in of :data:`DEFERRED_CALLABLES` made an attribute of its package, when both are imported
    (``import httpx._main`` then ``httpx._main.main`` works as with the real module)."""
    for module_name, _attribute in DEFERRED_CALLABLES:
        parent, _, child = module_name.rpartition(".")
        if parent in sys.modules and module_name in sys.modules and child not in sys.modules[parent].__dict__:
            setattr(sys.modules[parent], child, sys.modules[module_name])


def drop_import_leftovers() -> int:
    """Drop each of :data:`IMPORT_LEFTOVERS` still present; how many were dropped."""
    dropped = 0
    for module_name, attribute in IMPORT_LEFTOVERS:
        module = sys.modules.get(module_name)
        if module is not None and attribute in module.__dict__:
            del module.__dict__[attribute]
            dropped += 1
    return dropped


def defer_package_index(name: str) -> bool:
    """Register package ``name`` without running its ``__init__``: its submodules import as usual (the package's
    path is set); a name only the index defines runs the index then (once), so nothing
    that reads it breaks. False (nothing done) when ``name`` is already imported or is not a package."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return False
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    done = threading.RLock()

    def index_attribute(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        with done:
            if module.__dict__.get("__getattr__") is index_attribute:
                del module.__dict__["__getattr__"]
                loader.exec_module(module)  # the index, once: every name it defines is then in the module
        try:
            return module.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    module.__dict__["__getattr__"] = index_attribute
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return True


def shed_tokenizer_tables() -> int:
    """Drop the Python copy of each loaded tiktoken encoding's merge table (the native encoder built from it
    counts and encodes; tiktoken reads the copy only to pickle an encoding it has not registered, and these are
    registered: pickled by name). Returns how many were dropped (cl100k: 15 MB, o200k: 30 MB)."""
    registry = sys.modules.get("tiktoken.registry")
    encodings = getattr(registry, "ENCODINGS", None)
    if not isinstance(encodings, dict):
        return 0
    dropped = 0
    for encoding in list(encodings.values()):
        if isinstance(getattr(encoding, "_mergeable_ranks", None), dict) and encoding._mergeable_ranks:
            encoding._mergeable_ranks = {}
            dropped += 1
    return dropped


def give_back_heap() -> None:
    """Collect, then hand the C heap's free pages back to the system
    (:func:`~harness_magic.core.confinement.heap.trim_c_heap`: glibc's ``malloc_trim``; elsewhere only the
    collection)."""
    gc.collect()
    trim_c_heap()


class PeerClosed(BaseException):
    """The kernel closed the connection (an interrupt): unwinds the request past ``except Exception`` handlers,
    through the transport's ``finally`` that closes litellm's stream."""


class HostServer:
    """The accept loop, the requests in flight and the idle clock."""

    def __init__(self, listener: socket.socket, idle_s: float) -> None:
        self.listener = listener
        self.idle_s = idle_s
        self.parent = os.getppid()
        self._lock = threading.Lock()
        self._env_lock = threading.Lock()
        self._active = 0
        self._last = time.monotonic()
        self._closing = False
        self._served = False
        self._defaults = {"LITELLM_LOCAL_MODEL_COST_MAP": os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True")}

    def serve(self) -> None:
        """Accept requests until idle or orphaned; returns with the listener closed."""
        self.listener.settimeout(POLL_S)
        try:
            while True:
                try:
                    conn, _ = self.listener.accept()
                except socket.timeout:
                    if self._should_exit():
                        return
                    self._tidy()
                    continue
                with self._lock:
                    if self._closing:
                        conn.close()
                        continue
                    self._active += 1
                threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()
        finally:
            self.listener.close()

    def _tidy(self) -> None:
        """After a burst of requests (none for :data:`POLL_S`), what they loaded or built and no longer need goes
        back to the system: a tokenizer's Python table, the heap's free pages (a 1 MB prompt left 4 MB)."""
        with self._lock:
            if not self._served or self._active:
                return
            self._served = False
        shed_tokenizer_tables()
        give_back_heap()

    def _should_exit(self) -> bool:
        with self._lock:
            orphaned = os.getppid() != self.parent
            if orphaned or (self._active == 0 and time.monotonic() - self._last >= self.idle_s):
                self._closing = True
            return self._closing

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            request = read_frame(conn)
            if request is None:
                return
            send_frame(conn, {"ack": os.getpid()})
            send_frame(conn, self._answer(request, conn))
        except (OSError, PeerClosed):
            pass  # the kernel went away (an interrupt, or it ended): nothing to answer
        except FrameError as exc:
            try:
                send_frame(conn, {"error": tag_error(ProviderError(f"the provider host refused the request: {exc}"))})
            except OSError:
                pass
        finally:
            conn.close()
            with self._lock:
                self._active -= 1
                self._last = time.monotonic()
                self._served = True

    def _adopt(self, request: dict[str, Any]) -> None:
        """The request's environment becomes the process's (keys set since the host started included)."""
        idle_s = request.get("idle_s")
        if isinstance(idle_s, (int, float)) and not isinstance(idle_s, bool) and idle_s > 0:
            self.idle_s = float(idle_s)
        env = request.get("env")
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            return
        wanted = {**self._defaults, **env}
        with self._env_lock:
            for name in [name for name in os.environ if name not in wanted]:
                del os.environ[name]
            for name, value in wanted.items():
                if os.environ.get(name) != value:
                    os.environ[name] = value

    def _answer(self, request: dict[str, Any], conn: socket.socket) -> dict[str, Any]:
        self._adopt(request)
        op = request.get("op")
        if op == "complete":
            return self._complete(request, conn)
        model = request.get("model")
        if not isinstance(model, str):
            raise FrameError(f"request {str(op)[:40]!r} needs a model (text)")
        if op == "route":
            try:
                return {"value": check_model_route(model)}
            except ProviderError as exc:
                return {"error": tag_error(exc)}
        lookups: dict[str, Callable[[], Any]] = {
            "model_info": lambda: _LOOKUPS.model_info(model),
            "supports_caching": lambda: _LOOKUPS.supports_caching(model),
            "token_count": lambda: _LOOKUPS.token_counts(model, request.get("batches") or []),
        }
        if op not in lookups:
            raise FrameError(f"unknown request {str(op)[:40]!r}; known: complete, route, {', '.join(lookups)}")
        try:
            return {"value": lookups[op]()}
        # broad: litellm's lookups fail in their own ways for a model they do not know; the kernel falls back
        except Exception as exc:
            return {"missing": f"{type(exc).__name__}: {exc}"[:MISSING_TEXT_MAX_CHARS]}

    def _complete(self, request: dict[str, Any], conn: socket.socket) -> dict[str, Any]:
        options = request.get("options")
        payload = request.get("payload")
        if not isinstance(options, dict) or set(options) - set(TRANSPORT_OPTIONS) or not isinstance(payload, dict):
            raise FrameError(f"a complete request needs a payload and options among {', '.join(TRANSPORT_OPTIONS)}")
        transport = LiteLLMTransport(record_refusals=True, **options)  # a refusal for want of keys is written down

        def on_text(piece: str) -> None:
            try:
                send_frame(conn, {"text": piece})
            except OSError:
                raise PeerClosed from None

        reply: dict[str, Any]
        try:
            reply = {"done": transport.complete(payload, on_text)}
        except ProviderError as exc:
            reply = {"error": tag_error(exc)}
        # broad: a failure the transport does not map (a bad option, a bug) still answers as one ProviderError
        except Exception as exc:
            reply = {"error": tag_error(ProviderError(
                f"the provider host could not serve the request: {type(exc).__name__}: {exc}"))}
        reply.update(placeholder_for=transport.placeholder_for, notice=transport.notice)
        return reply


def prepare() -> Any:
    """litellm imported as the host holds it: openai's resource index deferred, its type indexes lazy and
    httpx's command-line client left out (:data:`DEFERRED_INDEXES`, :data:`LAZY_INDEXES`,
    :data:`DEFERRED_CALLABLES`), no cyclic collection during the import (each one walked
    the ~300,000 long-lived objects made so far: a fifth of the import's CPU time), its leftovers dropped
    (:data:`IMPORT_LEFTOVERS`), then one collection, the heap given back, and the import frozen out of the
    collector for good."""
    gc.disable()
    try:
        sys.meta_path.insert(0, LazyIndexes(LAZY_INDEXES))
        for module_name, attribute in DEFERRED_CALLABLES:
            defer_callable(module_name, attribute)
        for name in DEFERRED_INDEXES:
            defer_package_index(name)
        litellm = import_litellm()
        bind_stand_ins()
        drop_import_leftovers()
    finally:
        give_back_heap()
        gc.freeze()
        gc.enable()
    return litellm


def remove_orphaned_folder(socket_path: str, kernel_pid: int) -> bool:
    """Remove the folder holding ``socket_path`` when it is the private folder ``kernel_pid`` made for its hosts
    (:func:`~harness_magic.core.confinement.owned_dirs.owned_tempdir`, named after that pid); whether it was.
    Called once the kernel is gone: a kernel that exits removes it itself, a killed one leaves it to us."""
    folder = os.path.dirname(socket_path)
    if not folder or owner_pid(os.path.basename(folder)) != kernel_pid:
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def _exit_when_stdin_closes(socket_path: str, kernel_pid: int) -> None:
    """End the process when the kernel is gone (its end of our stdin closed), removing its folder first."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        remove_orphaned_folder(socket_path, kernel_pid)
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """Serve on the inherited listening socket until idle, orphaned or the kernel is gone."""
    parser = argparse.ArgumentParser(description="harness_magic's provider host (started by the kernel).")
    parser.add_argument("--fd", type=int, required=True, help="the listening Unix socket, inherited")
    parser.add_argument("--idle-s", type=float, required=True, help="exit after this many seconds without a request")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listener = socket.socket(fileno=args.fd)
    kernel_pid, socket_path = os.getppid(), listener.getsockname()
    threading.Thread(target=_exit_when_stdin_closes, args=(socket_path, kernel_pid), daemon=True).start()
    prepare()
    HostServer(listener, args.idle_s).serve()
    if os.getppid() != kernel_pid:  # orphaned, not idle
        remove_orphaned_folder(socket_path, kernel_pid)
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: litellm's clients need none, and nothing waits for it


if __name__ == "__main__":
    main()
