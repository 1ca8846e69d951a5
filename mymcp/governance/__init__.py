"""Governance: per-principal tool policy and the tamper-evident security audit.

Both are composed once at startup, after the runtime: `Policy` resolves its selectors
against the composed tools, `open_audit` opens the audit directory. The transport asks
the policy for each caller's `PolicyView` and records every decision in the `AuditLog`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mymcp.config import HostConfiguration, xdg_directory
from mymcp.governance.audit import (
    GENESIS_HASH,
    AuditLog,
    AuditRecord,
    VerifyResult,
    canonical_json,
    read_records,
    verify_audit,
)
from mymcp.governance.policy import Decision, Policy, PolicyView, effect_classes

__all__ = [
    "GENESIS_HASH",
    "AuditLog",
    "AuditRecord",
    "Decision",
    "Governance",
    "Policy",
    "PolicyView",
    "VerifyResult",
    "audit_directory",
    "canonical_json",
    "effect_classes",
    "open_audit",
    "read_records",
    "verify_audit",
]


@dataclass(frozen=True, slots=True)
class Governance:
    """The policy every request is decided by and the audit it is recorded in (or None)."""

    policy: Policy
    audit: AuditLog | None = None


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
