"""The verification vocabulary of skill files: declarative rules mapped onto the :class:`Verifier`.

A skill's ``verification`` field is a list of one-key mappings, kind to
parameters (nothing in it runs code)::

    verification:
      - require_columns: {columns: [metric, value], handles: "kpi_*"}
      - no_nulls: {columns: [day], handles: daily}
      - row_count: {min: 1, handles: profile}
      - totals_reconcile: {handles: [dashboard_total, warehouse_total], column: revenue, tolerance: 0.01}
      - cite_sources: {min: 2}
      - name_definition: {term: active user}
      - mention: {any: [lag, last loaded]}

Handle rules (:data:`HANDLE_KINDS`) run after tool calls on the handles they
name; a failure turns the tool result into an error the model sees.
``totals_reconcile`` runs when the second handle is saved and compares the sum
of ``column`` with the first handle's (the latest version of it); a number
is its own total. Answer rules (:data:`ANSWER_KINDS`) check the final answer
and are reported like the citation check (``final_answer``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from harness_magic.core.knowledge.citations import parse_citations

__all__ = ["SkillRule", "SkillRuleError", "parse_rules", "HANDLE_KINDS", "ANSWER_KINDS", "RULE_KINDS",
           "MAX_RULES", "check_answer_rule", "totals_check"]

HANDLE_KINDS = ("require_columns", "no_nulls", "row_count", "totals_reconcile")
ANSWER_KINDS = ("cite_sources", "name_definition", "mention")
RULE_KINDS = HANDLE_KINDS + ANSWER_KINDS
MAX_RULES = 20
"""A skill's checks are a short list the model can keep in mind; each is restated in the loaded template."""
_PARAMS = {
    "require_columns": ("columns", "handles", "tools"),
    "no_nulls": ("columns", "handles", "tools"),
    "row_count": ("min", "max", "handles", "tools"),
    "totals_reconcile": ("handles", "column", "tolerance"),
    "cite_sources": ("min", "sources"),
    "name_definition": ("term",),
    "mention": ("any", "all"),
}
_DEFINITION_CUE = re.compile(r"\b(means|meaning|defined as|definition|refers to|counts?|counted as|i\.e\.|"
                             r"we use|we used|taken as)\b|[=:]", re.IGNORECASE)
