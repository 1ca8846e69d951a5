"""Where the host configuration is looked for: the XDG location rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.config import config_path
from mymcp.errors import ConfigurationError

HOME = Path("/home/someone")


def test_absolute_xdg_value_is_used_verbatim() -> None:
    path = config_path({"XDG_CONFIG_HOME": "/srv/conf"}, HOME)
    assert path == Path("/srv/conf/mymcp/config.toml")


@pytest.mark.parametrize("value", ["", "relative/dir", "./conf", "~/conf", "$HOME/conf"])
def test_empty_or_relative_xdg_value_falls_back_to_home(value: str) -> None:
    path = config_path({"XDG_CONFIG_HOME": value}, HOME)
    assert path == HOME / ".config" / "mymcp" / "config.toml"


def test_unset_xdg_falls_back_to_home() -> None:
    assert config_path({}, HOME) == HOME / ".config/mymcp/config.toml"


def test_home_comes_from_environ_when_not_given() -> None:
    assert config_path({"HOME": "/users/x"}) == Path("/users/x/.config/mymcp/config.toml")


def test_xdg_value_is_not_expanded() -> None:
    path = config_path({"XDG_CONFIG_HOME": "/a/$USER/~"}, HOME)
    assert path == Path("/a/$USER/~/mymcp/config.toml")


@pytest.mark.parametrize("value", ["/etc\x00x", "/etc/\udcff", "\x00"])
def test_nul_or_surrogate_in_xdg_value_is_invalid_location(value: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        config_path({"XDG_CONFIG_HOME": value}, HOME)
    assert caught.value.code == "invalid_location"
    assert caught.value.message == "MyMCP configuration location is unavailable"


@pytest.mark.parametrize("home", ["relative/home", "/home/\x00x", "/home/\udc80"])
def test_unusable_home_is_invalid_location(home: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        config_path({}, Path(home))
    assert caught.value.code == "invalid_location"


def test_unresolvable_home_is_invalid_location(monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    def no_account(_uid: int) -> object:
        raise KeyError("no such user")

    monkeypatch.setattr(pwd, "getpwuid", no_account)
    with pytest.raises(ConfigurationError) as caught:
        config_path({"XDG_CONFIG_HOME": "relative"})
    assert caught.value.code == "invalid_location"


@given(st.text(max_size=40))
def test_any_xdg_value_gives_the_rule_or_invalid_location(value: str) -> None:
    clean = "\x00" not in value and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if not clean:
        with pytest.raises(ConfigurationError, match="location is unavailable"):
            config_path({"XDG_CONFIG_HOME": value}, HOME)
        return
    path = config_path({"XDG_CONFIG_HOME": value}, HOME)
    if value.startswith("/"):
        assert path == Path(value) / "mymcp" / "config.toml"
    else:
        assert path == HOME / ".config" / "mymcp" / "config.toml"
