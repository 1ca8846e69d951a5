"""Parse an issuer's JSON Web Key Set into verification keys (RSA, EC P-256, Ed25519).

One key MyMCP cannot use does not stop the server: identity providers publish encryption
keys, other curves and old keys beside the signing keys, and a server that refused the
whole set for one of them could not start. So an entry is skipped, and never trusted,
when it is not a signing key for us (`use` other than `sig`, `key_ops` without `verify`),
when MyMCP does not support it (a `kty` other than RSA, EC or OKP, a curve other than
P-256 or Ed25519, an `alg` we do not accept for its type), or when it is faulty (no
`kid`, or one that is not 1-128 printable ASCII characters; malformed `key_ops` or `alg`;
an RSA modulus outside 2048-8192 bits or a bad exponent; members that are not canonical
base64url of the right size; a point off the curve). Each skipped entry is logged once
per download, with its kid and a one-word reason, never with key material.

The whole set is refused (`jwks_invalid`) only for faults of the set itself, or ones that
make it untrustworthy: it is no strict JSON object with a `keys` array; it has more than
16 entries (skipped ones count: the bound limits the work a download can cause); an entry
is no JSON object; any entry, even one that would be skipped, holds private or secret key
members (the provider publishes a key that lets anyone sign, which is worth stopping
for); two usable keys share a kid (which one signs a token would be ambiguous); or no
usable key is left. Every refusal carries a detail naming the reason and, where there is
one, the entry and its kid, for `mymcp check`.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from mymcp._base64url import (
    b64url_decode,
)
from mymcp._escaping import is_visible_ascii
from mymcp._strictjson import StrictJsonError, load_strict_json
from mymcp.errors import DiscoveryError

__all__ = [
    "MAX_JWKS_BYTES",
    "PublicKey",
    "VerificationKey",
    "parse_jwks",
]

MAX_JWKS_BYTES = 64 * 1024
MAX_KEYS = 16
MAX_KID_LENGTH = 128
MIN_RSA_BITS = 2048
MAX_RSA_BITS = 8192

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey

_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
# Skips that only say a key is meant for something else (Keycloak lists an encryption
# key in every realm): worth a line, but no warning the operator would learn to ignore.
_NOT_FOR_SIGNING = frozenset({"use", "key_ops"})

# Where the other authentication lines go (composition at startup, key downloads while
# serving): a skipped key is part of the same story.
_LOG = logging.getLogger("mymcp.host.authentication")


@dataclass(frozen=True, slots=True)
class VerificationKey:
    kid: str
    key: PublicKey
    algorithms: frozenset[str]


class _Skip(Exception):
    """This entry is no key we can verify with; leave it out of the key set.

    `reason` is one fixed word for the log line; `detail` says the same for the
    operator's terminal, without a ';' (that separates the entries of a refusal)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def _invalid(detail: str) -> DiscoveryError:
    return DiscoveryError("jwks_invalid", detail=detail)


def _kid_of(entry: Mapping[str, object]) -> str | None:
    """The entry's kid when it is one we can use and show (1-128 printable ASCII
    characters, so it cannot break a log line), else None."""
    kid = entry.get("kid")
    if isinstance(kid, str) and len(kid) <= MAX_KID_LENGTH and is_visible_ascii(kid):
        return kid
    return None


def _entry_name(index: int, kid: str | None) -> str:
    return f"keys[{index}] (kid {kid!r})" if kid is not None else f"keys[{index}] (no usable kid)"


def _said(value: object) -> str:
    """A provider's short label (`kty`, `crv`, `use`, `alg`) as the terminal may show it."""
    if isinstance(value, str) and len(value) <= 32 and is_visible_ascii(value):
        return repr(value)
    return "missing" if value is None else "not a short printable string"


def _uint(entry: Mapping[str, object], name: str) -> int:
    """A strict, minimal base64urlUInt (no leading zero octet)."""
    text = entry.get(name)
    raw = b64url_decode(text) if isinstance(text, str) else None
    if not raw or raw[0] == 0:
        raise _Skip(
            "encoding",
            f"{name!r} is missing or not canonical base64url without a leading zero octet",
        )
    return int.from_bytes(raw, "big")


def _octets(entry: Mapping[str, object], name: str, size: int) -> bytes:
    text = entry.get(name)
    raw = b64url_decode(text) if isinstance(text, str) else None
    if raw is None or len(raw) != size:
        raise _Skip("encoding", f"{name!r} is missing or not {size} octets of canonical base64url")
    return raw


def _rsa(entry: Mapping[str, object]) -> PublicKey:
    n, e = _uint(entry, "n"), _uint(entry, "e")
    bits = n.bit_length()
    if not MIN_RSA_BITS <= bits <= MAX_RSA_BITS:
        raise _Skip(
            "rsa_size", f"the RSA modulus has {bits} bits, not {MIN_RSA_BITS} to {MAX_RSA_BITS}"
        )
    if e < 3 or e % 2 == 0:
        raise _Skip("rsa_exponent", "the RSA exponent must be odd and at least 3")
    try:
        return rsa.RSAPublicNumbers(e, n).public_key()
    except ValueError:
        raise _Skip("key_material", "the RSA key cannot be loaded") from None


def _ec(entry: Mapping[str, object]) -> PublicKey:
    crv = entry.get("crv")
    if crv != "P-256":
        raise _Skip("curve", f"curve {_said(crv)} is not P-256")
    x, y = _octets(entry, "x", 32), _octets(entry, "y", 32)
    numbers = ec.EllipticCurvePublicNumbers(
        int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
    )
    try:
        return numbers.public_key()
    except ValueError:
        raise _Skip("key_material", "the point is not on the P-256 curve") from None


