"""Governance: per-principal tool policy, exact-call approval and the security audit.

All three are composed once at startup, after the runtime: `Policy` and `Approvals`
resolve their selectors against the composed tools, `open_audit` opens the audit
directory. The transport asks the policy for each caller's `PolicyView`, asks
`Approvals` whether a call may run yet, and records every decision in the `AuditLog`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mymcp.config import HostConfiguration, xdg_directory
from mymcp.governance.approval import (
    MAX_APPROVAL_ARGUMENT_BYTES,
    Approval,
    ApprovalError,
    Approvals,
    ApprovalState,
    Verdict,
    approval_required_tools,
    rfc3339,
)
from mymcp.governance.audit import AuditLog
from mymcp.governance.audit_format import (
    GENESIS_HASH,
    NUMBER,
    WORD,
    AuditRecord,
    RecordShape,
    canonical_json,
    check_audit_directory,
    misplaced_segments,
)
from mymcp.governance.audit_verify import (
    VerifiedPrefix,
    VerifyResult,
    read_records,
    verify_audit,
)
from mymcp.governance.policy import Decision, Policy, PolicyView, effect_classes

__all__ = [
    "GENESIS_HASH",
    "MAX_APPROVAL_ARGUMENT_BYTES",
    "NUMBER",
    "WORD",
    "Approval",
    "ApprovalError",
    "ApprovalState",
    "Approvals",
    "AuditLog",
    "AuditRecord",
    "Decision",
    "Governance",
    "Policy",
    "PolicyView",
    "RecordShape",
    "Verdict",
    "VerifiedPrefix",
    "VerifyResult",
    "approval_required_tools",
    "audit_directory",
    "canonical_json",
    "check_audit_directory",
    "misplaced_segments",
    "effect_classes",
    "open_audit",
    "read_records",
    "rfc3339",
    "verify_audit",
]


@dataclass(frozen=True, slots=True)
class Governance:
    """The policy every request is decided by, the approvals calls may wait for (None
    when `[approval]` selects no tool) and the audit everything is recorded in (or None)."""

    policy: Policy
    audit: AuditLog | None = None
    approvals: Approvals | None = None


def audit_directory(
    configuration: HostConfiguration,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Path:
    """`[audit] directory`, or `$XDG_STATE_HOME/mymcp/audit` (`~/.local/state/mymcp/audit`)."""
    if configuration.audit.directory is not None:
        return configuration.audit.directory
    return xdg_directory("XDG_STATE_HOME", environ, home) / "audit"


def open_audit(
    configuration: HostConfiguration,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> AuditLog | None:
    """The audit log the configuration asks for, or None when auditing is off.

    Raises AuditError (`audit_unavailable`) when the audit directory cannot be used.
    """
    settings = configuration.audit
    if not settings.enabled:
        return None
    return AuditLog(
        audit_directory(configuration, environ, home),
        max_segment_bytes=settings.max_segment_bytes,
        max_segments=settings.max_segments,
    )
