"""Friendly checks: an AST pre-check and a PEP 578 audit hook.

**Neither is a security boundary.** Code that shares an interpreter with these
checks can get around them (string-built attribute names, re-exported modules,
C extensions). They exist so that a model which tries something unavailable
gets a clear message instead of a confusing OS error, and so the in-process mode
stops honest mistakes. The boundary is the worker process and its OS layers.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator

__all__ = [
    "ALLOWED_IMPORTS",
    "SandboxViolation",
    "precheck",
    "precheck_tree",
    "install_audit_hook",
    "audit_active",
]

ALLOWED_IMPORTS = frozenset({
    "pandas", "numpy", "pyarrow", "matplotlib", "math", "cmath", "statistics", "json", "re", "datetime",
    "collections", "itertools", "functools", "operator", "string", "textwrap", "decimal", "fractions",
    "random", "typing", "dataclasses", "enum", "heapq", "bisect", "copy", "pprint", "calendar", "time",
    "zoneinfo", "warnings", "io", "csv", "uuid", "hashlib", "base64", "difflib", "unicodedata",
    "numbers", "abc", "contextlib", "array", "secrets", "locale", "struct", "binascii", "html",
    "scipy", "sklearn", "statsmodels", "seaborn", "dateutil", "pytz",
})
"""Top-level modules model code may import: data work, not system access."""

_FORBIDDEN_CALLS = frozenset({
    "eval", "exec", "compile", "__import__", "open", "breakpoint", "input", "globals", "vars",
    "get_ipython", "exit", "quit", "help",
})

_FORBIDDEN_ATTRIBUTES = frozenset({
    "__globals__", "__builtins__", "__subclasses__", "__bases__", "__base__", "__mro__", "__code__",
    "__closure__", "__dict__", "__getattribute__", "__reduce__", "__reduce_ex__", "__class__",
    "__self__", "__func__", "__module__", "__loader__", "__spec__", "__import__", "__traceback__",
    "__setattr__", "__delattr__", "__getattr__", "__kwdefaults__", "__defaults__", "__objclass__",
    "f_globals", "f_locals", "f_back", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame",
    "gi_code", "cr_frame", "ag_frame", "co_code", "func_globals", "_getframe", "modules",
    "system", "popen", "environ", "getenv", "compat",
})


class SandboxViolation(PermissionError):
    """Model code asked for something the sandbox does not offer (a friendly refusal)."""


def precheck(code: str) -> str | None:
    """A friendly message when the code plainly reaches for unavailable features, else None."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None  # compiling reports the syntax error with its location
    return precheck_tree(tree)


_LEAF_TYPES = frozenset({"identifier", "string", "constant", "int",
                         "expr_context", "boolop", "operator", "unaryop", "cmpop"})
"""ASDL field types that hold no node worth visiting: text and numbers, and the singletons with no fields of
their own (``Load``, ``Add``, ``Eq``...) that no check looks at."""

_SIGNATURE = re.compile(r"(\w+)\((.*)\)")
"""A node class's first docstring line: its ASDL signature, ``Name(identifier id, expr_context ctx)``."""

_CHECKED = (ast.Name, ast.Attribute, ast.Constant, ast.Import, ast.ImportFrom)
"""The node classes :func:`precheck_tree` looks at (and their subclasses): every other node is only walked
through, never looked at."""

_CLASSES: dict[type[ast.AST], tuple[tuple[tuple[str, bool], ...] | None, bool]] = {}
"""Node class -> (its fields that hold nodes, each with whether it holds a list, ``None`` to read every field;
whether it is one of :data:`_CHECKED` or a subclass of one), found once per class."""


def _branches_of(kind: type[ast.AST]) -> tuple[tuple[str, bool], ...] | None:
    """The fields of node class ``kind`` that hold nodes to visit, from its ASDL signature; None when the
    signature is not there or does not name exactly its ``_fields`` (every field is then read)."""
    match = _SIGNATURE.fullmatch((kind.__doc__ or "").split("\n", 1)[0])
    if match is None or match.group(1) != kind.__name__:
        return None
    declared = [part.split(" ") for part in match.group(2).split(", ")] if match.group(2) else []
    if any(len(part) != 2 for part in declared) or [name for _, name in declared] != list(kind._fields):
        return None
    return tuple((name, of.endswith("*")) for of, name in declared if of.rstrip("*?") not in _LEAF_TYPES)


def _nodes(tree: ast.AST, *, checked_only: bool = False) -> Iterator[ast.AST]:
    """The nodes of ``tree`` (one :func:`ast.parse` made) in :func:`ast.walk`'s order (breadth first), without
    the leaf singletons (``Load``, ``Add``...) and without reading the fields that hold text or numbers: each
    node class's fields that hold nodes are read once from its ASDL signature (:func:`_branches_of`).
    ``checked_only``: only the nodes of the classes the pre-check looks at (:data:`_CHECKED`), in that order;
    the others are walked through without being handed out."""
    todo = deque([tree])
    take, add = todo.popleft, todo.append
    known = _CLASSES
    while todo:
        node = take()
        kind = type(node)
        try:
            branches, looked_at = known[kind]
        except KeyError:
            branches, looked_at = known[kind] = (_branches_of(kind), issubclass(kind, _CHECKED))
        if looked_at or not checked_only:
            yield node
        if branches is None:  # a class without its signature: every field read, as ast.walk does
            for name in node._fields:
                value = getattr(node, name, None)
                if isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.AST):
                            add(item)
                elif isinstance(value, ast.AST):
                    add(value)
            continue
        for name, many in branches:
            value = getattr(node, name, None)
            if many:
                for item in value or ():
                    if isinstance(item, ast.AST):  # a dict's ``**`` has no key (None)
                        add(item)
            elif isinstance(value, ast.AST):
                add(value)


