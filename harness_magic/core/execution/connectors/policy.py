"""Governance policy: environment x tool risk x data sensitivity -> allow, ask or deny, and who may approve.

A policy is a list of rules, each matching on ``environment`` (``dev``,
``staging``, ``prod``), ``safety`` (the tool's risk class: ``write``,
``destructive``, ``external``) and ``sensitivity`` (the most sensitive class
of the data the call touches: ``none``, ``pii``, ``financial``,
``restricted``); ``*`` (or an omitted key) matches anything. The FIRST rule
that matches decides; no match falls back to the :class:`ApprovalPolicy`'s
own rule for the safety class. A rule's ``approvers`` (roles) limits who may
approve an ``ask``: an actor whose role is not listed is refused without
being asked. YAML form (``AgentMagics.policy_file``)::

    rules:
      - {environment: prod, safety: destructive, action: deny}
      - {environment: prod, sensitivity: restricted, action: deny}
      - {environment: prod, action: ask, approvers: [dba, lead]}
      - {environment: dev, safety: write, action: allow}

Hard rails that no table can loosen (:func:`hard_rails`):

* ``prod`` refuses ``write``/``destructive`` calls unless the connector sets
  ``allow_writes``; when it does, the call always asks (``allow`` becomes
  ``ask``) and the approval shows a preflight summary.
* A write that cannot be previewed in a transaction (DDL on engines without
  transactional DDL, Spark, files, any tool without a previewer) is stricter:
  refused outright in ``prod``, and never auto-allowed in ``staging``
  (``allow`` becomes ``ask``). ``dev`` keeps the table's answer.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness_magic.core.confinement.safe_open import TooLarge, read_regular
from harness_magic.core.text.safe_yaml import PlainYAMLError, load_plain_yaml

__all__ = [
    "Actor",
    "GovernancePolicy",
    "PolicyError",
    "PolicyRule",
    "Verdict",
    "ENVIRONMENTS",
    "SENSITIVITY_CLASSES",
    "POLICY_ACTIONS",
    "POLICY_FILE_MAX_BYTES",
    "POLICY_MAX_RULES",
    "current_actor",
    "governance_from",
    "hard_rails",
    "strictest",
    "most_sensitive",
]

ENVIRONMENTS: tuple[str, ...] = ("dev", "staging", "prod")
SENSITIVITY_CLASSES: tuple[str, ...] = ("none", "pii", "financial", "restricted")
"""In rising order of sensitivity (the masking plane's classes plus ``none``)."""
POLICY_ACTIONS: tuple[str, ...] = ("allow", "ask", "deny")
RISK_CLASSES: tuple[str, ...] = ("write", "destructive", "external")
POLICY_FILE_MAX_BYTES = 64 * 1024
"""A policy is a short table; a bigger file is a mistake (or an attack on the YAML parser)."""
POLICY_MAX_RULES = 500
"""More rules than anyone can review is no policy."""
ROLE_MAX_CHARS = 64
"""Role names are short identifiers shown in every approval."""
WRITE_CLASSES = ("write", "destructive")
_RULE_KEYS = ("environment", "safety", "sensitivity", "action", "approvers")
_ORDER = {"allow": 0, "ask": 1, "deny": 2}


class PolicyError(ValueError):
    """A policy table or file that cannot be used; the message names the bad rule, key and value."""


@dataclass(frozen=True)
class Actor:
    """Who runs the session: the OS user, and a role when one is configured."""

    name: str
    role: str | None = None

    def __str__(self) -> str:
        return f"{self.name} (role {self.role})" if self.role else self.name


def current_actor(role: str | None = None) -> Actor:
    """The OS user running the kernel, with ``role`` (validated) when given."""
    if role is not None and (not isinstance(role, str) or not role.strip() or len(role) > ROLE_MAX_CHARS):
        raise PolicyError(f"actor role {role!r} must be a non-empty name of at most {ROLE_MAX_CHARS} characters")
    try:
        name = getpass.getuser()
    except Exception:  # no passwd entry for the uid (containers)
        name = f"uid {os.getuid()}"
    return Actor(name, role.strip() if role else None)


@dataclass(frozen=True)
class PolicyRule:
    """One row of the table; ``*`` matches anything."""

    action: str
    environment: str = "*"
    safety: str = "*"
    sensitivity: str = "*"
    approvers: tuple[str, ...] = ()
    """Roles that may approve an ``ask`` (empty: anyone running the session)."""

    def matches(self, environment: str, safety: str, sensitivity: str) -> bool:
        return all(want in ("*", got) for want, got in
                   ((self.environment, environment), (self.safety, safety), (self.sensitivity, sensitivity)))

    def describe(self) -> str:
        keys = [f"{k}={v}" for k, v in (("environment", self.environment), ("safety", self.safety),
                                         ("sensitivity", self.sensitivity)) if v != "*"]
        return f"rule [{', '.join(keys) or 'any'}] -> {self.action}"


@dataclass(frozen=True)
class Verdict:
    """What the policy says about one call."""

    action: str
    """``allow``, ``ask`` or ``deny``."""
    reason: str
    approvers: tuple[str, ...] = ()


def _rule(index: int, raw: Any) -> PolicyRule:
    where = f"policy rule {index + 1}"
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where} must be a mapping, got {type(raw).__name__}: {raw!r}"[:300])
    unknown = sorted(str(k) for k in raw if k not in _RULE_KEYS)
    if unknown:
        raise PolicyError(f"{where} has unknown key(s) {', '.join(map(repr, unknown))}; allowed: "
                          f"{', '.join(_RULE_KEYS)}")
    values: dict[str, Any] = {}
    for key, allowed in (("environment", ENVIRONMENTS), ("safety", RISK_CLASSES),
                         ("sensitivity", SENSITIVITY_CLASSES), ("action", POLICY_ACTIONS)):
        value = raw.get(key, "*" if key != "action" else None)
        if not isinstance(value, str) or (value not in allowed and not (value == "*" and key != "action")):
            raise PolicyError(f"{where}: {key} = {value!r} is invalid; allowed: "
                              f"{', '.join(allowed)}{'' if key == 'action' else ' or *'}")
        values[key] = value
    approvers = raw.get("approvers", [])
    if isinstance(approvers, str) or not isinstance(approvers, Sequence) or not all(
            isinstance(r, str) and r.strip() and len(r) <= ROLE_MAX_CHARS for r in approvers):
        raise PolicyError(f"{where}: approvers = {approvers!r} must be a list of role names"[:300])
    if approvers and values["action"] != "ask":
        raise PolicyError(f"{where}: approvers only make sense with action: ask (got action: {values['action']})")
    return PolicyRule(approvers=tuple(r.strip() for r in approvers), **values)