def _okp(entry: Mapping[str, object]) -> PublicKey:
    crv = entry.get("crv")
    if crv != "Ed25519":
        raise _Skip("curve", f"curve {_said(crv)} is not Ed25519")
    try:
        return ed25519.Ed25519PublicKey.from_public_bytes(_octets(entry, "x", 32))
    except ValueError:
        raise _Skip("key_material", "the Ed25519 key cannot be loaded") from None


# kty -> (algorithms the key may verify, loader)
_FAMILIES: dict[str, tuple[frozenset[str], Callable[[Mapping[str, object]], PublicKey]]] = {
    "RSA": (frozenset({"RS256", "PS256"}), _rsa),
    "EC": (frozenset({"ES256"}), _ec),
    "OKP": (frozenset({"EdDSA"}), _okp),
}


def _candidate(entry: Mapping[str, object]) -> VerificationKey:
    """The entry as a verification key, or _Skip saying why it is none."""
    # What the key is for comes first: a key meant for encryption is no fault of the set,
    # whatever its type.
    if "use" in entry and entry["use"] != "sig":
        raise _Skip("use", f"'use' is {_said(entry['use'])}, not 'sig'")
    if "key_ops" in entry:
        ops = entry["key_ops"]
        if (
            not isinstance(ops, list)
            or not all(isinstance(op, str) for op in ops)
            or len(set(ops)) != len(ops)
        ):
            raise _Skip("key_ops_invalid", "'key_ops' is not a list of distinct strings")
        if "verify" not in ops:
            raise _Skip("key_ops", "'key_ops' does not list 'verify'")
    kty = entry.get("kty")
    family = _FAMILIES.get(kty) if isinstance(kty, str) else None
    if family is None:
        raise _Skip("kty", f"key type {_said(kty)} is not RSA, EC or OKP")
    allowed, loader = family
    algorithms = allowed
    if "alg" in entry:
        alg = entry["alg"]
        if not isinstance(alg, str) or alg not in allowed:
            accepted = " or ".join(sorted(allowed))
            raise _Skip("alg", f"'alg' is {_said(alg)}, not {accepted}")
        algorithms = frozenset({alg})
    kid = _kid_of(entry)
    if kid is None:
        raise _Skip("kid", "it has no 'kid' of 1 to 128 printable ASCII characters")
    return VerificationKey(kid=kid, key=loader(entry), algorithms=algorithms)


def _log_skipped(skipped: list[tuple[int, str | None, _Skip]], *, quiet: bool) -> None:
    for index, kid, skip in skipped:
        warn = not quiet and skip.reason not in _NOT_FOR_SIGNING
        level = logging.WARNING if warn else logging.INFO
        # The kid is printable ASCII of at most 128 characters (otherwise "-"), so it
        # cannot break the line; the reason is one of this module's words.
        _LOG.log(
            level,
            "jwks_key outcome=skipped kid=%s reason=%s entry=%d",
            kid if kid is not None else "-",
            skip.reason,
            index,
        )


def parse_jwks(body: bytes, *, quiet: bool = False) -> Mapping[str, VerificationKey]:
    """Return the usable keys by kid, or raise DiscoveryError('jwks_invalid') with a
    detail naming the reason. Logs each skipped entry once (see the module's notes),
    at INFO only when `quiet`: a download while serving, which any token naming an
    unknown key can cause once a minute, must not let anyone fill the log with warnings
    the start has already given."""
    try:
        document = load_strict_json(body, max_bytes=MAX_JWKS_BYTES)
    except StrictJsonError as exc:
        raise _invalid(f"the key set is not one strict JSON document ({exc.code})") from None
    if not isinstance(document, dict):
        raise _invalid("the key set is not a JSON object")
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise _invalid("the key set has no 'keys' array")
    if len(entries) > MAX_KEYS:
        raise _invalid(
            f"the key set has {len(entries)} entries; at most {MAX_KEYS} are read, "
            "skipped ones included"
        )
    keys: dict[str, VerificationKey] = {}
    positions: dict[str, int] = {}
    skipped: list[tuple[int, str | None, _Skip]] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _invalid(f"keys[{index}] is not a JSON object")
        kid = _kid_of(entry)
        private = sorted(_PRIVATE_MEMBERS & entry.keys())
        if private:
            # Checked before anything else, so even an entry that would be skipped counts.
            raise _invalid(
                f"{_entry_name(index, kid)} publishes private or secret key members "
                f"({', '.join(private)}): anyone who reads the key set could sign tokens; "
                "the provider must publish public keys only"
            )
        try:
            candidate = _candidate(entry)
        except _Skip as skip:
            skipped.append((index, kid, skip))
            continue
        if candidate.kid in keys:
            raise _invalid(
                f"keys[{positions[candidate.kid]}] and keys[{index}] are usable keys with the "
                f"same kid {candidate.kid!r}: which one signs a token would be ambiguous"
            )
        keys[candidate.kid] = candidate
        positions[candidate.kid] = index
    _log_skipped(skipped, quiet=quiet)
    if not keys:
        if not skipped:
            raise _invalid("no usable signing key: the 'keys' array is empty")
        reasons = "; ".join(
            f"{_entry_name(index, kid)}: {skip.detail}" for index, kid, skip in skipped
        )
        raise _invalid(f"no usable signing key: {reasons}")
    return types.MappingProxyType(keys)
