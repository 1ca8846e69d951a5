"""What `mymcp serve` says when it cannot listen, for the causes a test cannot provoke
with a real process (the taken port is covered end to end in tests/e2e/test_listen_e2e.py):
each names the endpoint, the cause, and the key and file that chose the value."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from mymcp.cli.serving import _listen, _listen_error
from mymcp.config import ServerSettings
from mymcp.errors import ListenError


def _fault(number: int) -> OSError:
    return OSError(number, os.strerror(number))


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(body, encoding="utf-8")
    path.chmod(0o600)
    return path


def test_an_address_that_is_not_on_this_machine_names_the_address_key(tmp_path: Path) -> None:
    source = _config(tmp_path, 'schema_version = 1\n[server]\naddress = "::1"\nport = 8123\n')
    error = _listen_error(
        _fault(errno.EADDRNOTAVAIL), ServerSettings(address="::1", port=8123), source
    )
    assert str(error) == (
        f"{source}:3:1: server.address: MyMCP cannot listen: the address is not on this "
        f"machine: ::1 is not an address of this machine ({os.strerror(errno.EADDRNOTAVAIL)}); "
        "set another address (code=address_unavailable)"
    )


def test_a_privileged_port_says_which_ports_are_open_to_everyone(tmp_path: Path) -> None:
    source = _config(tmp_path, "schema_version = 1\n[server]\nport = 80\n")
    error = _listen_error(_fault(errno.EACCES), ServerSettings(port=80), source)
    assert error.code == "address_not_permitted"
    assert str(error).startswith(f"{source}:3:1: server.port: ")
    assert error.detail == (
        f"127.0.0.1:80 was refused ({os.strerror(errno.EACCES)}): ports below 1024 need "
        "privileges; set a port from 1024 up"
    )


def test_a_refusal_of_an_ordinary_port_gives_the_system_s_reason(tmp_path: Path) -> None:
    source = _config(tmp_path, "schema_version = 1\n[server]\nport = 8123\n")
    denied = _listen_error(_fault(errno.EPERM), ServerSettings(port=8123), source)
    assert denied.code == "address_not_permitted"
    assert denied.detail == (
        f"127.0.0.1:8123 was refused ({os.strerror(errno.EPERM)}); set another port"
    )
    other = _listen_error(_fault(errno.ENOBUFS), ServerSettings(port=8123), source)
    assert other.code == "listen_failed"
    assert other.detail == (
        f"127.0.0.1:8123 was refused ({os.strerror(errno.ENOBUFS)}); set another port"
    )


def test_without_a_file_the_default_and_the_file_to_create_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    error = _listen_error(_fault(errno.EADDRINUSE), ServerSettings(), None)
    assert str(error) == (
        "MyMCP cannot listen: the address and port are already in use: 127.0.0.1:8000 is "
        "taken by another process (another MyMCP?); stop it, or set another port with "
        f"[server] port in {tmp_path / 'xdg' / 'mymcp' / 'config.toml'} (there is no such "
        "file, so the default 8000 applies) (code=address_in_use)"
    )


def test_a_taken_port_is_refused_by_the_socket_itself() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as refused:
            _listen(ServerSettings(port=port), None)
    assert refused.value.code == "address_in_use"
    with _listen(ServerSettings(port=port), None) as listener:
        assert listener.getsockname() == ("127.0.0.1", port)
