"""Approval policy for tools whose safety class is not ``read``.

Every tool declares a safety class (``read``, ``write``, ``destructive``,
``external``). ``read`` tools run freely. Anything else passes an
:class:`ApprovalPolicy` first, whose rule per class is one of:

``allow``
    run without asking.
``deny``
    never run; the model gets an error result saying so.
``ask``
    call the :data:`Approver` with an :class:`ApprovalRequest`; it returns
    True (run) or False (deny), or an :class:`ApprovalDecision` carrying a
    reason. With no approver configured, ``ask`` denies.

The approver protocol (what the notebook implements with an approve/deny
widget, and tests with a plain function)::

    def approver(request: ApprovalRequest) -> bool | ApprovalDecision: ...

It is called synchronously on the thread running the agent, before the tool
runs, and blocks until it answers. An approver that raises denies the call
(the exception text becomes the reason). Denied calls never reach the tool:
a denied SQL write leaves the database unchanged.

Governance (:mod:`.policy`): a request also carries the connector's
``environment``, whether the connector ``allow_writes``, the
``sensitivity`` of the data it touches and, for a previewed write, a
``preflight`` summary. :meth:`ApprovalPolicy.verdict` combines the per-class
rule, the optional :class:`~.policy.GovernancePolicy` table (first match wins
over the per-class rule, per-tool overrides win over both) and the hard rails
(``prod`` refuses writes unless allowed, then always asks; unpreviewable
writes are stricter). An ``ask`` whose rule names approver roles is refused
without asking when the session's :class:`~.policy.Actor` has none of them.

Previewed writes are asked about once, after the preview: the guard only *gates*
them (:meth:`ApprovalPolicy.gate`: refusals happen before any transaction
opens) and the tool asks once, after the preview, with the preflight summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from harness_magic.core.execution.connectors.policy import (
    Actor,
    GovernancePolicy,
    Verdict,
    hard_rails,
    most_sensitive,
)
from harness_magic.core.execution.tools import SAFETY_CLASSES

__all__ = [
    "ApprovalRequest",
    "ApprovalDecision",
    "ApprovalPolicy",
    "Approver",
    "POLICY_RULES",
    "DEFAULT_RULES",
]

PolicyRule = Literal["ask", "allow", "deny"]
POLICY_RULES: tuple[str, ...] = ("ask", "allow", "deny")
DEFAULT_RULES: dict[str, str] = {"write": "ask", "destructive": "ask", "external": "ask"}
"""Out of the box every non-read call asks; with no approver that means denied."""


@dataclass(frozen=True)
class ApprovalRequest:
    """What an approver is asked to decide on."""

    tool: str
    """Full tool name, e.g. ``sql__execute``."""
    connector: str | None
    """Connector owning the tool (None for built-in tools)."""
    safety: str
    """Effective safety class of this call (a classifier may raise it above the tool's)."""
    arguments: dict[str, Any]
    """The model's arguments, as received."""
    summary: str = ""
    """One human-readable line: e.g. the SQL statement and its classification."""
    tool_use_id: str | None = None
    """Id of the tool use in the transcript (to place the control next to it)."""
    environment: str = "dev"
    """The connector's environment: ``dev``, ``staging`` or ``prod``."""
    allow_writes: bool = False
    """The connector explicitly allows writes (what ``prod`` requires)."""
    sensitivity: tuple[str, ...] = ()
    """Sensitivity classes of the data the call touches (``pii``, ``financial``, ``restricted``)."""
    previewable: bool = False
    """The call runs inside a transaction the user commits or rolls back (see :mod:`.preview`)."""
    preflight: Any = None
    """The preflight summary of a previewed write (a :class:`~.preview.Preflight`), else None."""
    over_budget: str = ""
    """For a read: why the engine's own estimate is over the run's query budget (:mod:`.estimates`); such a read
    asks (with no approver it is refused) unless a per-tool rule decides."""


@dataclass(frozen=True)
class ApprovalDecision:
    """An approver's answer with an optional reason shown to the model."""

    approved: bool
    reason: str = ""
    asked: bool = False
    """A person (the approver) answered; False when the policy decided alone."""


Approver = Callable[[ApprovalRequest], "bool | ApprovalDecision"]
"""``approver(request) -> bool | ApprovalDecision``; see the module docstring."""


@dataclass
class ApprovalPolicy:
    """Rules per safety class (and optional per-tool overrides) plus an approver.

    ``ApprovalPolicy()`` asks for every non-read call; ``ApprovalPolicy.allow_all()``
    and ``ApprovalPolicy.deny_all()`` are the two extremes.
    """

    rules: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_RULES))
    """Rule per non-read safety class: ``ask``, ``allow`` or ``deny``."""
    tools: dict[str, str] = field(default_factory=dict)
    """Per-tool overrides by full tool name (win over ``rules``)."""
    approver: Approver | None = None
    """Called for ``ask``; None means ``ask`` denies."""
    governance: GovernancePolicy | None = None
    """Rule table over environment, risk and sensitivity (see :mod:`.policy`); None: per-class rules only."""
    actor: Actor | None = None
    """Who runs the session; its role is checked against a rule's approvers."""

    def __post_init__(self) -> None:
        rules = dict(DEFAULT_RULES)
        rules.update(self.rules)
        self.rules = rules
        for where, mapping in (("rules", self.rules), ("tools", self.tools)):
            for key, rule in mapping.items():
                if rule not in POLICY_RULES:
                    raise ValueError(f"approval {where}[{key!r}] = {rule!r} is invalid; allowed: {', '.join(POLICY_RULES)}")
        for key in self.rules:
            if key not in SAFETY_CLASSES or key == "read":
                raise ValueError(f"approval rules name {key!r}; allowed keys: write, destructive, external")

    @classmethod
    def allow_all(cls) -> "ApprovalPolicy":
        return cls(rules={k: "allow" for k in DEFAULT_RULES})

    @classmethod
    def deny_all(cls) -> "ApprovalPolicy":
        return cls(rules={k: "deny" for k in DEFAULT_RULES})

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | str | None, approver: Approver | None = None) -> "ApprovalPolicy":
        """``"ask"``/``"allow"``/``"deny"`` for every class, or a mapping of class -> rule."""
        if config is None:
            return cls(approver=approver)
        if isinstance(config, str):
            if config not in POLICY_RULES:
                raise ValueError(f"approval policy {config!r} is invalid; allowed: {', '.join(POLICY_RULES)}")
            return cls(rules={k: config for k in DEFAULT_RULES}, approver=approver)
        return cls(rules=dict(config), approver=approver)

    def rule_for(self, tool: str, safety: str) -> str:
        if tool in self.tools:
            return self.tools[tool]
        if safety == "read":
            return "allow"
        return self.rules.get(safety, "ask")

    def verdict(self, request: ApprovalRequest) -> Verdict:
        """allow / ask / deny for ``request`` with the reason and the roles that may approve."""
        if request.over_budget and request.tool not in self.tools:
            return Verdict("ask", f"a read estimated over the query budget asks ({request.over_budget})")
        rule = self.rule_for(request.tool, request.safety)
        verdict = Verdict(rule, {"allow": "allowed by policy", "ask": f"{request.safety} calls ask",
                                 "deny": f"the approval policy denies {request.safety} calls"}[rule])
        if request.tool not in self.tools and self.governance is not None and request.safety != "read":
            table = self.governance.verdict(request.environment, request.safety,
                                            most_sensitive(request.sensitivity))
            verdict = table if table is not None else verdict
        return hard_rails(verdict, environment=request.environment, safety=request.safety,
                          allow_writes=request.allow_writes, previewable=request.previewable)

    def asks(self, request: ApprovalRequest) -> bool:
        """Whether :meth:`decide` will call the approver for ``request``."""
        verdict = self.verdict(request)
        return verdict.action == "ask" and self.approver is not None and self._may_approve(verdict) is None

    def gate(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """A refusal decided before anything runs (deny, or no one who may approve), else None."""
        verdict = self.verdict(request)
        if verdict.action == "deny":
            return ApprovalDecision(False, verdict.reason)
        if verdict.action == "ask":
            if self.approver is None:
                return ApprovalDecision(False, "it needs approval and no approver is configured")
            refusal = self._may_approve(verdict)
            if refusal is not None:
                return ApprovalDecision(False, refusal)
        return None

    def _may_approve(self, verdict: Verdict) -> str | None:
        role = self.actor.role if self.actor is not None else None
        if verdict.approvers and role not in verdict.approvers:
            who = str(self.actor) if self.actor is not None else "the session"
            return (f"{verdict.reason} needs approval by role {' or '.join(verdict.approvers)}; "
                    f"{who} {'has role ' + role if role else 'has no role'}")
        return None

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """Approve or deny ``request``; never raises."""
        verdict = self.verdict(request)
        refusal = self.gate(request)
        if refusal is not None:
            return refusal
        if verdict.action == "allow":
            return ApprovalDecision(True, verdict.reason)
        if self.approver is None:
            return ApprovalDecision(False, "it needs approval and no approver is configured")
        try:
            answer = self.approver(request)
        except Exception as exc:  # a broken approver must not run the tool
            return ApprovalDecision(False, f"the approver failed ({type(exc).__name__}: {exc})", asked=True)
        if isinstance(answer, ApprovalDecision):
            return ApprovalDecision(answer.approved, answer.reason, asked=True)
        if isinstance(answer, bool):
            return ApprovalDecision(answer, "approved by the user" if answer else "the user denied it", asked=True)
        return ApprovalDecision(False, f"the approver returned {answer!r} instead of True/False", asked=True)
