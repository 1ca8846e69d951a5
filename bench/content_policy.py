"""Content-policy benchmark: the worst case per field, against baselines from the same run.

Every checked field of ``memory_remember`` and ``memory_revise`` goes through
``find_disallowed``; the longest is ``content`` at 4,000 characters. This script builds
inputs of exactly that length that are hard for each detector family (long runs of a
pattern's prefix that never complete, dense near-misses, digit groups with no Luhn-valid
window, text that needs Unicode folding or several readings, ...) plus ordinary prose
and code, and times one call per field on each:

* ``policy``: the current ``find_disallowed``;
* ``legacy``: the filter it replaced, copied below as ``legacy_find_disallowed`` (its URL
  pattern backtracks quadratically, so it gets fewer repetitions);
* ``isascii``: a plain ``str.isascii()`` pass over the same text, the floor of any check.

Prints a Markdown table of wall-clock p50 / p95 milliseconds per field (and the p50 of
this thread's CPU time, which leaves out time other processes held the core) and the
worst case; the target is a wall-clock p50 of at most 2 ms per field. The one-time cost
of building the Unicode folding table (on the first non-ASCII field after start) is
reported separately.

    python bench/content_policy.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mymcp.plugins.mnemosyne.memory import CONTENT_MAX, find_disallowed  # noqa: E402

# --- the filter this replaced, verbatim apart from names ------------------------------------

_LEGACY_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:(?:RSA|EC|DSA|OPENSSH|ENCRYPTED) )?PRIVATE KEY-----"
    r"|-----BEGIN PGP PRIVATE KEY BLOCK-----"
)
_LEGACY_START = r"(?<![A-Za-z0-9])"
_LEGACY_CREDENTIAL = re.compile(
    "|".join(
        f"(?:{p})"
        for p in (
            _LEGACY_START + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])",
            _LEGACY_START + r"gh[pousr]_[A-Za-z0-9]{20,}",
            _LEGACY_START + r"github_pat_[A-Za-z0-9_]{20,}",
            _LEGACY_START + r"xox[baprs]-[A-Za-z0-9-]{10,}",
            _LEGACY_START + r"[rs]k_live_[A-Za-z0-9]{10,}",
            _LEGACY_START + r"AIza[A-Za-z0-9_-]{35}",
            _LEGACY_START + r"sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{20,}",
            r"(?i:authorization)[ \t]*[:=][ \t]*(?i:basic|bearer)[ \t]+[A-Za-z0-9._~+/-]{8,}=*",
            r"(?i:(?<![A-Za-z0-9])(?:password|passwd|pwd|secret|api[ _-]?key|access[ _-]?token"
            r"|refresh[ _-]?token|client[ _-]?secret))[\"']?[ \t]*[:=][ \t]*[\"']?[^\s\"']{4,}",
            r"(?i:[a-z][a-z0-9+.-]*)://[^\s/@:]+:[^\s/@]+@",
        )
    )
)
_LEGACY_COMPACT_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"
)
_LEGACY_SSN = re.compile(r"(?<![0-9-])[0-9]{3}-[0-9]{2}-[0-9]{4}(?![0-9-])")
_LEGACY_DIGIT_RUN = re.compile(r"(?<![0-9])[0-9]+(?:[ -][0-9]+)*(?![0-9])")
_LEGACY_LAYOUTS = frozenset({(4, 6, 5), (4, 6, 4)})


def _legacy_luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _legacy_card_layout(groups: list[str]) -> bool:
    lengths = tuple(len(group) for group in groups)
    if not 13 <= sum(lengths) <= 19:
        return False
    if len(lengths) == 1 or lengths in _LEGACY_LAYOUTS:
        return True
    return all(length == 4 for length in lengths[:-1]) and 1 <= lengths[-1] <= 4


def _legacy_has_payment_card(text: str) -> bool:
    for match in _LEGACY_DIGIT_RUN.finditer(text):
        run = match.group()
        groups = re.findall(r"[0-9]+", run)
        separators = re.findall(r"[ -]", run)
        for start in range(len(groups)):
            digits = ""
            for end in range(start, len(groups)):
                if end > start and separators[end - 1] != separators[start]:
                    break
                digits += groups[end]
                if len(digits) > 19:
                    break
                if _legacy_card_layout(groups[start : end + 1]) and _legacy_luhn(digits):
                    return True
    return False


def legacy_find_disallowed(text: str) -> str | None:
    """The previous filter: five families, no normalisation."""
    if _LEGACY_PRIVATE_KEY.search(text):
        return "private_key_shape"
    if _LEGACY_CREDENTIAL.search(text):
        return "credential_shape"
    if _LEGACY_COMPACT_TOKEN.search(text):
        return "compact_token_shape"
    if _LEGACY_SSN.search(text):
        return "government_identifier_shape"
    if _legacy_has_payment_card(text):
        return "payment_card_shape"
    return None


# --- inputs -------------------------------------------------------------------------------

FIELD = CONTENT_MAX
rng = random.Random(20261130)


def fill(piece: str) -> str:
    """``piece`` repeated to exactly the field length."""
    return (piece * (FIELD // len(piece) + 1))[:FIELD]


def _weights(group: str) -> int:
    # A four-digit group's share of the Luhn sum of a 16-digit window: its first and
    # third digits are doubled wherever the group stands in the window.
    total = 0
    for index, char in enumerate(group):
        value = int(char)
        if index % 2 == 0:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total


def groups_without_card(count: int) -> str:
    """Four-digit groups of which no four consecutive ones pass Luhn."""
    groups: list[str] = []
    while len(groups) < count:
        candidate = f"{rng.randrange(10000):04d}"
        window = [*groups[-3:], candidate]
        if len(window) == 4 and sum(map(_weights, window)) % 10 == 0:
            continue
        groups.append(candidate)
    return " ".join(groups)


def mixed_separators(text: str) -> str:
    """``text`` with its single spaces replaced by a cycle of other separators."""
    cycle = iter([" ", "-", ".", "/", "  ", " - "] * len(text))
    return re.sub(" ", lambda _: next(cycle), text)


def years_passing_luhn(tail: str = "") -> str:
    """Years whose every 16-digit window passes Luhn: the layout and Luhn checks all
    succeed and only the list-of-years rule refuses each window. ``tail`` ends the text."""
    while True:
        years = [f"{rng.randrange(1900, 2100)}" for _ in range(4)]
        if sum(map(_weights, years)) % 10 == 0:
            return fill(" ".join(years) + " ")[: FIELD - len(tail)] + tail


PROSE_WORDS = (
    "the memory store keeps notes about projects decisions and people while the server "
    "checks every field for secrets before anything is written to disk and version 1.2.3 "
    "shipped on 2024-05-06 after review by 3 people in room 101"
)


def prose() -> str:
    words = PROSE_WORDS.split(" ")
    return " ".join(rng.choice(words) for _ in range(FIELD))[:FIELD]


def mixed_unicode() -> str:
    """Blanks, two-way and plain lookalikes, digits and dashes at random: every reading."""
    pieces = ["a", "1", "-", " ", "\u2003", "\u2009", "\u041e", "\u0430", "\u0399"]
    return "".join(rng.choice(pieces) for _ in range(FIELD))


CODE = fill(
    "def load(path: Path) -> dict[str, Any]:\n"
    "    with path.open() as handle:\n"
    "        data = json.load(handle)\n"
    '    return {key: value for key, value in data.items() if key != "password"}\n'
)

CASES: list[tuple[str, str, str]] = [
    # (family, description, text)
    ("ordinary", "English prose", prose()),
    ("ordinary", "Python code", CODE),
    ("url userinfo", "a x 4000 (quadratic before)", fill("a")),
    ("url userinfo", "a: x 2000", fill("a:")),
    ("url userinfo", "://a: repeated", fill("://a:")),
    ("url userinfo", "x:// then a:a:a...", "x://" + fill("a:")[4:]),
    ("private key", "dashes", fill("-")),
    ("private key", "--begin words, no key", fill("--begin a b c ")),
    ("private key", "PuTTY prefix without version", fill("PuTTY-User-Key-File-")),
    ("vendor token", "AKIA + 15", fill("AKIA" + "A" * 15 + " ")),
    ("vendor token", "ghp_ + 19", fill("ghp_" + "a" * 19 + " ")),
    ("vendor token", "sk- repeated", fill("sk-")),
    ("vendor token", "sk-a- repeated", fill("sk-a-")),
    ("vendor token", "Q~ repeated", fill("Q~")),
    ("vendor token", "mymcp1. + 31 hex", fill("mymcp1." + "a" * 31 + ".")),
    ("key=value", "password=abc", fill("password=abc ")),
    ("key=value", "dense key words", fill("a_key-key-key-")),
    ("key=value", "token= + 15 letters", fill("token=" + "a" * 15 + " ")),
    ("key=value", "aws_secret_access_key, no value", fill("aws_secret_access_key ")),
    ("key=value", "secretary", fill("secretary ")),
    ("password prose", "password is required", fill("password is required ")),
    ("password prose", "password for a b c", fill("password for a b c ")),
    ("bearer", "bearer + 15 letters", fill("bearer " + "a" * 15 + " ")),
    ("compact token", "eyJ repeated", fill("eyJ")),
    ("compact token", " eyJ + 7 + .", fill(" eyJaaaaaaa.")),
    ("SSN", "123-45- repeated", fill("123-45-")),
    ("SSN", "ssn label, no number", fill("ssn ")),
    ("SSN", "ssn label + 24 letters", fill("ssn " + "a" * 24)),
    ("SSN", "123 45 678 repeated", fill("123 45 678 ")),
    ("card", "digits x 4000", fill("1")),
    ("card", "1 x 2000", fill("1 ")),
    ("card", "12 x 1333", fill("12 ")),
    ("card", "4-digit groups, no Luhn window", fill(groups_without_card(FIELD // 5 + 1))),
    ("card", "years, every window Luhn-valid", years_passing_luhn()),
    ("card", "the same, ending in a non-year", years_passing_luhn(" 9999")),
    ("card", "4-6 groups", fill("4111 111111 ")),
    ("card", "4-digit groups, mixed separators", fill(mixed_separators(groups_without_card(800)))),
    ("card", "hidden characters between digits", fill("1\u200b")),
    ("unicode", "zero-width spaces", fill("a\u200b")),
    ("unicode", "Cyrillic", fill("\u0430")),
    ("unicode", "CJK", fill("\u4e2d")),
    ("unicode", "emoji", fill("\U0001f600")),
    ("unicode", "combining accents", fill("e\u0301")),
    ("unicode", "fullwidth", fill("\uff41")),
    ("unicode", "tag characters", fill("\U000e0041")),
    ("unicode", "dotted capital I", fill("\u0130")),
    ("unicode", "Arabic-Indic digits", fill("\u0661 ")),
    ("unicode", "thin spaces between words", prose().replace(" ", "\u2009")),
    ("unicode", "two-way lookalikes (Cyrillic O)", prose().replace("o", "\u041e")),
    (
        "unicode",
        "em spaces, two-way lookalikes",
        prose().replace(" ", "\u2003").replace("o", "\u041e"),
    ),
    ("unicode", "blanks, lookalikes, digits mixed", mixed_unicode()),
    ("unicode", "Braille blanks and Hangul fillers", fill("a\u2800b\u3164")),
    ("url userinfo", "://: repeated (no user)", fill("://:")),
    ("password prose", "password's + word", fill("password's hash ")),
    ("password prose", "my secret is + word", fill("my secret is safe ")),
    ("password prose", "password for a b: c", fill("password for a b: c ")),
]


# --- measurement --------------------------------------------------------------------------


def per_call(
    function: Callable[[str], object],
    text: str,
    repeat: int,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> list[float]:
    """Milliseconds of each of ``repeat`` calls, by ``clock``."""
    timings = []
    for _ in range(repeat):
        start = clock()
        function(text)
        timings.append((clock() - start) / 1e6)
    return timings


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 20 else max(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--target-ms", type=float, default=2.0)
    options = parser.parse_args()
    assert all(len(text) == FIELD for _, _, text in CASES)

    # The module that defines the policy, whatever it is called, owns the folding cache.
    sys.modules[find_disallowed.__module__]._folding.cache_clear()
    start = time.perf_counter()
    find_disallowed("\u00e9")
    folding_ms = (time.perf_counter() - start) * 1000

    print(
        f"| family | input ({FIELD} characters) | result | policy p50 / p95 ms "
        "| policy CPU p50 ms | legacy p50 ms | isascii µs |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    worst = ("", 0.0)
    for family, description, text in CASES:
        for _ in range(3):  # warm up
            find_disallowed(text)
        timings = per_call(find_disallowed, text, options.repeat)
        # CPU time of this thread leaves out time other processes held the core.
        cpu = per_call(find_disallowed, text, options.repeat, time.thread_time_ns)
        legacy_first = per_call(legacy_find_disallowed, text, 1)[0]
        legacy_repeat = max(3, min(options.repeat, int(200 / max(legacy_first, 0.01))))
        legacy = per_call(legacy_find_disallowed, text, legacy_repeat)
        ascii_us = statistics.median(per_call(str.isascii, text, options.repeat)) * 1000
        median = statistics.median(timings)
        if median > worst[1]:
            worst = (f"{family}: {description}", median)
        reason = find_disallowed(text)
        print(
            f"| {family} | {description} | {reason.value if reason else 'stored'} "
            f"| {median:.3f} / {p95(timings):.3f} | {statistics.median(cpu):.3f} "
            f"| {statistics.median(legacy):.3f} | {ascii_us:.2f} |"
        )
    verdict = "met" if worst[1] <= options.target_ms else "NOT met"
    print()
    print(
        f"Worst case: {worst[0]}, p50 {worst[1]:.3f} ms per field "
        f"(target {options.target_ms} ms: {verdict})."
    )
    print(f"Building the Unicode folding table once: {folding_ms:.0f} ms.")


if __name__ == "__main__":
    main()
