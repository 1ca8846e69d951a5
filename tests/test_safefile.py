"""The one safe reader: no-follow opens, permission bits, size bound, identity checks."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

import mymcp._safefile as safefile
from mymcp._safefile import SafeFileError, SafeFileReason, as_error, read_safe_file
from mymcp.errors import ConfigurationError, ExternalPluginLoadError, MyMCPError


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    path = tmp_path / "safe"
    path.mkdir(mode=0o700)
    return path


def _file(directory: Path, data: bytes = b"content", mode: int = 0o600) -> Path:
    path = directory / "file"
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _reason(path: Path, max_bytes: int = 1024, *, private: bool = False) -> SafeFileReason:
    with pytest.raises(SafeFileError) as caught:
        read_safe_file(path, max_bytes=max_bytes, private=private)
    error = caught.value
    # The fixed message is content-free; the location names the file or its directory.
    assert str(path) not in error.message
    assert error.location.source in (str(path), str(path.parent))
    return error.reason


def test_reads_a_safe_file(directory: Path) -> None:
    assert read_safe_file(_file(directory), max_bytes=1024) == b"content"


def test_reads_exactly_max_bytes(directory: Path) -> None:
    assert read_safe_file(_file(directory, b"x" * 100), max_bytes=100) == b"x" * 100


def test_reads_a_file_larger_than_one_chunk(directory: Path) -> None:
    data = bytes(range(256)) * 200
    assert read_safe_file(_file(directory, data), max_bytes=len(data)) == data


def test_empty_file(directory: Path) -> None:
    assert read_safe_file(_file(directory, b""), max_bytes=10) == b""


def test_missing_file(directory: Path) -> None:
    assert _reason(directory / "absent") is SafeFileReason.MISSING


def test_missing_directory(tmp_path: Path) -> None:
    # Named by the file asked for: the directory's path alone reads as the file's.
    wanted = tmp_path / "absent" / "manifest.json"
    with pytest.raises(SafeFileError) as caught:
        read_safe_file(wanted, max_bytes=10)
    assert caught.value.reason is SafeFileReason.MISSING
    assert caught.value.location.source == str(wanted)
    assert caught.value.detail == (
        f"the directory it would be in, {tmp_path / 'absent'}, does not exist"
    )


def test_symlinked_file(directory: Path, tmp_path: Path) -> None:
    target = _file(tmp_path)
    (directory / "link").symlink_to(target)
    assert _reason(directory / "link") is SafeFileReason.UNSAFE_PATH


def test_dangling_symlink(directory: Path) -> None:
    (directory / "link").symlink_to(directory / "nowhere")
    assert _reason(directory / "link") is SafeFileReason.UNSAFE_PATH


def test_symlinked_parent_directory(directory: Path, tmp_path: Path) -> None:
    _file(directory)
    (tmp_path / "link").symlink_to(directory, target_is_directory=True)
    assert _reason(tmp_path / "link" / "file") is SafeFileReason.UNSAFE_PATH


def test_symlinked_grandparent_is_allowed(directory: Path, tmp_path: Path) -> None:
    inner = directory / "inner"
    inner.mkdir(mode=0o700)
    _file(inner)
    (tmp_path / "link").symlink_to(directory, target_is_directory=True)
    assert read_safe_file(tmp_path / "link" / "inner" / "file", max_bytes=64) == b"content"


def test_parent_that_is_a_file(directory: Path) -> None:
    parent = _file(directory)
    assert _reason(parent / "child") is SafeFileReason.UNSAFE_PATH


def test_directory_is_not_regular(directory: Path) -> None:
    (directory / "sub").mkdir()
    assert _reason(directory / "sub") is SafeFileReason.NOT_REGULAR


def test_fifo_is_not_regular(directory: Path) -> None:
    os.mkfifo(directory / "fifo", 0o600)
    assert _reason(directory / "fifo") is SafeFileReason.NOT_REGULAR


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o622, 0o666])
def test_group_or_world_writable_file(directory: Path, mode: int) -> None:
    assert _reason(_file(directory, mode=mode)) is SafeFileReason.UNSAFE_PERMISSIONS


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_group_or_world_writable_directory(directory: Path, mode: int) -> None:
    path = _file(directory)
    os.chmod(directory, mode)
    assert _reason(path) is SafeFileReason.UNSAFE_PERMISSIONS


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_private_files_admit_no_group_or_world_bits(directory: Path, mode: int) -> None:
    path = _file(directory, mode=mode)
    assert read_safe_file(path, max_bytes=64) == b"content"
    assert _reason(path, private=True) is SafeFileReason.UNSAFE_PERMISSIONS


def test_private_file_with_owner_only_bits(directory: Path) -> None:
    assert read_safe_file(_file(directory), max_bytes=64, private=True) == b"content"


def test_too_large(directory: Path) -> None:
    assert _reason(_file(directory, b"x" * 101), max_bytes=100) is SafeFileReason.TOO_LARGE


def test_unreadable(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _file(directory)

    def failing_read(_fd: int, _n: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(safefile.os, "read", failing_read)
    assert _reason(path) is SafeFileReason.UNREADABLE


def test_file_growing_during_read_is_a_change(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_read = os.read
    calls: list[int] = []

    def read_then_grow(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not calls:
            calls.append(n)
            with path.open("ab") as handle:
                handle.write(b"more")
        return data

    monkeypatch.setattr(safefile.os, "read", read_then_grow)
    assert _reason(path) is SafeFileReason.CHANGED


def test_file_growing_past_the_bound_during_read_is_a_change(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_read = os.read
    calls: list[int] = []

    def read_then_grow(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not calls:
            calls.append(n)
            with path.open("ab") as handle:
                handle.write(b"x" * 200)
        return data

    monkeypatch.setattr(safefile.os, "read", read_then_grow)
    assert _reason(path, max_bytes=100) is SafeFileReason.CHANGED


def test_file_rewritten_in_place_during_read_is_a_change(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_read = os.read
    calls: list[int] = []

    def read_then_rewrite(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not calls:
            calls.append(n)
            os.utime(path, ns=(1, 1))  # same size, new mtime and ctime
        return data

    monkeypatch.setattr(safefile.os, "read", read_then_rewrite)
    assert _reason(path) is SafeFileReason.CHANGED


def test_file_replaced_during_read_is_a_change(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_read = os.read
    calls: list[int] = []

    def read_then_replace(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not calls:
            calls.append(n)
            replacement = directory / "replacement"
            replacement.write_bytes(b"abc")
            os.chmod(replacement, 0o600)
            os.replace(replacement, path)
        return data

    monkeypatch.setattr(safefile.os, "read", read_then_replace)
    assert _reason(path) is SafeFileReason.CHANGED


def test_file_swapped_between_stat_and_open_is_a_change(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_open = os.open

    def swap_then_open(name: object, flags: int, *args: object, **kwargs: object) -> int:
        if name == "file":
            replacement = directory / "replacement"
            replacement.write_bytes(b"abc")
            os.chmod(replacement, 0o600)
            os.replace(replacement, path)
        return real_open(name, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(safefile.os, "open", swap_then_open)
    assert _reason(path) is SafeFileReason.CHANGED


def test_permissions_loosened_between_stat_and_open(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_open = os.open

    def chmod_then_open(name: object, flags: int, *args: object, **kwargs: object) -> int:
        if name == "file":
            os.chmod(path, 0o666)  # noqa: S103 - the race under test
        return real_open(name, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(safefile.os, "open", chmod_then_open)
    assert _reason(path) is SafeFileReason.UNSAFE_PERMISSIONS


def test_file_removed_between_stat_and_open_is_a_change(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_open = os.open

    def remove_then_open(name: object, flags: int, *args: object, **kwargs: object) -> int:
        if name == "file":
            path.unlink()
        return real_open(name, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(safefile.os, "open", remove_then_open)
    assert _reason(path) is SafeFileReason.CHANGED


@pytest.mark.parametrize(
    ("field", "changed"),
    [("st_mtime_ns", True), ("st_ctime_ns", True), ("st_size", True), (None, False)],
)
def test_identity_after_the_read_is_compared(
    directory: Path, monkeypatch: pytest.MonkeyPatch, field: str | None, changed: bool
) -> None:
    path = _file(directory, b"abc")
    real_fstat = os.fstat
    calls: list[int] = []

    def fstat(fd: int) -> object:
        result = real_fstat(fd)
        calls.append(fd)
        if len(calls) < 3:  # the directory, then the opened file
            return result
        names = ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns", "st_mode")
        after = SimpleNamespace(**{name: getattr(result, name) for name in names})
        if field is not None:
            setattr(after, field, getattr(after, field) + 1)
        return after

    monkeypatch.setattr(safefile.os, "fstat", fstat)
    if changed:
        assert _reason(path) is SafeFileReason.CHANGED
    else:
        assert read_safe_file(path, max_bytes=64) == b"abc"
    assert len(calls) == 3


NOBODY = 65534  # also how a user namespace shows a user outside it
OTHER = 4242  # some other user, with or without an account here

# Giving a file away to another user is something only root may do.
as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root can chown a file to another user (nobody)"
)


@as_root
@pytest.mark.parametrize("private", [False, True])
def test_a_file_owned_by_another_user_is_refused_whatever_its_mode(
    directory: Path, private: bool
) -> None:
    path = _file(directory)  # 0600: the mode bits alone would pass
    os.chown(path, OTHER, OTHER)
    assert _reason(path, private=private) is SafeFileReason.UNSAFE_PERMISSIONS
    with pytest.raises(SafeFileError) as caught:
        read_safe_file(path, max_bytes=64, private=private)
    assert caught.value.location.source == str(path)
    # Run as root: handing a user's file to root would lock the user out, so running as
    # its owner comes first.
    assert caught.value.detail == (
        f"the file is owned by another user (uid {OTHER}), who could rewrite it whatever "
        f"its mode; run MyMCP as its owner (uid {OTHER}), or, if only root should change "
        f"it, give it to root: chown 0 {path}"
    )


@as_root
def test_a_directory_owned_by_another_user_is_refused(directory: Path) -> None:
    path = _file(directory)
    os.chown(directory, NOBODY, NOBODY)  # 0700: the mode bits alone would pass
    with pytest.raises(SafeFileError) as caught:
        read_safe_file(path, max_bytes=64)
    assert str(caught.value) == (
        f"{directory}: MyMCP could not read a trusted file safely: the directory is owned by "
        f"another user (uid {NOBODY}), who could replace the files in it whatever its mode; "
        "that uid is nobody, or a user outside this user namespace (root, seen from a "
        "rootless container): keep it where the user MyMCP runs as owns it "
        "(code=unsafe_permissions)"
    )


@as_root
def test_a_missing_file_in_a_directory_of_another_user_is_refused_not_missing(
    directory: Path,
) -> None:
    # That user could put the file there at any moment, as with a writable directory.
    os.chown(directory, NOBODY, NOBODY)
    assert _reason(directory / "absent") is SafeFileReason.UNSAFE_PERMISSIONS


@as_root
def test_owner_changed_between_stat_and_open(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(directory, b"abc")
    real_open = os.open

    def chown_then_open(name: object, flags: int, *args: object, **kwargs: object) -> int:
        if name == "file":
            os.chown(path, NOBODY, NOBODY)  # the race under test
        return real_open(name, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(safefile.os, "open", chown_then_open)
    assert _reason(path) is SafeFileReason.UNSAFE_PERMISSIONS


@as_root
def test_the_effective_user_or_root_may_own_them(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen from an unprivileged user 4242: its own file is read, and so is root's (root
    could rewrite it anyway); nobody's is not."""
    path = _file(directory)
    monkeypatch.setattr(safefile.os, "geteuid", lambda: 4242)
    assert read_safe_file(path, max_bytes=64) == b"content"  # root's file, root's directory
    os.chown(path, 4242, 4242)
    os.chown(directory, 4242, 4242)
    assert read_safe_file(path, max_bytes=64) == b"content"
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(SafeFileError) as caught:
        read_safe_file(path, max_bytes=64)
    assert caught.value.reason is SafeFileReason.UNSAFE_PERMISSIONS
    assert str(caught.value.detail).endswith(
        f"it must belong to you (uid 4242) or root: as root, run: chown 4242 {path}"
    )


