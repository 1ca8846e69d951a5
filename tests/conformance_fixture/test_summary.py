"""`conformance/summary.py`: which scenario results fail a conformance run.

Results are written as the suite writes them (one `server-<scenario>-<stamp>/checks.json`
per scenario), against a small requirement set and baseline.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

SUMMARY = Path(__file__).resolve().parents[2] / "conformance" / "summary.py"
REVISION = "2026-07-28"


def _summary() -> ModuleType:
    spec = importlib.util.spec_from_file_location("conformance_summary", SUMMARY)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summary = _summary()


def _run(tmp_path: Path, results: dict[str, list[str]], baseline: tuple[str, ...] = ()) -> int:
    """Summarize `results` (scenario -> statuses of its checks); the exit status."""
    run = tmp_path / "run"
    for scenario, statuses in results.items():
        folder = run / f"server-{scenario}-2026-12-01T20-44-49-082Z"
        folder.mkdir(parents=True)
        checks = [{"id": f"{scenario}-{n}", "status": s} for n, s in enumerate(statuses)]
        (folder / "checks.json").write_text(json.dumps(checks))
    requirements = tmp_path / f"{REVISION}.yaml"
    requirements.write_text("server:\n  - tools-list\n\nclient:\n  - tools_call\n")
    expected = tmp_path / "baseline.yml"
    expected.write_text("server:\n" + "".join(f"  - {entry}\n" for entry in baseline))
    return int(summary.main(run, expected, requirements))


def _verdicts(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """Each scenario's verdict, from the summary's table."""
    rows = capsys.readouterr().out.splitlines()[2:-1]
    return {row.split()[0]: row.split(None, 3)[3] for row in rows}


def test_claimed_unscored_scenarios_are_judged_like_scored_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = _run(
        tmp_path,
        {
            "tools-list": ["SUCCESS"],
            "http-header-validation": ["SUCCESS", "FAILURE"],  # claimed
            "json-schema-2020-12": ["SUCCESS"],  # claimed
            "tasks-lifecycle": ["FAILURE"],  # neither scored nor claimed
        },
    )
    verdicts = _verdicts(capsys)
    assert status == 1
    assert verdicts["http-header-validation"] == "FAIL"
    assert verdicts["json-schema-2020-12"] == "pass"
    assert verdicts["tasks-lifecycle"] == "not scored: 1 failing"
    assert verdicts["http-custom-header-server-validation"] == "CLAIMED BUT NOT RUN"


def test_a_run_where_every_claimed_scenario_passes_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = {name: ["SUCCESS"] for name in summary.CLAIMED[REVISION]}
    status = _run(tmp_path, {**results, "tools-list": ["SUCCESS"], "tasks-x": ["FAILURE"]})
    assert status == 0
    assert _verdicts(capsys)["tasks-x"] == "not scored: 1 failing"


@pytest.mark.parametrize(
    ("statuses", "baseline", "verdict"),
    [
        (["SKIPPED"], (), "CLAIMED BUT NOTHING CHECKED"),
        (["FAILURE"], ("json-schema-2020-12",), "CLAIMED BUT IN THE BASELINE"),
    ],
)
def test_a_claimed_scenario_cannot_be_skipped_or_excused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    statuses: list[str],
    baseline: tuple[str, ...],
    verdict: str,
) -> None:
    results = {name: ["SUCCESS"] for name in summary.CLAIMED[REVISION]}
    results["json-schema-2020-12"] = statuses
    status = _run(tmp_path, {**results, "tools-list": ["SUCCESS"]}, baseline)
    assert status == 1
    assert _verdicts(capsys)["json-schema-2020-12"] == verdict
