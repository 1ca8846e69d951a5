"""Authentication: evidence routing, operator bearer tokens, OAuth JWT validation.

The transport builds one `Authenticator` at startup with `build_authenticator` and calls
`authenticate` for every request before it reads the body. The CLI provisions operator
bearer credentials with `create_token`, `list_credentials` and `revoke_token`.
"""

from mymcp.auth._compose import build_authenticator
from mymcp.auth._discovery import HttpClientFactory
from mymcp.auth._evidence import offers_bearer_token
from mymcp.auth._oauth import MAX_SCOPES, Clock, SystemClock, is_scope_token
from mymcp.auth._principal import (
    ANONYMOUS,
    CONSOLE,
    LOCAL,
    AuthFailure,
    Identity,
    Principal,
    is_valid_subject,
)
from mymcp.auth._provisioning import (
    CredentialProvisioningError,
    create_token,
    list_credentials,
    revoke_token,
)
from mymcp.auth._router import Authenticator

__all__ = [
    "ANONYMOUS",
    "CONSOLE",
    "LOCAL",
    "MAX_SCOPES",
    "AuthFailure",
    "Authenticator",
    "Clock",
    "CredentialProvisioningError",
    "HttpClientFactory",
    "Identity",
    "Principal",
    "SystemClock",
    "build_authenticator",
    "create_token",
    "is_scope_token",
    "is_valid_subject",
    "list_credentials",
    "offers_bearer_token",
    "revoke_token",
]