def test_error_message_is_neutral(directory: Path) -> None:
    with pytest.raises(SafeFileError) as caught:
        read_safe_file(directory / "absent", max_bytes=1)
    assert caught.value.code == "missing"
    assert "absent" not in caught.value.message


def test_unsafe_permissions_name_the_directory_its_mode_and_the_fix(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o775)  # noqa: S103 - the unsafe mode under test
    (shared / "file").write_bytes(b"x")
    with pytest.raises(SafeFileError) as caught:
        read_safe_file(shared / "file", max_bytes=10)
    assert str(caught.value) == (
        f"{shared}: MyMCP could not read a trusted file safely: the directory is writable by "
        f"group or others (mode 0775); run: chmod go-w {shared} (code=unsafe_permissions)"
    )


@pytest.mark.parametrize(
    ("reason", "error_type", "prefix", "code"),
    [
        (SafeFileReason.MISSING, ConfigurationError, "", "unreadable"),
        (SafeFileReason.UNSAFE_PATH, ConfigurationError, "", "unsafe_path"),
        (SafeFileReason.CHANGED, ConfigurationError, "", "source_changed"),
        (
            SafeFileReason.TOO_LARGE,
            ExternalPluginLoadError,
            "external_manifest_",
            "external_manifest_too_large",
        ),
        (
            SafeFileReason.MISSING,
            ExternalPluginLoadError,
            "external_manifest_",
            "external_manifest_unreadable",
        ),
    ],
)
def test_one_place_turns_a_reason_into_a_code(
    reason: SafeFileReason, error_type: type[MyMCPError], prefix: str, code: str
) -> None:
    failure = SafeFileError(reason, Path("/etc/x"), "why")
    converted = as_error(failure, error_type, prefix)
    assert (type(converted), converted.code) == (error_type, code)
    assert (converted.location, converted.detail) == (failure.location, "why")


