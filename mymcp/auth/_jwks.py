"""Parse an issuer's JSON Web Key Set into verification keys (RSA, EC P-256, Ed25519).

Keys MyMCP cannot use are skipped rather than fatal, so an ordinary identity provider
that also publishes encryption keys or other curves still works: an entry is skipped when
its `kty`/`crv` is unsupported, `use` is present and not `sig`, `alg` is present and not a
signature algorithm we accept for that key type, or a well-formed `key_ops` lacks
`verify`. The whole set is refused (`jwks_invalid`) for malformed `key_ops`, a usable
entry with a bad `kid` or bad key material, private key members, duplicate kids, more
than 16 entries, or when no usable key remains.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from mymcp._strictjson import StrictJsonError, load_strict_json
from mymcp.auth._encoding import (
    b64url_decode,
    is_printable_ascii,
)
from mymcp.errors import DiscoveryError

__all__ = [
    "ACCEPTED_ALGORITHMS",
    "MAX_JWKS_BYTES",
    "PublicKey",
    "VerificationKey",
    "parse_jwks",
]

ACCEPTED_ALGORITHMS = frozenset({"RS256", "PS256", "ES256", "EdDSA"})
MAX_JWKS_BYTES = 64 * 1024
MAX_KEYS = 16
MAX_KID_LENGTH = 128
MIN_RSA_BITS = 2048
MAX_RSA_BITS = 8192

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey

_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


@dataclass(frozen=True, slots=True)
class VerificationKey:
    kid: str
    key: PublicKey
    algorithms: frozenset[str]


class _Skip(Exception):
    """This entry is not for us; leave it out of the key set."""


def _invalid() -> DiscoveryError:
    return DiscoveryError("jwks_invalid")


def _uint(entry: Mapping[str, object], name: str) -> int:
    """A strict, minimal base64urlUInt (no leading zero octet)."""
    text = entry.get(name)
    raw = b64url_decode(text) if isinstance(text, str) else None
    if not raw or raw[0] == 0:
        raise _invalid()
    return int.from_bytes(raw, "big")


def _octets(entry: Mapping[str, object], name: str, size: int) -> bytes:
    text = entry.get(name)
    raw = b64url_decode(text) if isinstance(text, str) else None
    if raw is None or len(raw) != size:
        raise _invalid()
    return raw


def _rsa(entry: Mapping[str, object]) -> PublicKey:
    n, e = _uint(entry, "n"), _uint(entry, "e")
    if not MIN_RSA_BITS <= n.bit_length() <= MAX_RSA_BITS or e < 3 or e % 2 == 0:
        raise _invalid()
    return rsa.RSAPublicNumbers(e, n).public_key()


def _ec(entry: Mapping[str, object]) -> PublicKey:
    if entry.get("crv") != "P-256":
        raise _Skip
    x, y = _octets(entry, "x", 32), _octets(entry, "y", 32)
    numbers = ec.EllipticCurvePublicNumbers(
        int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
    )
    try:
        return numbers.public_key()
    except ValueError:  # not a point on the curve
        raise _invalid() from None


def _okp(entry: Mapping[str, object]) -> PublicKey:
    if entry.get("crv") != "Ed25519":
        raise _Skip
    return ed25519.Ed25519PublicKey.from_public_bytes(_octets(entry, "x", 32))


# kty -> (algorithms the key may verify, loader)
_FAMILIES: dict[str, tuple[frozenset[str], Callable[[Mapping[str, object]], PublicKey]]] = {
    "RSA": (frozenset({"RS256", "PS256"}), _rsa),
    "EC": (frozenset({"ES256"}), _ec),
    "OKP": (frozenset({"EdDSA"}), _okp),
}


def _candidate(entry: object) -> VerificationKey:
    if not isinstance(entry, dict):
        raise _invalid()
    kty = entry.get("kty")
    family = _FAMILIES.get(kty) if isinstance(kty, str) else None
    if family is None:
        raise _Skip
    if "use" in entry and entry["use"] != "sig":
        raise _Skip
    if "key_ops" in entry:
        ops = entry["key_ops"]
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            raise _invalid()
        if len(set(ops)) != len(ops):
            raise _invalid()
        if "verify" not in ops:
            raise _Skip
    allowed, loader = family
    algorithms = allowed
    if "alg" in entry:
        alg = entry["alg"]
        if not isinstance(alg, str):
            raise _invalid()
        if alg not in allowed:
            raise _Skip
        algorithms = frozenset({alg})
    key = loader(entry)  # may skip an unsupported curve before the kid is judged
    if _PRIVATE_MEMBERS & entry.keys():
        raise _invalid()  # a published private key means anyone can mint tokens
    kid = entry.get("kid")
    if not isinstance(kid, str) or not is_printable_ascii(kid, max_length=MAX_KID_LENGTH):
        raise _invalid()
    return VerificationKey(kid=kid, key=key, algorithms=algorithms)


def parse_jwks(body: bytes) -> Mapping[str, VerificationKey]:
    """Return the usable keys by kid, or raise DiscoveryError('jwks_invalid')."""
    try:
        document = load_strict_json(body, max_bytes=MAX_JWKS_BYTES)
    except StrictJsonError:
        raise _invalid() from None
    if not isinstance(document, dict):
        raise _invalid()
    entries = document.get("keys")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_KEYS:
        raise _invalid()
    keys: dict[str, VerificationKey] = {}
    for entry in entries:
        try:
            candidate = _candidate(entry)
        except _Skip:
            continue
        except (ValueError, TypeError):
            raise _invalid() from None
        if candidate.kid in keys:
            raise _invalid()
        keys[candidate.kid] = candidate
    if not keys:
        raise _invalid()
    return types.MappingProxyType(keys)
