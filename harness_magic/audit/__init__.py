"""The workspace audit log, for people and tools outside a session.

``python -m harness_magic.audit verify PATH`` checks a log's hash chain;
``python -m harness_magic.audit tail PATH [-n N]`` prints its latest records.
The log itself (writing, the chain, verification) is
:mod:`harness_magic.core.transcript.audit`.
"""

from harness_magic.core.transcript.audit import AUDIT_KINDS, AuditError, AuditLog, Verification, read_tail, verify_file

__all__ = ["AUDIT_KINDS", "AuditError", "AuditLog", "Verification", "read_tail", "verify_file"]