# -- replace_private_file --------------------------------------------------------------------


def _directory_fd(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


@pytest.mark.parametrize("durable", [True, False])
def test_a_replaced_file_is_private_whatever_the_umask(tmp_path: Path, durable: bool) -> None:
    (tmp_path / "state").write_bytes(b"old")
    fd = _directory_fd(tmp_path)
    previous = os.umask(0o000)
    try:
        safefile.replace_private_file(fd, "state", b"new" * 100_000, durable=durable)
    finally:
        os.umask(previous)
        os.close(fd)
    assert (tmp_path / "state").read_bytes() == b"new" * 100_000
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_a_symlink_in_the_way_is_replaced_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"untouched")
    home = tmp_path / "home"
    home.mkdir()
    (home / "state").symlink_to(outside)
    fd = _directory_fd(home)
    try:
        safefile.replace_private_file(fd, "state", b"new")
    finally:
        os.close(fd)
    assert not (home / "state").is_symlink()
    assert (home / "state").read_bytes() == b"new"
    assert outside.read_bytes() == b"untouched"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "state").write_bytes(b"old")

    def full_disk(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safefile.os, "write", full_disk)
    fd = _directory_fd(tmp_path)
    try:
        with pytest.raises(OSError, match="No space left"):
            safefile.replace_private_file(fd, "state", b"new")
    finally:
        os.close(fd)
    monkeypatch.undo()
    assert (tmp_path / "state").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


