"""The bounded content policy shared by remember and revise (contract 5.8).

Signature detection, not semantic DLP: five detector families recognise the shapes of
private keys, credentials, compact JOSE tokens, US social-security numbers and payment
cards. Every checked field is tested against every family in a fixed order and only the
first match is reported, as a public field name plus one reason word. The matched value,
its offset and the detector that fired never leave this module.

Ordinary dotted text (versions such as 1.2.3, dates, hostnames, module paths such as
a.b.c) is deliberately outside every family: compact tokens need the ``eyJ`` JSON-header
evidence, and digit runs only count as cards in card-like groupings that pass Luhn.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Final

from .model import ErrorCode, MemoryOperationError

__all__ = ["PolicyReason", "enforce_content_policy", "find_disallowed"]


class PolicyReason(StrEnum):
    """The fixed reason vocabulary of a ``disallowed_content`` refusal."""

    PRIVATE_KEY_SHAPE = "private_key_shape"
    CREDENTIAL_SHAPE = "credential_shape"
    COMPACT_TOKEN_SHAPE = "compact_token_shape"  # noqa: S105 - a reason word
    GOVERNMENT_IDENTIFIER_SHAPE = "government_identifier_shape"
    PAYMENT_CARD_SHAPE = "payment_card_shape"


_PRIVATE_KEY: Final = re.compile(
    r"-----BEGIN (?:(?:RSA|EC|DSA|OPENSSH|ENCRYPTED) )?PRIVATE KEY-----"
    r"|-----BEGIN PGP PRIVATE KEY BLOCK-----"
)

# Word-ish boundaries written out, because ``\b`` treats ``_`` as a word character.
_START: Final = r"(?<![A-Za-z0-9])"
_CREDENTIAL_PATTERNS: Final = (
    # AWS access-key ids.
    _START + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])",
    # GitHub classic and fine-grained tokens.
    _START + r"gh[pousr]_[A-Za-z0-9]{20,}",
    _START + r"github_pat_[A-Za-z0-9_]{20,}",
    # Slack tokens.
    _START + r"xox[baprs]-[A-Za-z0-9-]{10,}",
    # Stripe-style live secret and restricted keys.
    _START + r"[rs]k_live_[A-Za-z0-9]{10,}",
    # Google API keys.
    _START + r"AIza[A-Za-z0-9_-]{35}",
    # OpenAI-style keys: optional dash-separated prefixes, then a long unbroken run, so
    # prose such as "sk-learn-is-a-library" is not mistaken for a key.
    _START + r"sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{20,}",
    # Authorization header text.
    r"(?i:authorization)[ \t]*[:=][ \t]*(?i:basic|bearer)[ \t]+[A-Za-z0-9._~+/-]{8,}=*",
    # Credential assignments: key = value or key: value with a value of 4+ characters.
    r"(?i:(?<![A-Za-z0-9])(?:password|passwd|pwd|secret|api[ _-]?key|access[ _-]?token"
    r"|refresh[ _-]?token|client[ _-]?secret))[\"']?[ \t]*[:=][ \t]*[\"']?[^\s\"']{4,}",
    # URLs carrying user:password userinfo.
    r"(?i:[a-z][a-z0-9+.-]*)://[^\s/@:]+:[^\s/@]+@",
)
_CREDENTIAL: Final = re.compile("|".join(f"(?:{p})" for p in _CREDENTIAL_PATTERNS))

# A JOSE compact serialisation: base64url JSON header ("eyJ" is '{"'), then two more
# dot-separated base64url segments (the last may be empty for an unsecured JWT).
_COMPACT_TOKEN: Final = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"
)

_SSN: Final = re.compile(r"(?<![0-9-])[0-9]{3}-[0-9]{2}-[0-9]{4}(?![0-9-])")

# Maximal runs of digit groups joined by single spaces or hyphens.
_DIGIT_RUN: Final = re.compile(r"(?<![0-9])[0-9]+(?:[ -][0-9]+)*(?![0-9])")
_SEPARATOR: Final = re.compile(r"[ -]")
_GROUP: Final = re.compile(r"[0-9]+")
_CARD_MIN, _CARD_MAX = 13, 19
# Separated card numbers are printed in groups of four (the last group may be shorter),
# or as 4-6-5 (American Express) and 4-6-4 (Diners Club).
_GROUPED_LAYOUTS: Final = frozenset({(4, 6, 5), (4, 6, 4)})


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card_layout(groups: list[str]) -> bool:
    lengths = tuple(len(group) for group in groups)
    total = sum(lengths)
    if not _CARD_MIN <= total <= _CARD_MAX:
        return False
    if len(lengths) == 1 or lengths in _GROUPED_LAYOUTS:
        return True
    return all(length == 4 for length in lengths[:-1]) and 1 <= lengths[-1] <= 4


def _has_payment_card(text: str) -> bool:
    for match in _DIGIT_RUN.finditer(text):
        run = match.group()
        groups = _GROUP.findall(run)
        separators = _SEPARATOR.findall(run)
        # Any consecutive groups may form the card (e.g. a card followed by a year), so
        # each window of at most 19 digits joined by one kind of separator is considered;
        # mixed separators ("2024-01-15 2024-02-16") never make one card.
        for start in range(len(groups)):
            digits = ""
            for end in range(start, len(groups)):
                if end > start and separators[end - 1] != separators[start]:
                    break
                digits += groups[end]
                if len(digits) > _CARD_MAX:
                    break
                if _card_layout(groups[start : end + 1]) and _luhn(digits):
                    return True
    return False


def find_disallowed(text: str) -> PolicyReason | None:
    """The first detector family that recognises ``text``, or None when it may be stored."""
    if _PRIVATE_KEY.search(text):
        return PolicyReason.PRIVATE_KEY_SHAPE
    if _CREDENTIAL.search(text):
        return PolicyReason.CREDENTIAL_SHAPE
    if _COMPACT_TOKEN.search(text):
        return PolicyReason.COMPACT_TOKEN_SHAPE
    if _SSN.search(text):
        return PolicyReason.GOVERNMENT_IDENTIFIER_SHAPE
    if _has_payment_card(text):
        return PolicyReason.PAYMENT_CARD_SHAPE
    return None


def enforce_content_policy(fields: Iterable[tuple[str, str | None]]) -> None:
    """Check ``(public field name, value)`` pairs in order; refuse on the first match.

    Raises ``disallowed_content`` carrying only the field name and the reason word.
    """
    for field, value in fields:
        if value is None:
            continue
        reason = find_disallowed(value)
        if reason is not None:
            raise MemoryOperationError(
                ErrorCode.DISALLOWED_CONTENT, field=field, reason=reason.value
            )
