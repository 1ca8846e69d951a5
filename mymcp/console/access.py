"""Who may use the console: one-time sign-in tokens, console sessions and CSRF tokens.

The sign-in is something only the operator's terminal can do. `mymcp console` draws a
random token, writes only its SHA-256 (and an expiry) into the private console state
directory, and prints the sign-in URL. The server redeems a token at most once: the
token's file is renamed from `signin-<digest>` to `spent-<digest>`, and a rename
succeeds for exactly one of any number of racing requests, across processes too.

A redeemed token opens an in-memory console session (8 hours) identified by a random
cookie; the server keeps only the cookie's SHA-256. Each session has its own CSRF token.
`mymcp console --sign-out-all` writes a new random *session epoch* into the state
directory; every session remembers the epoch it was opened under and is void as soon as
the file says otherwise, and the sign-out removes every unredeemed token as well.

Every file operation is relative to a descriptor of the state directory opened without
following symlinks, after checking that the directory belongs to this user and is
private (mode 0700); files are created with `O_EXCL | O_NOFOLLOW` and mode 0600.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mymcp._safefile import create_private_directories, replace_private_file
from mymcp.config import xdg_directory
from mymcp.errors import Location, MyMCPError

__all__ = [
    "SESSION_LIFETIME_SECONDS",
    "SIGN_IN_TTL_SECONDS",
    "ConsoleSession",
    "ConsoleSessions",
    "ConsoleStateError",
    "Redemption",
    "check_console_state_directory",
    "console_state_directory",
    "issue_sign_in",
    "read_session_epoch",
    "redeem_sign_in",
    "sign_out_all",
]

SIGN_IN_TTL_SECONDS: Final = 300
SESSION_LIFETIME_SECONDS: Final = 8 * 3600
MAX_SESSIONS: Final = 64
MAX_OUTSTANDING_TOKENS: Final = 32
SPENT_MARKER_SECONDS: Final = 3600
"""How long a spent token's marker stays, so that a second use is told it was used."""

_TOKEN_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]{43}")
_SIGN_IN: Final = "signin-"
_SPENT: Final = "spent-"
_EPOCH_FILE: Final = "session-epoch"
_MAX_STATE_FILE_BYTES: Final = 256


class ConsoleStateError(MyMCPError):
    """The console state directory cannot be used safely (naming it, where known: the
    message reaches only the operator's terminal and the server's log)."""

    def __init__(self, message: str, directory: Path | None = None) -> None:
        where = Location() if directory is None else Location(source=str(directory))
        super().__init__("console_state_unavailable", message, location=where)