# -- create_private_directories --------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.usefixtures("umask_022")
def test_every_directory_created_is_private_and_existing_ones_keep_their_mode(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o751)
    target = home / "state" / "mymcp" / "audit"
    safefile.create_private_directories(target)
    assert [_mode(p) for p in (home / "state", home / "state" / "mymcp", target)] == [0o700] * 3
    assert _mode(home) == 0o751
    target.chmod(0o750)  # from now on the directory is the user's: never chmod-ed again
    safefile.create_private_directories(target)
    safefile.create_private_directories(target / "below")
    assert (_mode(target), _mode(target / "below")) == (0o750, 0o700)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_the_mode_is_exactly_0700_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "a" / "b"
    previous = os.umask(umask)
    try:
        safefile.create_private_directories(target)
    finally:
        os.umask(previous)
    assert (_mode(tmp_path / "a"), _mode(target)) == (0o700, 0o700)


def test_an_existing_ancestor_may_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    safefile.create_private_directories(tmp_path / "link" / "cache" / "mymcp")
    assert _mode(real / "cache" / "mymcp") == 0o700


@pytest.mark.parametrize(
    ("blocker", "error"), [("file", NotADirectoryError), ("dangling link", FileNotFoundError)]
)
def test_something_in_the_way_is_named(tmp_path: Path, blocker: str, error: type[OSError]) -> None:
    in_the_way = tmp_path / "state"
    if blocker == "file":
        in_the_way.write_text("")
    else:
        in_the_way.symlink_to(tmp_path / "nowhere")
    with pytest.raises(error) as caught:
        safefile.create_private_directories(in_the_way / "mymcp" / "audit")
    assert caught.value.filename == str(in_the_way)
    assert sorted(os.listdir(tmp_path)) == ["state"]  # nothing was made


def test_a_name_that_is_taken_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir(mode=0o755)
    (tmp_path / "outside").mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(tmp_path / "outside")
    fd = _directory_fd(tmp_path)
    try:
        assert safefile.create_private_directory(fd, "taken") is None
        assert safefile.create_private_directory(fd, "link") is None
        made = safefile.create_private_directory(fd, "new")
        assert made is not None
        os.close(made)
    finally:
        os.close(fd)
    assert (_mode(tmp_path / "taken"), _mode(tmp_path / "outside")) == (0o755, 0o755)
    assert (tmp_path / "link").is_symlink()
    assert _mode(tmp_path / "new") == 0o700
