"""The approval guard a :class:`~.registry.ConnectorRegistry` installs into each harness.

Before a connector tool runs, :meth:`ApprovalGuard.guard` builds an
:class:`~.approval.ApprovalRequest` (the tool's effective safety class from its
classifier, the connector's ``environment`` and ``allow_writes``) and asks the
registry's :class:`~.approval.ApprovalPolicy`. A tool registered with
``previewed=True`` is only *gated* here (refusals, before any transaction
opens); it runs its preview and then asks through :meth:`ApprovalGuard.approver`
with the preflight summary. Every decision, wherever it is taken, goes the same
way: status line (:class:`ApprovalStep` while a person decides), the workspace
audit log (an approval the log cannot record is denied), the run log
(``event: approval``) and a warning notice for a denial.

Every approved ``write``/``destructive`` call counts against the run's
``max_write_operations`` (:func:`~.estimates.budget_for`); once it is spent,
further writes are refused before anything is asked or previewed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable

from harness_magic.core.execution.connectors.approval import ApprovalDecision, ApprovalRequest
from harness_magic.core.execution.connectors.estimates import budget_for
from harness_magic.core.execution.connectors.policy import WRITE_CLASSES
from harness_magic.core.transcript.audit import AuditError, record_decision
from harness_magic.core.transcript.events import ApprovalStep, Notice

if TYPE_CHECKING:
    from harness_magic.core.execution.connectors.host import ConnectorHost

__all__ = ["ApprovalGuard"]


class ApprovalGuard:
    """Decides and records approvals for one harness; ``registry.approval`` is read at each call."""

    def __init__(self, registry: Any, harness: ConnectorHost) -> None:
        self.registry = registry
        self.harness = harness

    def guard(self, spec: Any, use: Any, connector: Any) -> str | None:
        """``None`` to run the tool, or the refusal text the model gets."""
        safety, summary = spec.safety, ""
        classify = connector.classifier(spec.name) if connector is not None else None
        if classify is not None:
            try:
                safety, summary = classify(dict(use.input))
            # broad: a connector's classifier is connector code; its failure falls back to the tool's declared safety
            except Exception:
                safety, summary = spec.safety, ""
        if safety == "read" and spec.name not in self.registry.approval.tools:
            return None
        previewed = connector is not None and connector.previews(spec.name)
        request = ApprovalRequest(tool=spec.name, connector=spec.connector, safety=safety,
                                  arguments=dict(use.input), summary=summary, tool_use_id=use.id,
                                  environment=connector.environment if connector is not None else "dev",
                                  allow_writes=connector is not None and connector.allow_writes,
                                  previewable=previewed)
        spent = self._write_budget(request)
        if spent is not None:
            decision = self.record(request, spent, 0.0)
        elif previewed:  # refusals now, before a transaction opens; the tool asks after its preview
            refusal = self.registry.approval.gate(request)
            if refusal is None:
                return None
            decision = self.record(request, refusal, 0.0)
        else:
            decision = self.decide(request)
        if decision.approved:
            return None
        article = "an" if safety[:1] in "aeiou" else "a"
        return (f"Not run: {spec.name} is {article} {safety} call and was denied ({decision.reason}). "
                "Nothing was executed or changed.")

    def approver(self, tool: str, connector: Any) -> Callable[[ApprovalRequest], ApprovalDecision]:
        """``approve(request)`` for a previewed tool; the request gets the connector's governance fields."""

        def approve(request: ApprovalRequest) -> ApprovalDecision:
            run = self.harness.current_run
            use = run.current_tool_use if run is not None else None
            return self.decide(dataclasses.replace(
                request, tool=tool, connector=connector.name, environment=connector.environment,
                allow_writes=connector.allow_writes, tool_use_id=use.id if use is not None else request.tool_use_id))

        return approve

    def _write_budget(self, request: ApprovalRequest) -> ApprovalDecision | None:
        """A refusal when ``request`` is a write and the run's ``max_write_operations`` is spent, else None."""
        if request.safety not in WRITE_CLASSES:
            return None
        refusal = budget_for(self.harness).write_refusal(self.harness.current_run)
        return ApprovalDecision(False, refusal) if refusal is not None else None

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """Ask the policy (showing the wait on the status line) and record the decision; an approved write
        counts against the run's ``max_write_operations``."""
        spent = self._write_budget(request)
        if spent is not None:
            return self.record(request, spent, 0.0)
        policy = self.registry.approval
        asks = policy.asks(request)
        if asks:  # the status line says so while the user decides
            self.harness.emit(ApprovalStep(tool=request.tool, tool_use_id=request.tool_use_id))
        asked = time.monotonic()
        decision: ApprovalDecision = policy.decide(request)
        waited = time.monotonic() - asked
        if asks:
            self.harness.emit(ApprovalStep(tool=request.tool, tool_use_id=request.tool_use_id, wait_s=waited,
                                            approved=decision.approved))
        decision = self.record(request, decision, waited)
        if decision.approved and request.safety in WRITE_CLASSES:
            budget_for(self.harness).count_write(self.harness.current_run)
        return decision

    def record(self, request: ApprovalRequest, decision: ApprovalDecision, waited: float) -> ApprovalDecision:
        """Audit log, run log, approval wait and a notice for a denial; returns the final decision."""
        use_id = request.tool_use_id
        try:  # every decision reaches the workspace audit log; one that cannot be recorded does not run
            record_decision(self.harness.audit, approved=decision.approved, asked=decision.asked,
                            tool=request.tool, connector=request.connector, safety=request.safety,
                            summary=request.summary, reason=decision.reason, tool_use_id=use_id,
                            environment=request.environment)
        except AuditError as exc:
            if decision.approved:
                decision = ApprovalDecision(False, f"the audit log cannot record the approval: {exc}")
        run = self.harness.current_run
        if run is not None:
            waits = run.approval_wait_s
            if use_id is not None:  # shown apart from the tool's own time
                waits[use_id] = waits.get(use_id, 0.0) + waited
            run.logger.write("event", event="approval", tool=request.tool, safety=request.safety,
                             summary=request.summary, approved=decision.approved, reason=decision.reason,
                             tool_use_id=use_id, turn=run.turn, wait_s=round(waited, 6),
                             environment=request.environment, previewed=request.preflight is not None)
        if not decision.approved:
            self.harness.emit(Notice(text=f"Denied {request.tool} ({request.safety}): {decision.reason}",
                                     level="warning"))
        return decision
