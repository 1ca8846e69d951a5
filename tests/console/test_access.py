"""Signing in to the console: one-time tokens, sessions, sign-out, and the state directory."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from mymcp import cli
from mymcp.console import (
    SESSION_LIFETIME_SECONDS,
    SIGN_IN_TTL_SECONDS,
    ConsoleStateError,
    Redemption,
    console_state_directory,
    issue_sign_in,
    read_session_epoch,
    redeem_sign_in,
    sign_out_all,
)
from tests.console.conftest import Stack, csrf_of


def _files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# -- tokens on disk -------------------------------------------------------------------------


def test_only_the_digest_of_a_token_is_stored_privately(tmp_path: Path) -> None:
    directory = tmp_path / "state" / "console"
    token = issue_sign_in(directory, now=100.0)
    assert len(token) == 43  # 32 random bytes, base64url
    (name,) = _files(directory)
    assert token not in name
    stored = (directory / name).read_bytes()
    assert token.encode() not in stored
    assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(directory / name).st_mode) == 0o600


@pytest.mark.usefixtures("umask_022")
def test_every_directory_made_for_the_state_is_private(tmp_path: Path) -> None:
    # As under an XDG_STATE_HOME that does not exist yet: three new levels.
    tmp_path.chmod(0o751)
    state = tmp_path / "state"
    directory = state / "mymcp" / "console"
    issue_sign_in(directory, now=100.0)
    for made in (state, state / "mymcp", directory):
        assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700, made
    assert stat.S_IMODE(os.lstat(tmp_path).st_mode) == 0o751


def test_a_token_is_redeemed_exactly_once(tmp_path: Path) -> None:
    directory = tmp_path / "console"
    token = issue_sign_in(directory, now=100.0)
    assert redeem_sign_in(directory, token, now=101.0) is Redemption.OK
    assert redeem_sign_in(directory, token, now=102.0) is Redemption.USED
    assert redeem_sign_in(directory, "x" * 43, now=102.0) is Redemption.UNKNOWN


def test_racing_redemptions_let_exactly_one_through(tmp_path: Path) -> None:
    directory = tmp_path / "console"
    token = issue_sign_in(directory, now=100.0)
    start = threading.Barrier(8)
    outcomes: list[Redemption] = []

    def redeem() -> None:
        start.wait()
        outcomes.append(redeem_sign_in(directory, token, now=101.0))

    threads = [threading.Thread(target=redeem) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(Redemption.OK) == 1
    assert set(outcomes) == {Redemption.OK, Redemption.USED}


def test_a_token_expires(tmp_path: Path) -> None:
    directory = tmp_path / "console"
    token = issue_sign_in(directory, now=100.0)
    later = 100.0 + SIGN_IN_TTL_SECONDS
    assert redeem_sign_in(directory, token, now=later) is Redemption.EXPIRED
    assert redeem_sign_in(directory, token, now=later) is Redemption.UNKNOWN  # removed


@pytest.mark.parametrize(
    "token", ["", "short", "a" * 44, "a" * 42 + "!", "../../etc/passwd" + "a" * 27, "é" * 43]
)
def test_malformed_tokens_are_unknown(tmp_path: Path, token: str) -> None:
    directory = tmp_path / "console"
    issue_sign_in(directory, now=100.0)
    assert redeem_sign_in(directory, token, now=100.0) is Redemption.UNKNOWN


def test_no_state_directory_means_nobody_can_sign_in(tmp_path: Path) -> None:
    token = issue_sign_in(tmp_path / "elsewhere", now=100.0)
    assert redeem_sign_in(tmp_path / "missing", token, now=100.0) is Redemption.UNKNOWN
    assert redeem_sign_in(None, token, now=100.0) is Redemption.UNAVAILABLE
    assert read_session_epoch(None) is None
    assert read_session_epoch(tmp_path / "missing") == ""


def test_a_symlinked_state_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ConsoleStateError) as raised:
        issue_sign_in(link, now=100.0)
    assert raised.value.code == "console_state_unavailable"
    assert _files(real) == []
    token = issue_sign_in(real, now=100.0)
    assert redeem_sign_in(link, token, now=100.0) is Redemption.UNAVAILABLE


def test_a_shared_state_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "console"
    directory.mkdir(mode=0o700)
    token = issue_sign_in(directory, now=100.0)
    directory.chmod(0o755)
    with pytest.raises(ConsoleStateError) as raised:
        issue_sign_in(directory, now=100.0)
    # The operator is told the mode it has and the command that fixes it.
    assert "open to group or others (mode 0755)" in str(raised.value)
    assert f"run chmod 700 {directory}" in str(raised.value)
    assert redeem_sign_in(directory, token, now=100.0) is Redemption.UNAVAILABLE
    assert read_session_epoch(directory) is None


def test_a_symlinked_token_file_is_never_followed(tmp_path: Path) -> None:
    directory = tmp_path / "console"
    token = issue_sign_in(directory, now=100.0)
    (name,) = _files(directory)
    target = tmp_path / "target"
    target.write_bytes((directory / name).read_bytes())
    target.chmod(0o600)
    (directory / name).unlink()
    (directory / name).symlink_to(target)
    assert redeem_sign_in(directory, token, now=100.0) is Redemption.UNAVAILABLE
    assert target.exists()


def test_outstanding_tokens_are_bounded_and_expired_ones_swept(tmp_path: Path) -> None:
    directory = tmp_path / "console"
    old = issue_sign_in(directory, now=100.0)
    tokens = [issue_sign_in(directory, now=500.0 + i) for i in range(40)]
    names = _files(directory)
    assert len(names) == 32
    assert redeem_sign_in(directory, old, now=501.0) is Redemption.UNKNOWN  # expired, swept
    assert redeem_sign_in(directory, tokens[0], now=560.0) is Redemption.UNKNOWN  # oldest
    assert redeem_sign_in(directory, tokens[-1], now=560.0) is Redemption.OK


def test_the_state_directory_follows_xdg_state_home(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "st")}
    assert console_state_directory(environ) == tmp_path / "st" / "mymcp" / "console"
    assert console_state_directory({"HOME": str(tmp_path)}) == (
        tmp_path / ".local" / "state" / "mymcp" / "console"
    )


# -- through the server ---------------------------------------------------------------------


def test_the_one_time_link_opens_an_eight_hour_strict_cookie_session(stack: Stack) -> None:
    token = issue_sign_in(stack.state, now=stack.clock())
    response = stack.client.get(f"/console/sign-in?token={token}", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/console/approvals"
    cookie = response.headers["set-cookie"]
    name, _, rest = cookie.partition("=")
    assert name == "mymcp_console_8000"
    value, *attributes = [part.strip() for part in rest.split(";")]
    assert len(value) >= 43
    assert value != token
    assert set(attributes) == {
        f"Max-Age={SESSION_LIFETIME_SECONDS}",
        "Path=/console",
        "HttpOnly",
        "SameSite=Strict",
    }
    page = stack.client.get("/console/approvals")
    assert page.status_code == 200
    assert "<h1>Approvals</h1>" in page.text


def test_a_second_use_of_the_link_is_refused_with_403(stack: Stack) -> None:
    token = issue_sign_in(stack.state, now=stack.clock())
    assert stack.client.get(f"/console/sign-in?token={token}").status_code == 200
    with stack.another_browser() as other:
        again = other.get(f"/console/sign-in?token={token}", follow_redirects=False)
        assert again.status_code == 403
        assert "already used" in again.text
        assert "set-cookie" not in again.headers
        assert other.get("/console/approvals").status_code == 403


def test_an_expired_link_is_refused(stack: Stack) -> None:
    token = issue_sign_in(stack.state, now=stack.clock())
    stack.clock.now += SIGN_IN_TTL_SECONDS + 1
    response = stack.client.get(f"/console/sign-in?token={token}", follow_redirects=False)
    assert response.status_code == 403
    assert "expired" in response.text
    assert "set-cookie" not in response.headers


def test_an_unknown_link_is_refused(stack: Stack) -> None:
    for query in ("", "?token=", "?token=" + "A" * 43, "?token=%00"):
        response = stack.client.get("/console/sign-in" + query, follow_redirects=False)
        assert response.status_code == 403
        assert "not valid" in response.text


def test_a_head_request_never_spends_a_sign_in_link(stack: Stack) -> None:
    token = issue_sign_in(stack.state, now=stack.clock())
    checked = stack.client.head(f"/console/sign-in?token={token}", follow_redirects=False)
    assert checked.status_code == 200
    assert "set-cookie" not in checked.headers
    opened = stack.client.get(f"/console/sign-in?token={token}", follow_redirects=False)
    assert opened.status_code == 303
    assert "set-cookie" in opened.headers


def test_a_session_ends_after_eight_hours(stack: Stack) -> None:
    stack.sign_in()
    stack.clock.now += SESSION_LIFETIME_SECONDS - 1
    assert stack.client.get("/console/approvals").status_code == 200
    stack.clock.now += 1
    ended = stack.client.get("/console/approvals")
    assert ended.status_code == 403
    assert "mymcp console" in ended.text


def test_a_briefly_unusable_state_directory_suspends_sessions_without_ending_them(
    stack: Stack,
) -> None:
    stack.sign_in()
    with stack.another_browser() as second:
        stack.sign_in(second)
        links = [issue_sign_in(stack.state, now=stack.clock()) for _ in range(2)]
        stack.state.chmod(0o755)  # not private: the server refuses to trust it
        for client, link in zip((stack.client, second), links, strict=True):
            refused = client.get("/console/approvals")
            assert refused.status_code == 503
            assert "Sign-in is unavailable" in refused.text
            assert client.get("/console/approvals.json").status_code == 403
            # A new link is no way in meanwhile, and the answer says why, as every page does.
            refused = client.get(f"/console/sign-in?token={link}", follow_redirects=False)
            assert refused.status_code == 503
            assert "Sign-in is unavailable" in refused.text
        stack.state.chmod(0o700)
        assert stack.client.get("/console/approvals").status_code == 200
        stack.state.chmod(0o755)
        assert second.get("/console/approvals").status_code == 503
        stack.state.chmod(0o700)
        sign_out_all(stack.state)  # signed out meanwhile: that still ends every session
        assert second.get("/console/approvals").status_code == 403
        assert stack.client.get("/console/approvals").status_code == 403


def test_sign_out_all_ends_every_session_and_every_unused_link(stack: Stack) -> None:
    stack.sign_in()
    with stack.another_browser() as second:
        stack.sign_in(second)
        unused = issue_sign_in(stack.state, now=stack.clock())
        sign_out_all(stack.state)
        assert stack.client.get("/console/approvals").status_code == 403
        assert second.get("/console/approvals").status_code == 403
        refused = second.get(f"/console/sign-in?token={unused}")
        assert refused.status_code == 403
        stack.sign_in(second)  # a new link works again
        assert second.get("/console/approvals").status_code == 200
        assert stack.client.get("/console/approvals").status_code == 403


def test_sign_out_ends_this_session_only(stack: Stack) -> None:
    csrf = stack.sign_in()
    with stack.another_browser() as second:
        stack.sign_in(second)
        response = stack.post("/console/sign-out", {"csrf": csrf})
        assert response.status_code == 200
        assert "Max-Age=0" in response.headers["set-cookie"]
        assert second.get("/console/approvals").status_code == 200
    stack.client.cookies.clear()
    assert stack.client.get("/console/approvals").status_code == 403


def test_a_stolen_cookie_stops_working_after_sign_out(stack: Stack) -> None:
    csrf = stack.sign_in()
    cookie = stack.client.cookies["mymcp_console_8000"]
    stack.post("/console/sign-out", {"csrf": csrf})
    with stack.another_browser() as thief:
        thief.cookies.set("mymcp_console_8000", cookie, domain="127.0.0.1", path="/console")
        assert thief.get("/console/approvals").status_code == 403


def test_mcp_credentials_never_open_the_console(stack: Stack) -> None:
    session = stack.mcp_session()
    headers = {"mcp-session-id": session, "authorization": "Bearer mymcp1.anything"}
    for path in ("/console/approvals", "/console/memory", "/console/audit"):
        response = stack.client.get(path, headers=headers)
        assert response.status_code == 403
        assert "Sign in to the MyMCP console" in response.text
    feed = stack.client.get("/console/approvals.json", headers=headers)
    assert (feed.status_code, feed.json()) == (403, {"error": "signed_out"})


def test_the_signed_out_page_offers_to_reopen_the_same_page(stack: Stack) -> None:
    response = stack.client.get("/console/approvals/abc?x=1")
    assert response.status_code == 403
    assert 'href="/console/approvals/abc?x=1"' in response.text


def test_tokens_and_cookies_are_never_logged(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    token = issue_sign_in(stack.state, now=stack.clock())
    stack.client.get(f"/console/sign-in?token={token}")
    stack.client.get(f"/console/sign-in?token={token}")
    cookie = stack.client.cookies["mymcp_console_8000"]
    csrf = csrf_of(stack.client.get("/console/approvals").text)
    stack.post("/console/sign-out", {"csrf": "wrong"})
    logged = "\n".join(
        record.getMessage() for record in caplog.records if record.name.startswith("mymcp")
    )
    assert "console sign_in outcome=ok" in logged
    assert "console sign_in outcome=used" in logged
    for secret in (token, cookie, csrf):
        assert secret not in logged


# -- the command ----------------------------------------------------------------------------


def _command_env(monkeypatch: pytest.MonkeyPatch, stack: Stack) -> Path:
    stack.clock.now = time.time()  # the command stamps its tokens with the real time
    for key in list(os.environ):
        if key.startswith("XDG_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", stack.env["HOME"])
    monkeypatch.setenv("XDG_CONFIG_HOME", stack.env["XDG_CONFIG_HOME"])
    monkeypatch.setenv("XDG_STATE_HOME", str(stack.state.parent.parent))
    return stack.state


def test_the_console_command_prints_a_link_the_server_accepts(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _command_env(monkeypatch, stack)
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    assert cli.main(["console", "--no-browser"]) == 0
    printed = capsys.readouterr()
    url = printed.out.strip()
    assert url.startswith("http://127.0.0.1:8000/console/sign-in?token=")
    assert "once, within 5 minutes" in printed.err
    assert opened == []
    response = stack.client.get(url.removeprefix("http://127.0.0.1:8000"))
    assert response.status_code == 200
    assert "<h1>Approvals</h1>" in response.text

    assert cli.main(["console"]) == 0
    assert opened == [capsys.readouterr().out.strip()]


def test_the_console_command_signs_everyone_out(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _command_env(monkeypatch, stack)
    stack.sign_in()
    assert cli.main(["console", "--sign-out-all"]) == 0
    assert "Signed out every console session" in capsys.readouterr().err
    assert stack.client.get("/console/approvals").status_code == 403


def test_the_console_command_explains_itself(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["console", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("--no-browser", "--sign-out-all", "once, within 5 minutes", "8 hours"):
        assert phrase in text


def test_the_console_command_fails_cleanly_on_an_unsafe_directory(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _command_env(monkeypatch, stack)
    state.parent.mkdir(parents=True, exist_ok=True)
    elsewhere = stack.root / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    state.symlink_to(elsewhere)
    assert cli.main(["console", "--no-browser"]) == 1
    printed = capsys.readouterr()
    assert printed.out == ""
    assert "code=console_state_unavailable" in printed.err
    # The operator's terminal is told which directory, and what is wrong with it.
    assert f"{state}: the console state directory is a symlink" in printed.err
