"""A private XDG configuration home per test."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class ConfigHome:
    """`$XDG_CONFIG_HOME` in a temporary directory; `write()` creates `mymcp/config.toml`."""

    root: Path

    @property
    def environ(self) -> dict[str, str]:
        return {"XDG_CONFIG_HOME": str(self.root), "HOME": "/nonexistent-home"}

    @property
    def directory(self) -> Path:
        return self.root / "mymcp"

    @property
    def file(self) -> Path:
        return self.directory / "config.toml"

    def write(self, text: str | bytes, mode: int = 0o600) -> Path:
        self.directory.mkdir(mode=0o700, exist_ok=True)
        data = text.encode() if isinstance(text, str) else text
        self.file.write_bytes(data)
        os.chmod(self.file, mode)
        return self.file


@pytest.fixture
def config_home(tmp_path: Path) -> ConfigHome:
    root = tmp_path / "xdg"
    root.mkdir(mode=0o700)
    return ConfigHome(root)
