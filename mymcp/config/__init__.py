"""Host configuration: where it lives, how it is read, and the frozen values it yields."""

from mymcp.config._grammar import (
    BUNDLED_PLUGIN_ID,
    CONFIGURATION_MESSAGES,
    MAX_AUTHENTICATION_ADAPTERS,
    MAX_CONFIGURATION_BYTES,
    MAX_SESSION_LIFETIME_SECONDS,
    OAUTH_JWT_ADAPTER_TYPE,
    OPERATOR_BEARER_ADAPTER_TYPE,
    SUPPORTED_SCHEMA_VERSIONS,
    is_issuer,
)
from mymcp.config._loader import (
    load_host_configuration,
    parse_host_configuration,
    validate_semantics,
)
from mymcp.config._location import config_path
from mymcp.config._model import (
    DEFAULT_ABSOLUTE_LIFETIME_SECONDS,
    DEFAULT_INACTIVITY_TIMEOUT_SECONDS,
    AdapterDeclaration,
    AdapterRoute,
    AuthenticationSettings,
    HostConfiguration,
    McpSettings,
    PluginDeclaration,
    ServerSettings,
)

__all__ = [
    "BUNDLED_PLUGIN_ID",
    "CONFIGURATION_MESSAGES",
    "DEFAULT_ABSOLUTE_LIFETIME_SECONDS",
    "DEFAULT_INACTIVITY_TIMEOUT_SECONDS",
    "MAX_AUTHENTICATION_ADAPTERS",
    "MAX_CONFIGURATION_BYTES",
    "MAX_SESSION_LIFETIME_SECONDS",
    "OAUTH_JWT_ADAPTER_TYPE",
    "OPERATOR_BEARER_ADAPTER_TYPE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "AdapterDeclaration",
    "AdapterRoute",
    "AuthenticationSettings",
    "HostConfiguration",
    "McpSettings",
    "PluginDeclaration",
    "ServerSettings",
    "config_path",
    "is_issuer",
    "load_host_configuration",
    "parse_host_configuration",
    "validate_semantics",
]