"""A sentence that names a definition says what the term means, not only its value."""
_STRONG_CUE = re.compile(r"\b(defined as|definition|means|refers to)\b", re.IGNORECASE)
"""Without a named term, only an explicit definition phrase counts."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


class SkillRuleError(ValueError):
    """A rule that cannot be used; the message names the rule and the parameter."""


@dataclass(frozen=True)
class SkillRule:
    """One declarative rule of a skill."""

    kind: str
    """One of :data:`RULE_KINDS`."""
    params: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    """As the verifier reports it, e.g. ``require_columns(metric, value)``."""

    @property
    def on_answer(self) -> bool:
        return self.kind in ANSWER_KINDS

    def explain(self) -> str:
        """One line for the model: what passes."""
        p = self.params
        where = f" on `{p.get('handles', '*')}`" if "handles" in p and self.kind != "totals_reconcile" else ""
        if self.kind == "require_columns":
            return f"saved tables{where} must have columns {', '.join(p['columns'])}"
        if self.kind == "no_nulls":
            return f"saved tables{where} must have no nulls in {', '.join(p['columns'])}"
        if self.kind == "row_count":
            return f"saved tables{where} must have {p.get('min', 0)}..{p.get('max', 'any')} rows"
        if self.kind == "totals_reconcile":
            a, b = p["handles"]
            return (f"when `{b}` is saved, the total of {p.get('column') or 'the value'} must match `{a}`'s "
                    f"within {p['tolerance']:g} (relative); explain or fix any gap")
        if self.kind == "cite_sources":
            named = f" including {', '.join(p['sources'])}" if p.get("sources") else ""
            return f"the final answer cites at least {p['min']} sources ([doc:...], [term:...]){named}"
        if self.kind == "name_definition":
            if "term" not in p:
                return "the final answer states the definition it used ('X is defined as ...')"
            return f"the final answer states which definition of '{p['term']}' it used"
        if p.get("all"):
            return f"the final answer mentions each of: {', '.join(p['all'])}"
        return f"the final answer mentions at least one of: {', '.join(p['any'])}"


def parse_rules(spec: Any) -> tuple[SkillRule, ...]:
    """Rules from a front matter ``verification`` value (None: none); SkillRuleError naming the bad part."""
    if spec is None:
        return ()
    if isinstance(spec, dict):
        spec = [{k: v} for k, v in spec.items()]
    if not isinstance(spec, list):
        raise SkillRuleError(f"expected a list of rules such as '- cite_sources: {{min: 2}}', got {type(spec).__name__}")
    if len(spec) > MAX_RULES:
        raise SkillRuleError(f"{len(spec)} rules, more than MAX_RULES={MAX_RULES}")
    rules = []
    for index, item in enumerate(spec, 1):
        if isinstance(item, str):
            item = {item: {}}
        if not isinstance(item, dict) or len(item) != 1:
            raise SkillRuleError(f"rule {index}: expected one 'kind: {{parameters}}' mapping")
        (kind, params), = item.items()
        rules.append(_rule(str(kind), params if params is not None else {}, index))
    return tuple(rules)


def _rule(kind: str, params: Any, index: int) -> SkillRule:
    where = f"rule {index} ({kind})"
    if kind not in RULE_KINDS:
        raise SkillRuleError(f"rule {index}: unknown kind {kind[:60]!r}; known: {', '.join(RULE_KINDS)}")
    if not isinstance(params, dict):
        raise SkillRuleError(f"{where}: expected a mapping of parameters, got {type(params).__name__}")
    unknown = sorted(str(k) for k in params if k not in _PARAMS[kind])
    if unknown:
        raise SkillRuleError(f"{where}: unknown parameter {unknown[0]!r}; allowed: {', '.join(_PARAMS[kind])}")
    p: dict[str, Any] = {}
    for key in ("handles", "tools"):
        if key in params and kind != "totals_reconcile":
            p[key] = _text(params[key], where, key)
    if kind in ("require_columns", "no_nulls"):
        p["columns"] = _texts(params.get("columns"), where, "columns", required=True)
        name = f"{kind}({', '.join(p['columns'])})"
    elif kind == "row_count":
        for key in ("min", "max"):
            if key in params:
                p[key] = _count(params[key], where, key)
        if not p.keys() & {"min", "max"}:
            raise SkillRuleError(f"{where}: needs min, max or both")
        if p.get("min", 0) > p.get("max", math.inf):
            raise SkillRuleError(f"{where}: min={p['min']} is greater than max={p['max']}")
        name = f"row_count({p.get('min', '')}..{p.get('max', '')})"
    elif kind == "totals_reconcile":
        handles = _texts(params.get("handles"), where, "handles", required=True)
        if len(handles) != 2:
            raise SkillRuleError(f"{where}: handles must name exactly two handles [reference, candidate], "
                                 f"got {len(handles)}")
        p["handles"] = handles
        if params.get("column") is not None:
            p["column"] = _text(params["column"], where, "column")
        tolerance = params.get("tolerance", 0)
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
            raise SkillRuleError(f"{where}: tolerance must be a fraction in [0, 1), got {tolerance!r}")
        p["tolerance"] = float(tolerance)
        name = f"totals_reconcile({handles[0]}, {handles[1]}" + (f": {p['column']}" if "column" in p else "") + ")"
    elif kind == "cite_sources":
        p["min"] = _count(params.get("min", 1), where, "min")
        p["sources"] = _texts(params.get("sources"), where, "sources")
        name = f"cite_sources(min={p['min']})"
    elif kind == "name_definition":
        if params.get("term") is not None:
            p["term"] = _text(params["term"], where, "term")
        name = f"name_definition({p.get('term', '')})"
    else:
        p["any"] = _texts(params.get("any"), where, "any")
        p["all"] = _texts(params.get("all"), where, "all")
        if not p["any"] and not p["all"]:
            raise SkillRuleError(f"{where}: needs 'any' or 'all' phrases")
        name = f"mention({', '.join(p['all'] or p['any'])})"
    return SkillRule(kind=kind, params=p, name=name)


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip():
        raise SkillRuleError(f"{where}: {key} must be a non-empty name, got {value!r}"[:200])
    return " ".join(str(value).split())[:200]


def _texts(value: Any, where: str, key: str, *, required: bool = False) -> tuple[str, ...]:
    if value is None or value == []:
        if required:
            raise SkillRuleError(f"{where}: {key} is required")
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise SkillRuleError(f"{where}: {key} must be a list of names, got {type(value).__name__}")
    return tuple(_text(v, where, key) for v in value)


def _count(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SkillRuleError(f"{where}: {key} must be a whole number >= 0, got {value!r}"[:200])
    return value


# -- checks -----------------------------------------------------------------------------------------------------


def _total(value: Any, column: str | None, what: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hasattr(value, "columns") and hasattr(value, "shape"):
        if column is None:
            raise ValueError(f"{what} is a table: the rule needs a column to total")
        if column not in [str(c) for c in value.columns]:
            raise ValueError(f"{what} has no column {column!r}; it has {[str(c) for c in value.columns][:20]}")
        return float(value[column].sum())
    raise ValueError(f"{what} is a {type(value).__name__}, neither a number nor a table")


def totals_check(rule: SkillRule, reference: Callable[[], Any]) -> Callable[[Any], "str | None"]:
    """``check(candidate) -> problem | None`` for a ``totals_reconcile`` rule; ``reference()`` reads the other."""
    first, second = rule.params["handles"]
    column, tolerance = rule.params.get("column"), rule.params["tolerance"]

    def check(candidate: Any) -> str | None:
        try:
            ref_value = reference()
        except KeyError:
            return f"`{first}` is not saved: save both totals, `{first}` first"
        try:
            a = _total(ref_value, column, f"`{first}`")
            b = _total(candidate, column, f"`{second}`")
        except ValueError as exc:
            return str(exc)
        gap = abs(a - b)
        if gap <= tolerance * max(abs(a), abs(b)) or gap == 0:
            return None
        relative = gap / max(abs(a), abs(b))
        return (f"totals differ: `{first}` {a:,.6g} vs `{second}` {b:,.6g} (gap {gap:,.6g}, {relative:.2%}, "
                f"tolerance {tolerance:.2%})")

    return check


def check_answer_rule(rule: SkillRule, text: str) -> str | None:
    """The problem with final answer ``text`` under answer rule ``rule``, or None when it passes."""
    p, lowered = rule.params, " ".join((text or "").split()).lower()
    if rule.kind == "cite_sources":
        cited = parse_citations(text or "")
        if len(cited) < p["min"]:
            return f"cites {len(cited)} source(s) ({', '.join(cited) or 'none'}); at least {p['min']} needed"
        missing = [s for s in p["sources"] if s.lower() not in lowered]
        if missing:
            return f"does not cite {', '.join(missing)}"
        return None
    if rule.kind == "name_definition":
        if "term" not in p:
            if _STRONG_CUE.search(text or ""):
                return None
            return "does not state the definition it used (say 'X is defined as ...')"
        term = p["term"].lower()
        for sentence in _SENTENCE.split(text or ""):
            flat = " ".join(sentence.split()).lower()
            if term in flat and _DEFINITION_CUE.search(flat.replace(term, " ", 1)):
                return None
        return f"does not state which definition of '{p['term']}' it used"
    missing = [s for s in p["all"] if s.lower() not in lowered]
    if missing:
        return f"does not mention {', '.join(missing)}"
    if p["any"] and not any(s.lower() in lowered for s in p["any"]):
        return f"mentions none of {', '.join(p['any'])}"
    return None