_DUNDER_ATTRIBUTES = tuple(name for name in _FORBIDDEN_ATTRIBUTES if name.startswith("__"))


def precheck_tree(tree: ast.AST) -> str | None:
    """:func:`precheck` of code already parsed (the worker parses each call's code once)."""
    for node in _nodes(tree, checked_only=True):
        if isinstance(node, ast.Name):
            if node.id in _FORBIDDEN_CALLS:
                return f"{node.id!r} is not available in the sandbox: work with the cached handles instead."
        elif isinstance(node, ast.Attribute):
            if node.attr in _FORBIDDEN_ATTRIBUTES:
                return f"attribute {node.attr!r} is not available in the sandbox."
        elif isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, str) and "__" in value and any(a in value for a in _DUNDER_ATTRIBUTES):
                return "strings naming interpreter internals are not available in the sandbox."
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top not in ALLOWED_IMPORTS or (isinstance(node, ast.ImportFrom) and node.level):
                    return (f"import of {name!r} is not available in the sandbox. Imports other than "
                            f"{', '.join(sorted(ALLOWED_IMPORTS))} are not available.")
    return None


_armed: dict[int, str | None] = {}
"""The threads running armed code now (ident -> the one directory each may write under, or None). The hook runs
on every audit event of the process, from every thread; while this is empty (between calls, and in a kernel once
the in-process interpreter installed it) it returns after one truth test."""
_ident = threading.get_ident
_installed: list[Callable[..., None]] = []

_PROGRAM_EVENTS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                   "subprocess.Popen", "pty.spawn")
_NETWORK_PREFIXES = ("socket.", "urllib.Request", "http.client.")
_FILE_CHANGE_EVENTS = frozenset({"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown",
                                 "os.link", "os.symlink", "os.truncate", "shutil.rmtree", "shutil.copyfile",
                                 "shutil.move", "os.utime"})
_INTROSPECTION_EVENTS = frozenset({"sys._current_frames", "gc.get_objects", "gc.get_referrers",
                                   "gc.get_referents", "sys.settrace", "sys.setprofile", "sys.addaudithook",
                                   "builtins.input", "builtins.breakpoint", "pickle.find_class",
                                   "os.kill", "os.killpg", "signal.pthread_kill", "cpython.run_stdin"})
_RESTRICTED_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame",
                               "gi_code", "f_globals"})


def audit_active() -> bool:
    """Whether the calling thread runs armed code now."""
    return _ident() in _armed


class _Active:
    """Arms the hook for the thread that enters it, until it exits (entering again while armed does not nest)."""

    def __init__(self, writable: str | None) -> None:
        self.writable = writable

    def __enter__(self) -> None:
        _armed[_ident()] = self.writable

    def __exit__(self, *exc: object) -> None:
        _armed.pop(_ident(), None)


def _hook(event: str, args: tuple) -> None:
    if not _armed:
        return
    thread = _ident()
    if thread not in _armed:
        return
    message = None
    if event.startswith(_PROGRAM_EVENTS):
        message = "running programs or processes is not available in the sandbox"
    elif event.startswith(_NETWORK_PREFIXES):
        message = "network access is not available in the sandbox"
    elif event in _FILE_CHANGE_EVENTS:
        message = "changing files is not available in the sandbox"
    elif event in _INTROSPECTION_EVENTS:
        message = f"{event} is not available in the sandbox"
    elif event == "object.__getattr__" and len(args) > 1 and args[1] in _RESTRICTED_ATTRS:
        message = f"attribute {args[1]!r} is not available in the sandbox"
    elif event == "open" and args:
        path, mode = args[0], args[1] if len(args) > 1 else "r"
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
        if isinstance(args[-1], int) and args[-1] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
            writing = True
        text = os.fsdecode(path) if isinstance(path, (str, bytes)) else ""
        writable = _armed[thread]
        if writing and not (writable and text and os.path.abspath(text).startswith(writable + os.sep)):
            message = "writing files is not available in the sandbox: save(name, value) keeps results"
        elif text.startswith(("/proc", "/sys")) or "/.ssh" in text or "jupyter/runtime" in text:
            message = "reading system or credential files is not available in the sandbox"
    if message is not None:
        raise SandboxViolation(message)


def install_audit_hook(writable: str | None = None) -> _Active:
    """Install the (process-wide, permanent) hook once; returns a context manager that arms it."""
    if not _installed:
        sys.addaudithook(_hook)
        _installed.append(_hook)
    return _Active(os.path.abspath(writable) if writable else None)