@dataclass(frozen=True)
class GovernancePolicy:
    """An ordered rule table (first match wins). Build with :meth:`from_config` or :meth:`load`."""

    rules: tuple[PolicyRule, ...] = field(default_factory=tuple)

    @classmethod
    def from_config(cls, config: Any) -> "GovernancePolicy":
        """From ``{"rules": [...]}`` or the list of rules itself; :class:`PolicyError` names what is wrong."""
        if config is None:
            return cls()
        rules = config.get("rules", None) if isinstance(config, Mapping) else config
        if isinstance(config, Mapping):
            extra = sorted(str(k) for k in config if k != "rules")
            if extra:
                raise PolicyError(f"policy has unknown top-level key(s) {', '.join(map(repr, extra))}; "
                                  "expected only 'rules'")
        if rules is None:
            return cls()
        if isinstance(rules, (str, bytes)) or not isinstance(rules, Sequence):
            raise PolicyError(f"policy rules must be a list, got {type(rules).__name__}")
        if len(rules) > POLICY_MAX_RULES:
            raise PolicyError(f"policy has {len(rules)} rules; at most {POLICY_MAX_RULES} are allowed")
        return cls(tuple(_rule(i, r) for i, r in enumerate(rules)))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "GovernancePolicy":
        """Read a YAML policy file: a regular file (a link is followed; never a FIFO or device), at most :data:`POLICY_FILE_MAX_BYTES`,
        plain YAML with bounded nesting (:func:`~harness_magic.core.text.safe_yaml.load_plain_yaml`)."""
        where = os.fspath(path)
        try:
            data = read_regular(path, POLICY_FILE_MAX_BYTES, follow_links=True)
        except TooLarge:
            raise PolicyError(f"policy file {where!r} is over {POLICY_FILE_MAX_BYTES:,} bytes") from None
        except OSError as exc:
            raise PolicyError(f"cannot read policy file {where!r}: {exc.strerror or exc}") from exc
        try:
            parsed = load_plain_yaml(data)
        except PlainYAMLError as exc:
            raise PolicyError(f"policy file {where!r} is not valid YAML: {exc}"[:500]) from None
        try:
            return cls.from_config(parsed)
        except PolicyError as exc:
            raise PolicyError(f"policy file {os.fspath(path)!r}: {exc}") from None

    def verdict(self, environment: str, safety: str, sensitivity: str) -> Verdict | None:
        """The first matching rule's verdict, or None when no rule matches."""
        for rule in self.rules:
            if rule.matches(environment, safety, sensitivity):
                return Verdict(rule.action, f"the policy {rule.describe()}", rule.approvers)
        return None


def governance_from(policy: Any = None, policy_file: str | os.PathLike[str] | None = None
                    ) -> GovernancePolicy | None:
    """The table from settings: ``policy`` (``{"rules": [...]}``) or a YAML ``policy_file``, not both; None: none."""
    if policy and policy_file:
        raise PolicyError("set a policy table or a policy file, not both "
                          f"(policy has {len(policy.get('rules', []) if isinstance(policy, Mapping) else policy)} "
                          f"rules, policy_file is {os.fspath(policy_file)!r})")
    if policy_file:
        return GovernancePolicy.load(policy_file)
    return GovernancePolicy.from_config(policy) if policy else None


def strictest(a: str, b: str) -> str:
    """The stricter of two actions (deny > ask > allow)."""
    return a if _ORDER[a] >= _ORDER[b] else b


def most_sensitive(classes: Sequence[str]) -> str:
    """The most sensitive of ``classes`` (``none`` for an empty list); unknown names count as ``restricted``."""
    rank = {c: i for i, c in enumerate(SENSITIVITY_CLASSES)}
    return max((c if c in rank else "restricted" for c in classes), key=rank.__getitem__, default="none")


def hard_rails(verdict: Verdict, *, environment: str, safety: str, allow_writes: bool,
               previewable: bool) -> Verdict:
    """Apply the rules no table can loosen (see the module docstring) to ``verdict``."""
    if safety not in WRITE_CLASSES or verdict.action == "deny":
        return verdict
    if environment == "prod" and not allow_writes:
        return Verdict("deny", "the connector is in prod and does not allow writes (set allow_writes: true)")
    if environment == "prod" and not previewable:
        return Verdict("deny", "this prod write cannot be previewed in a transaction, so it is refused")
    if environment == "prod" or (environment == "staging" and not previewable):
        why = "prod writes always ask" if environment == "prod" else "a staging write without a preview asks"
        return Verdict(strictest(verdict.action, "ask"), verdict.reason if verdict.action == "ask" else why,
                       verdict.approvers)
    return verdict