def console_state_directory(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> Path:
    """`$XDG_STATE_HOME/mymcp/console` (by default `~/.local/state/mymcp/console`)."""
    return xdg_directory("XDG_STATE_HOME", environ, home) / "console"


def check_console_state_directory(directory: Path) -> bool:
    """Whether the state directory exists, after the checks every use of it makes; creates
    nothing. Raises ConsoleStateError when it could not be used (a link, another user's,
    or open to group or others), as then nobody could sign in to the console."""
    with _opened(directory, create=False) as state:
        return state is not None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


# -- the private state directory -----------------------------------------------------------


class _StateDirectory:
    """An open descriptor of the private state directory; every name is relative to it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def read(self, name: str) -> bytes | None:
        """A private regular file's bytes, or None when it does not exist."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConsoleStateError("a console state file is a symlink") from None
            raise ConsoleStateError("a console state file cannot be read") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
                raise ConsoleStateError("a console state file is not a private regular file")
            if info.st_size > _MAX_STATE_FILE_BYTES:
                raise ConsoleStateError("a console state file is too large")
            return os.read(fd, _MAX_STATE_FILE_BYTES + 1)
        finally:
            os.close(fd)

    def create(self, name: str, data: bytes) -> None:
        """Write a new private file; never follows or replaces anything already there."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=self.fd)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace(self, name: str, data: bytes) -> None:
        """Replace `name` atomically (a symlink at `name` is replaced, never followed)."""
        replace_private_file(self.fd, name, data)

    def rename(self, source: str, target: str) -> bool:
        """Rename; False when `source` no longer exists (someone else renamed it first)."""
        try:
            os.rename(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def remove(self, name: str) -> None:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)


def _check_private(info: os.stat_result, directory: Path) -> None:
    if not stat.S_ISDIR(info.st_mode):
        raise ConsoleStateError("the console state directory is not a directory", directory)
    if info.st_uid != os.geteuid():
        raise ConsoleStateError("the console state directory belongs to another user", directory)
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        problem = (
            f"the console state directory is open to group or others (mode {mode:04o}); "
            f"only its owner may use it: run chmod 700 {directory}"
        )
        raise ConsoleStateError(problem, directory)


@contextmanager
def _opened(directory: Path, *, create: bool) -> Iterator[_StateDirectory | None]:
    """The state directory, checked; None when it does not exist and `create` is False."""
    if create:
        try:
            create_private_directories(directory)
        except OSError:
            unmade = "the console state directory cannot be created"
            raise ConsoleStateError(unmade, directory) from None
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(directory, flags)
    except FileNotFoundError:
        if create:
            unmade = "the console state directory cannot be created"
            raise ConsoleStateError(unmade, directory) from None
        yield None
        return
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ConsoleStateError("the console state directory is a symlink", directory) from None
        raise ConsoleStateError("the console state directory cannot be opened", directory) from None
    try:
        _check_private(os.fstat(fd), directory)
        yield _StateDirectory(fd)
    finally:
        os.close(fd)


def _expiry(data: bytes | None) -> float | None:
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    expires = document.get("expires_at") if isinstance(document, dict) else None
    return float(expires) if isinstance(expires, int | float) else None


def _sweep(state: _StateDirectory, now: float) -> None:
    """Remove expired tokens and old spent markers; keep the newest tokens within bounds."""
    tokens: list[tuple[float, str]] = []
    for name in state.names():
        if not name.startswith((_SIGN_IN, _SPENT)):
            continue
        try:
            expires = _expiry(state.read(name))
        except ConsoleStateError:
            expires = None
        if name.startswith(_SPENT):
            if expires is None or expires + SPENT_MARKER_SECONDS <= now:
                state.remove(name)
        elif expires is None or expires <= now:
            state.remove(name)
        else:
            tokens.append((expires, name))
    tokens.sort()
    for _, name in tokens[: max(0, len(tokens) - (MAX_OUTSTANDING_TOKENS - 1))]:
        state.remove(name)


# -- the operator's side (the `mymcp console` command) ----------------------------------------


def issue_sign_in(directory: Path, *, now: float, ttl: float = SIGN_IN_TTL_SECONDS) -> str:
    """A new single-use sign-in token (256 random bits). Only its SHA-256 is stored.

    Raises ConsoleStateError when the state directory is unsafe or cannot be written.
    """
    token = secrets.token_urlsafe(32)
    body = json.dumps({"expires_at": now + ttl}).encode()
    with _opened(directory, create=True) as state:
        assert state is not None
        try:
            _sweep(state, now)
            state.create(_SIGN_IN + _digest(token), body)
        except OSError:
            raise ConsoleStateError("a sign-in token cannot be stored") from None
    return token


def sign_out_all(directory: Path) -> None:
    """Void every console session of every server using this directory, and every
    unredeemed sign-in token."""
    with _opened(directory, create=True) as state:
        assert state is not None
        try:
            state.replace(_EPOCH_FILE, secrets.token_hex(16).encode())
            for name in state.names():
                if name.startswith(_SIGN_IN):
                    state.remove(name)
        except OSError:
            raise ConsoleStateError("the console sessions cannot be signed out") from None


# -- the server's side ----------------------------------------------------------------------


class Redemption(enum.StrEnum):
    """What became of a sign-in attempt."""

    OK = "ok"
    USED = "used"
    EXPIRED = "expired"
    UNKNOWN = "unknown"
    UNAVAILABLE = "unavailable"


def redeem_sign_in(directory: Path | None, token: str, *, now: float) -> Redemption:
    """Spend `token` if it is valid: exactly one caller ever gets `OK` for a token."""
    if directory is None:
        return Redemption.UNAVAILABLE
    if not _TOKEN_SHAPE.fullmatch(token):
        return Redemption.UNKNOWN
    digest = _digest(token)
    try:
        with _opened(directory, create=False) as state:
            if state is None:
                return Redemption.UNKNOWN
            return _redeem(state, digest, now)
    except (ConsoleStateError, OSError):
        return Redemption.UNAVAILABLE


def _redeem(state: _StateDirectory, digest: str, now: float) -> Redemption:
    pending, spent = _SIGN_IN + digest, _SPENT + digest
    expires = _expiry(state.read(pending))
    if expires is None:
        return Redemption.USED if state.read(spent) is not None else Redemption.UNKNOWN
    if expires <= now:
        state.remove(pending)
        return Redemption.EXPIRED
    if not state.rename(pending, spent):
        return Redemption.USED  # another request spent it between our read and rename
    _sweep(state, now)
    return Redemption.OK


def read_session_epoch(directory: Path | None) -> str | None:
    """The current session epoch ('' before any sign-out-all), or None when the state
    directory is unusable (then no session is valid)."""
    if directory is None:
        return None
    try:
        with _opened(directory, create=False) as state:
            if state is None:
                return ""
            data = state.read(_EPOCH_FILE)
    except (ConsoleStateError, OSError):
        return None
    if data is None:
        return ""
    return data.decode("ascii", "replace").strip()


# -- console sessions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """One signed-in browser: its CSRF token, the epoch it was opened in, its expiry."""

    key: str
    csrf: str
    epoch: str
    expires_at: float

    def accepts(self, presented: str) -> bool:
        """Whether a form's CSRF token is this session's (constant-time)."""
        return hmac.compare_digest(self.csrf.encode(), presented.encode("utf-8", "replace"))


class ConsoleSessions:
    """The console sessions of this process, keyed by the SHA-256 of their cookie.

    Bounded: opening a session beyond `MAX_SESSIONS` closes the oldest one.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, epoch: str) -> tuple[str, ConsoleSession]:
        """A new session; returns the cookie value (shown to the browser only) and it."""
        cookie = secrets.token_urlsafe(32)
        key = _digest(cookie)
        session = ConsoleSession(
            key, secrets.token_urlsafe(32), epoch, self._clock() + SESSION_LIFETIME_SECONDS
        )
        self._sessions[key] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return cookie, session

    def lookup(self, cookie: str | None, epoch: str | None) -> ConsoleSession | None:
        """The live session of `cookie`; expired sessions and those of an older epoch end.

        Without an epoch (the state directory is unusable right now) no session is valid,
        but none ends either: each resumes once the directory can be read again, unless
        that shows a sign-out-all in between.
        """
        if epoch is None or not cookie or len(cookie) > 128 or not cookie.isascii():
            return None
        key = _digest(cookie)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.epoch != epoch or session.expires_at <= self._clock():
            del self._sessions[key]
            return None
        return session

    def close(self, session: ConsoleSession) -> None:
        self._sessions.pop(session.key, None)
