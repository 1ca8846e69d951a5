"""The service files in contrib/: the systemd user unit passes `systemd-analyze verify`
(where systemd is installed) and the launchd agent is a valid property list."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "contrib" / "mymcp.service"
AGENT = REPO / "contrib" / "local.mymcp.plist"


def _verify(unit: Path, home: Path, runtime: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "--user", "verify", str(unit)],
        env={**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here"
)
def test_the_user_unit_verifies(tmp_path: Path) -> None:
    # %h/.local/bin/mymcp, where pipx puts the command, is this checkout's.
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "mymcp").symlink_to(Path(sys.executable).with_name("mymcp"))
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    verified = _verify(UNIT, home, runtime)
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")
    # The same check refuses a unit whose command is missing: it is not a formality.
    broken = tmp_path / "mymcp.service"
    broken.write_text(UNIT.read_text().replace("mymcp serve", "absent serve"))
    assert _verify(broken, home, runtime).returncode != 0


def test_the_user_unit_runs_the_server_privately() -> None:
    lines = UNIT.read_text().splitlines()
    assert "ExecStart=%h/.local/bin/mymcp serve" in lines
    assert "UMask=0077" in lines
    assert "WantedBy=default.target" in lines


def test_the_launchd_agent_is_a_valid_property_list() -> None:
    agent = plistlib.loads(AGENT.read_bytes())
    assert agent["Label"] == "local.mymcp"
    assert agent["ProgramArguments"][1:] == ["serve"]
    assert agent["ProgramArguments"][0].endswith("/mymcp")
    assert agent["Umask"] == 0o077
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert Path(agent["StandardErrorPath"]).is_absolute()
    if shutil.which("plutil") is not None:  # macOS
        subprocess.run(["plutil", "-lint", str(AGENT)], check=True, timeout=60)
