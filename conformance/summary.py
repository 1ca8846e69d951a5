"""One line per conformance scenario against its baseline, then a closing count.

    python conformance/summary.py RESULTS_DIR BASELINE.yml REQUIREMENTS.yaml

Used by `scripts/conformance` after each requirement set. A baseline entry is a whole
scenario (`tools-call-sampling`) or one check of a scenario
(`server-stateless:sep-2575-server-rejects-undeclared-capability`). The server
scenarios the requirement set scores are judged as the suite judges them, and so are
the unscored ones MyMCP claims to pass all the same (`CLAIMED`, by revision): a claimed
scenario must run and pass. The others it runs (extensions, pending scenarios) are
shown with their counts as "not scored". Expected failures and scenarios with no
applicable check count as skipped; a failure the baseline does not list, an entry that
no longer fails (a stale baseline) and a claimed scenario that did not run count as
failed, and the exit status is then 1.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_ENTRY = re.compile(r"^\s*-\s*([A-Za-z0-9_./:-]+)\s*$", re.M)
_STAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
# The `server:` list of a requirement set: its `  - name` lines up to the next key.
_SERVER_LIST = re.compile(r"^server:\s*\n((?:[ \t]+-[^\n]*\n|[ \t]*#[^\n]*\n|[ \t]*\n)*)", re.M)

CLAIMED: dict[str, frozenset[str]] = {
    # The suite runs these without scoring them for the revision; MyMCP implements what
    # they test, so a failure there is a regression like any other.
    "2025-11-25": frozenset({"json-schema-2020-12", "server-session-lifecycle"}),
    "2026-07-28": frozenset(
        {"http-header-validation", "http-custom-header-server-validation", "json-schema-2020-12"}
    ),
}


def scored_scenarios(requirements: Path) -> set[str]:
    found = _SERVER_LIST.search(requirements.read_text(encoding="utf-8"))
    return set(_ENTRY.findall(found.group(1))) if found else set()


def main(results: Path, baseline: Path, requirements: Path) -> int:
    claimed = CLAIMED.get(requirements.stem, frozenset())
    scored = scored_scenarios(requirements) | claimed
    entries = set(_ENTRY.findall(baseline.read_text(encoding="utf-8")))
    whole = {entry for entry in entries if ":" not in entry}
    single = {tuple(entry.split(":", 1)) for entry in entries if ":" in entry}
    rows: list[tuple[str, int, int, str]] = []
    for checks_file in sorted(results.glob("server-*/checks.json")):
        scenario = _STAMP.sub("", checks_file.parent.name).removeprefix("server-")
        checks = json.loads(checks_file.read_text(encoding="utf-8"))
        failing = {c["id"] for c in checks if c["status"] in ("FAILURE", "WARNING")}
        ok = sum(c["status"] == "SUCCESS" for c in checks)
        expected = {check for name, check in single if name == scenario}
        if scenario not in scored:
            verdict = "not scored: " + (f"{len(failing)} failing" if failing else "pass")
        elif scenario in whole:
            if scenario in claimed:
                verdict = "CLAIMED BUT IN THE BASELINE"
            else:
                verdict = "expected failure" if failing else "STALE BASELINE ENTRY"
        elif failing - expected:
            verdict = "FAIL"
        elif expected - failing:
            verdict = "STALE BASELINE ENTRY"
        elif failing:
            verdict = f"pass ({len(failing)} expected check failures)"
        elif ok:
            verdict = "pass"
        else:
            verdict = "CLAIMED BUT NOTHING CHECKED" if scenario in claimed else "not applicable"
        rows.append((scenario, ok, len(failing), verdict))
    ran = {row[0] for row in rows}
    rows += [(scenario, 0, 0, "CLAIMED BUT NOT RUN") for scenario in sorted(claimed - ran)]
    width = max((len(row[0]) for row in rows), default=8)
    print(f"\n{'scenario'.ljust(width)}  checks ok  failed  result")
    for scenario, ok, bad, verdict in rows:
        print(f"{scenario.ljust(width)}  {ok:9d}  {bad:6d}  {verdict}")
    passed = sum(row[3].startswith("pass") for row in rows)
    skipped = sum(
        row[3] in ("expected failure", "not applicable") or row[3].startswith("not scored")
        for row in rows
    )
    failed = len(rows) - passed - skipped
    print(f"conformance: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
