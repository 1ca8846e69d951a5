"""Build host-configuration documents as TOML text for table-driven tests."""

from __future__ import annotations

from typing import Any

from mymcp.config import HostConfiguration, parse_host_configuration
from mymcp.errors import ConfigurationError

EXAMPLE_MANIFEST = "/opt/plugins/example/manifest.json"
BEARER_VERIFIER = "/etc/mymcp/operator-bearer.json"
ISSUER = "https://issuer.example"


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def toml_value(value: Any) -> str:
    """One TOML value; tables become inline tables, so any document fits on few lines."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{toml_string(key)} = {toml_value(item)}" for key, item in value.items())
        return "{" + items + "}"
    raise TypeError(type(value))


def to_toml(document: dict[str, Any]) -> str:
    return "".join(f"{toml_string(key)} = {toml_value(value)}\n" for key, value in document.items())


def minimal(version: int) -> dict[str, Any]:
    """The smallest valid document of `version`."""
    document: dict[str, Any] = {"schema_version": version}
    if version >= 3:
        document["authentication"] = {"anonymous_enabled": True}
    if version == 6:
        document["mcp"] = {"strict_protocol_version": True}
    if version >= 7:
        document["mcp"] = {
            "strict_protocol_version": True,
            "session_inactivity_timeout_seconds": 1800,
            "session_absolute_lifetime_seconds": 28800,
        }
    return document


def plugin(version: int, plugin_id: str = "example", enabled: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": plugin_id, "enabled": enabled}
    if version >= 2:
        entry["manifest_path"] = EXAMPLE_MANIFEST
        entry["module"] = "example_plugin"
    return entry


def adapter(
    adapter_id: str = "local",
    adapter_type: str = "custom-v1",
    enabled: bool = False,
    scheme: str = "bearer",
    profile: str | None = None,
) -> dict[str, Any]:
    route: dict[str, Any] = {"source": "authorization", "scheme": scheme}
    if profile is not None:
        route["profile"] = profile
    return {"id": adapter_id, "type": adapter_type, "enabled": enabled, "route": route}


def parse(document: dict[str, Any]) -> HostConfiguration:
    return parse_host_configuration(to_toml(document).encode())


def failure(document: dict[str, Any]) -> ConfigurationError:
    """The error `document` raises; fails the test if it loads."""
    try:
        parse(document)
    except ConfigurationError as exc:
        return exc
    raise AssertionError("document unexpectedly loaded")
