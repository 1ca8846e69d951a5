"""Importing any MyMCP module does nothing: no files, no app, no threads, no log handlers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_PROBE = r"""
import importlib, json, logging, pkgutil, threading
import mymcp
before_threads = threading.active_count()
names = []
for info in pkgutil.walk_packages(mymcp.__path__, "mymcp."):
    importlib.import_module(info.name)
    names.append(info.name)
apps = [n for n in names if hasattr(importlib.import_module(n), "app")]
print(json.dumps({
    "modules": names,
    "threads": threading.active_count() - before_threads,
    "handlers": len(logging.getLogger().handlers),
    "apps": apps,
}))
"""


def test_importing_every_module_has_no_side_effects(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "PATH": "/usr/bin:/bin"}
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    report = json.loads(probe.stdout)
    assert "mymcp.app" in report["modules"]
    assert "mymcp.plugins.mnemosyne.memory" in report["modules"]
    assert report["threads"] == 0
    assert report["handlers"] == 0
    assert report["apps"] == []
    assert list(home.iterdir()) == []
    assert not (tmp_path / "xdg").exists()
