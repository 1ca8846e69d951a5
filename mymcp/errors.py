"""The one exception tree of MyMCP: every failure the host reports carries a stable code."""

from __future__ import annotations

__all__ = [
    "AuditError",
    "ConfigurationError",
    "ExternalPluginLoadError",
    "HostAuthenticationCompositionError",
    "HostRuntimeCompositionError",
    "ManifestError",
    "MnemosyneSettingsError",
    "MyMCPError",
]


class MyMCPError(Exception):
    """Base of every MyMCP error: a stable machine code plus a fixed, content-free message.

    Messages never carry paths, values or parser details, so they are safe to log and print.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} (code={self.code})"


class ConfigurationError(MyMCPError):
    """The host configuration file is unsafe, unreadable or invalid."""


class ManifestError(MyMCPError):
    """A plugin manifest, or a plugin's parity with its manifest, is invalid."""


class ExternalPluginLoadError(MyMCPError):
    """An operator-declared plugin could not be preflighted, imported or composed."""


class HostRuntimeCompositionError(MyMCPError):
    """Tool surfaces collided or could not be bound into one runtime."""


class HostAuthenticationCompositionError(MyMCPError):
    """The authentication configuration cannot be composed into a router."""


class MnemosyneSettingsError(MyMCPError):
    """The Mnemosyne settings (environment or ~/.mnemosyne/config.toml) are invalid."""


class AuditError(MyMCPError):
    """The security audit log cannot be opened or written."""
