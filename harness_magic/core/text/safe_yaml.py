"""YAML that holds plain values only, parsed with a bound on nesting.

:func:`load_plain_yaml` is how files a person or a colleague may edit (skill
front matter, workspace memory, a policy table) are parsed:

* ``yaml.SafeLoader`` only: no object is ever constructed from a tag;
* refused before anything is built: a tag (``!!python/...``, ``!local``), an
  anchor or an alias (the "billion laughs" bomb needs aliases), and nesting
  deeper than ``max_depth`` (:data:`YAML_MAX_DEPTH`). PyYAML's composer
  recurses once per level, so ``[[[[...]]]]`` a few hundred levels deep raises
  ``RecursionError``, which is not a ``YAMLError`` and would escape a loader's
  error handling. The check walks the parser's event stream, which is a state
  machine with its own stack (no recursion), so the bound holds whatever the
  input;
* every failure is one :class:`PlainYAMLError` with the 1-based line it is on
  (when known), never a ``RecursionError`` or a traceback from the parser.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PlainYAMLError", "load_plain_yaml", "YAML_MAX_DEPTH"]

YAML_MAX_DEPTH = 32
"""Nesting levels of mappings and sequences: configuration is a few levels deep; a parser recursion is ~3 frames per level."""


class PlainYAMLError(ValueError):
    """The text is not plain YAML; ``str()`` is one line saying why and where, ``line`` is 1-based (or None), and
    ``reason`` one of ``tag``, ``anchor``, ``alias``, ``depth``, ``syntax``."""

    def __init__(self, message: str, line: int | None = None, reason: str = "syntax") -> None:
        self.line, self.reason = line, reason
        super().__init__(message)


def _line(mark: Any, offset: int) -> int | None:
    return mark.line + offset if mark is not None else None


def _on(line: int | None) -> str:
    return f" on line {line}" if line is not None else ""


def _refused(what: str, line: int | None) -> PlainYAMLError:
    return PlainYAMLError(f"YAML {what}{_on(line)} refused (plain values only)", line, what)


def load_plain_yaml(text: str | bytes, *, max_depth: int = YAML_MAX_DEPTH, line_offset: int = 1) -> Any:
    """The value of ``text`` (one YAML document), or :class:`PlainYAMLError`.

    ``line_offset`` is added to the parser's 0-based line numbers (pass 2 for
    front matter that starts after a ``---`` line).
    """
    import yaml

    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = _line(getattr(event, "start_mark", None), line_offset)
            if isinstance(event, yaml.AliasEvent):
                raise _refused("alias", line)
            if getattr(event, "anchor", None):
                raise _refused("anchor", line)
            if getattr(event, "tag", None) is not None and not _implicit(event):
                raise _refused("tag", line)
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > max_depth:
                    raise PlainYAMLError(f"YAML nested deeper than {max_depth} levels{_on(line)}", line, "depth")
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
        return yaml.safe_load(text)
    except PlainYAMLError:
        raise
    except yaml.YAMLError as exc:
        line = _line(getattr(exc, "problem_mark", None), line_offset)
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise PlainYAMLError(f"invalid YAML{_on(line)}: {problem}", line) from None
    except RecursionError:  # not reachable with the depth bound; kept so no parser recursion ever escapes
        raise PlainYAMLError(f"YAML nested too deeply to parse (the limit is {max_depth} levels)", None,
                             "depth") from None


def _implicit(event: Any) -> bool:
    """A scalar whose tag the parser filled in itself (no tag written in the text)."""
    implicit = getattr(event, "implicit", None)
    if isinstance(implicit, tuple):
        return any(implicit)
    return bool(implicit)
