"""When is a connector added again "the same"? (issue 32: configuration cells are idempotent)

A notebook cell that calls ``session.add_connector(duckdb_connector(...))`` runs
again and again; so does ``%config AgentMagics.connectors = [...]``. Adding a
connector under a name in use keeps the registered one (and its state: an
open DuckDB connection, a built docs index) when the new one is the same, and
replaces it otherwise. :func:`differences` says which parts differ:

- what the model sees: name, description, every tool's name, description,
  parameters and safety class;
- governance: environment, ``allow_writes``, the sensitivity map;
- how it was built: for connectors from a builder (``duckdb_connector``,
  ``sql_connector``...), the builder and its arguments, recorded by
  :func:`records_configuration` in :attr:`Connector.configuration`; for a
  connector built by hand, each tool's function (the same code, defaults and
  closure values).

Values compare by value where they have one (strings, numbers, paths,
containers of them, frames and arrays through their fingerprint) and by
identity otherwise: a new SQLAlchemy engine or a new callable object is a
change. Anything unsure counts as a change, since replacing is always correct
(only slower).
"""

from __future__ import annotations

import functools
import inspect
import os
import types
from typing import Any, Callable, TypeVar

__all__ = ["differences", "records_configuration", "same_value"]

COMPARE_DEPTH_MAX = 12
"""Nesting (containers in closures in functions...) compared before calling the values different."""

_BY_VALUE = (type(None), bool, int, float, complex, str, bytes, range, os.PathLike)

Builder = TypeVar("Builder", bound=Callable[..., Any])


def records_configuration(builder: Builder) -> Builder:
    """Decorate a connector builder: the connector it returns carries ``configuration``, the builder's
    qualified name and its bound arguments (defaults applied)."""
    signature = inspect.signature(builder)

    @functools.wraps(builder)
    def build(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        connector = builder(*args, **kwargs)
        connector.configuration = {"builder": f"{builder.__module__}.{builder.__qualname__}", **bound.arguments}
        return connector

    return build  # type: ignore[return-value]  # build keeps the builder's signature


def same_value(a: Any, b: Any, depth: int = 0) -> bool:
    """``a`` and ``b`` are interchangeable as configuration (see the module docstring)."""
    if a is b:
        return True
    if type(a) is not type(b) or depth > COMPARE_DEPTH_MAX:
        return False
    if isinstance(a, _BY_VALUE):
        return bool(a == b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return a == b
    if isinstance(a, types.FunctionType):
        return _same_function(a, b, depth + 1)
    if isinstance(a, types.MethodType):
        f, g = a.__func__, b.__func__  # any callable can be bound, not only a Python function
        if isinstance(f, types.FunctionType) and isinstance(g, types.FunctionType):
            return a.__self__ is b.__self__ and _same_function(f, g, depth + 1)
        return a.__self__ is b.__self__ and same_value(f, g, depth + 1)
    from harness_magic.core.cache.fingerprint import fingerprint

    stamp = fingerprint(a)
    return stamp is not None and stamp == fingerprint(b)


def _same_function(f: types.FunctionType, g: types.FunctionType, depth: int) -> bool:
    """The same code with the same defaults and closure values (globals are looked up when called)."""
    if f is g:
        return True
    if f.__code__ != g.__code__ or not same_value(f.__defaults__, g.__defaults__, depth) \
            or not same_value(f.__kwdefaults__, g.__kwdefaults__, depth):
        return False
    cells_f, cells_g = f.__closure__ or (), g.__closure__ or ()
    try:
        return len(cells_f) == len(cells_g) and all(
            same_value(x.cell_contents, y.cell_contents, depth + 1) for x, y in zip(cells_f, cells_g))
    except ValueError:  # an empty cell (a name not yet bound where the function was made)
        return False


def _tool_view(tool: Any) -> tuple[Any, ...]:
    return tool.name, tool.description, tool.parameters, tool.safety


def differences(registered: Any, new: Any) -> list[str]:
    """What differs between two connectors of one name (empty: the same configuration), in words."""
    found = []
    if type(registered) is not type(new):
        found.append(f"type ({type(registered).__name__} → {type(new).__name__})")
    if registered.description != new.description:
        found.append("description")
    for part in ("environment", "allow_writes", "sensitivity"):
        if not same_value(getattr(registered, part), getattr(new, part)):
            found.append(part)
    old_config, new_config = registered.configuration, new.configuration
    if old_config is not None and new_config is not None:
        keys = sorted(set(old_config) | set(new_config), key=lambda k: (k != "builder", k))
        found += [k for k in keys if not same_value(old_config.get(k), new_config.get(k))]
    elif old_config is not None or new_config is not None:
        found.append("how it was built")
    old_tools, new_tools = registered.tools, new.tools
    if [_tool_view(t) for t in old_tools] != [_tool_view(t) for t in new_tools]:
        found.append("tools")
    elif old_config is None and new_config is None and not all(
            same_value(a.handler, b.handler) for a, b in zip(old_tools, new_tools)):
        found.append("tool code")
    return found
