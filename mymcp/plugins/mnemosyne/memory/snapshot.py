"""The memory index's snapshot file: named columns in one checksummed container, kept
private in the user's cache directory.

The index decides what a snapshot holds and checks every value it reads back; this
module only keeps the bytes. A snapshot is a nested mapping of *columns*: arrays, byte
strings, lists of strings (or None), nested mappings and small JSON values. On disk:

    magic, header length (4 bytes), JSON header, payload

The header names the format, the root (path, device and inode), the versions the
caller's contents depend on, the layout of the columns, every payload section's name,
kind and length, and the CRC-32 of the payload; the payload is the sections' bytes back
to back. A file of another format, root or version is *foreign*; one that fails any
check is *corrupt*; both are ignored by the caller and replaced by its next save.

Files are handled through an open handle on the cache directory, which must belong to
this user and be writable by nobody else; the snapshot itself is created exclusively
with mode 0600 under a random temp name and renamed into place, and read only when it
is a private regular file of bounded size. A snapshot outlives its root only until the
next process saves one into the same directory: a root deleted by hand must not leave
its memories' words behind in a cache.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import stat
import struct
import threading
import zlib
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from mymcp._safefile import (
    create_private_directories,
    create_private_file,
    replace_private_file,
)

from .model import CANDIDATE_LIMIT_MAX
from .store import read_at_most

MAGIC: Final = b"MYMCP-MEMORY-INDEX\n"
FORMAT: Final = 2
HEADER: Final = struct.Struct("<I")
_MAX_HEADER: Final = 1 << 20
# A snapshot takes about 400 bytes per record; a kilobyte for each of the most records
# one scope may ever hold is a bound no real snapshot reaches, and keeps a planted or
# runaway file from being read into memory.
MAX_SNAPSHOT_BYTES: Final = CANDIDATE_LIMIT_MAX * 1024
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_READ_CHUNK: Final = 1 << 24

SAVES: Final = threading.Lock()
"""One snapshot write or removal at a time in this process."""


class SnapshotUnusable(Exception):
    """A snapshot that must not be used, or a cache directory that must not be written.

    ``reason`` is one word for the log: ``foreign`` (another format, root or version),
    ``corrupt`` (any failed check), ``unsafe_file`` (not a private regular file of this
    user), ``too_large`` or ``unsafe_directory`` (the cache directory is another user's
    or writable by others); for the key of logged file ids, ``unsafe_key`` (not this
    user's private regular file) or ``corrupt_key`` (not of the key's form).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def snapshot_path(directory: Path, root: Path) -> Path:
    """Where the snapshot of ``root`` lives in ``directory``: one file per root however
    its path is spelled (through a link, say), so that every process on that root keeps
    the same snapshot, and a forget in any of them removes the only copy."""
    return _named(directory, os.path.realpath(root))


def _named(directory: Path, root_path: str) -> Path:
    name = hashlib.sha256(os.fsencode(root_path)).hexdigest()[:24]
    return directory / f"memory-index-{name}.bin"


# -- encoding ---------------------------------------------------------------------------


class _Writer:
    """Collects payload sections and their descriptions."""

    def __init__(self) -> None:
        self.sections: list[list[Any]] = []
        self.chunks: list[bytes] = []

    def add(self, name: str, kind: str, data: bytes) -> None:
        self.sections.append([name, kind, len(data)])
        self.chunks.append(data)

    def strings(self, name: str, items: Sequence[str | None]) -> None:
        lengths = array("i", (-1 if item is None else len(item) for item in items))
        text = "".join(item for item in items if item is not None)
        self.add(f"{name}#lengths", "i", lengths.tobytes())
        self.add(f"{name}#text", "raw", text.encode("utf-8", "surrogatepass"))


def _is_strings(value: object) -> bool:
    return isinstance(value, list) and all(item is None or type(item) is str for item in value)


def _put(out: _Writer, prefix: str, columns: Mapping[str, Any]) -> dict[str, Any]:
    """Write nested columns as sections; returns the layout the header records."""
    layout: dict[str, Any] = {}
    for name, value in columns.items():
        where = f"{prefix}/{name}" if prefix else name
        if isinstance(value, array):
            out.add(where, value.typecode, value.tobytes())
            layout[name] = ["array", value.typecode]
        elif isinstance(value, bytes | bytearray):
            out.add(where, "raw", bytes(value))
            layout[name] = ["raw"]
        elif isinstance(value, Mapping):
            layout[name] = ["parts", _put(out, where, value)]
        elif _is_strings(value):
            out.strings(where, value)
            layout[name] = ["strings"]
        else:
            layout[name] = ["value", value]
    return layout


def _identity(root: Path, versions: Mapping[str, int]) -> dict[str, Any]:
    info = os.stat(root)
    return {
        "format": FORMAT,
        "versions": dict(versions),
        "root": os.fsdecode(os.path.realpath(root)),
        "device": info.st_dev,
        "inode": info.st_ino,
    }


def encode(root: Path, versions: Mapping[str, int], columns: Mapping[str, Any]) -> bytes:
    """The snapshot file's bytes for ``columns`` of the index of ``root``."""
    out = _Writer()
    layout = _put(out, "", columns)
    payload = b"".join(out.chunks)
    header = {
        **_identity(root, versions),
        "layout": layout,
        "sections": out.sections,
        "checksum": zlib.crc32(payload),
    }
    encoded = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + HEADER.pack(len(encoded)) + encoded + payload


# -- decoding ---------------------------------------------------------------------------


class _Reader:
    def __init__(self, sections: dict[str, tuple[str, memoryview]]) -> None:
        self.sections = sections

    def array(self, name: str, typecode: str) -> array[Any]:
        kind, data = self.sections[name]
        if kind != typecode:
            raise ValueError("section type")
        result = array(typecode)
        result.frombytes(data)
        return result

    def raw(self, name: str) -> bytes:
        kind, data = self.sections[name]
        if kind != "raw":
            raise ValueError("section type")
        return bytes(data)

    def strings(self, name: str) -> list[str | None]:
        lengths = self.array(f"{name}#lengths", "i")
        text = self.raw(f"{name}#text").decode("utf-8", "surrogatepass")
        items: list[str | None] = []
        at = 0
        for length in lengths:
            if length < 0:
                items.append(None)
            else:
                items.append(text[at : at + length])
                at += length
        if at != len(text):
            raise ValueError("string section length")
        return items


def _get(read: _Reader, prefix: str, layout: Mapping[str, Any]) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    for name, (kind, *detail) in layout.items():
        where = f"{prefix}/{name}" if prefix else name
        if kind == "array":
            columns[name] = read.array(where, detail[0])
        elif kind == "raw":
            columns[name] = read.raw(where)
        elif kind == "parts":
            columns[name] = _get(read, where, detail[0])
        elif kind == "strings":
            columns[name] = read.strings(where)
        elif kind == "value":
            columns[name] = detail[0]
        else:
            raise ValueError("layout")
    return columns


def parse_container(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The header and payload of a snapshot file (ValueError when it has neither)."""
    if not data.startswith(MAGIC):
        raise ValueError("magic")
    at = len(MAGIC)
    (size,) = HEADER.unpack_from(data, at)
    at += HEADER.size
    if size > _MAX_HEADER:
        raise ValueError("header size")
    header = json.loads(data[at : at + size])
    if type(header) is not dict:
        raise ValueError("header")
    return header, data[at + size :]


def decode(data: bytes, root: Path, versions: Mapping[str, int]) -> dict[str, Any]:
    """The columns a snapshot of ``root`` holds; raises `SnapshotUnusable` (``foreign``
    or ``corrupt``). The values are only as trustworthy as their checksum: the caller
    checks that they fit together."""
    try:
        identity = _identity(root, versions)
    except OSError:
        # No root (removed, or not created yet): whatever the file holds is no
        # snapshot of this one, and nothing about the file itself is wrong.
        raise SnapshotUnusable("foreign") from None
    try:
        header, payload = parse_container(data)
        if any(header.get(key) != value for key, value in identity.items()):
            raise SnapshotUnusable("foreign")
        if zlib.crc32(payload) != header.get("checksum"):
            raise ValueError("checksum")
        view = memoryview(payload)
        sections: dict[str, tuple[str, memoryview]] = {}
        at = 0
        for name, kind, length in header["sections"]:
            if type(length) is not int or length < 0 or at + length > len(view):
                raise ValueError("section bounds")
            sections[name] = (kind, view[at : at + length])
            at += length
        if at != len(view):
            raise ValueError("trailing bytes")
        return _get(_Reader(sections), "", header["layout"])
    except SnapshotUnusable:
        raise
    except (ValueError, KeyError, TypeError, IndexError, OverflowError, OSError, struct.error):
        raise SnapshotUnusable("corrupt") from None


# -- the files --------------------------------------------------------------------------


def _open_directory(directory: Path, *, create: bool) -> int | None:
    """A handle on the cache directory (None when it is absent, or no directory, and not
    to be created);
    every file operation goes through it, so the directory checked is the one used."""
    if create:
        create_private_directories(directory)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None  # a file there (or on the way) holds no snapshot either
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise SnapshotUnusable("unsafe_directory")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _temps(directory_fd: int, target: str) -> Iterator[tuple[str, int]]:
    """Temp files of interrupted or running saves of ``target``, with their writer's pid."""
    prefix = f".{target}."
    for name in os.listdir(directory_fd):
        pid, _, rest = name.removeprefix(prefix).partition(".")
        if (
            name.startswith(prefix)
            and name.endswith(".tmp")
            and pid.isascii()
            and pid.isdigit()
            and rest
        ):
            yield name, int(pid)


def _sweep(directory_fd: int, target: str) -> None:
    """Remove temp files this process or a process that no longer runs left behind.

    Called holding `SAVES`, so none of this process's saves is running.
    """
    for name, pid in list(_temps(directory_fd, target)):
        if pid == os.getpid() or not _running(pid):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=directory_fd)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_snapshot(directory: Path, root: Path, data: bytes) -> None:
    """Replace the snapshot of ``root`` atomically (call holding `SAVES`); the first
    write to a directory in a process also deletes the snapshots of roots that are gone.

    Raises `SnapshotUnusable("unsafe_directory")` or OSError; a failed write leaves the
    previous snapshot in place and no temp file behind.
    """
    target = snapshot_path(directory, root).name
    directory_fd = _open_directory(directory, create=True)
    assert directory_fd is not None
    try:
        _sweep(directory_fd, target)
        # A cache: a crash may lose the newest snapshot (the files rebuild it), so the
        # write is not fsynced.
        replace_private_file(directory_fd, target, data, durable=False)
        if directory not in _PRUNED:
            _PRUNED.add(directory)
            _prune_orphans(directory_fd)
    finally:
        os.close(directory_fd)


_PRUNED: Final[set[Path]] = set()
"""The cache directories this process has pruned (changed holding `SAVES`)."""
_SNAPSHOT_NAME: Final = re.compile(r"memory-index-[0-9a-f]{24}\.bin")


def _prune_orphans(directory_fd: int) -> None:
    """Delete every snapshot whose root is gone (its path names nothing, or a directory
    made since), with its forget mark.

    Nothing would ever read such a file again, yet it holds the titles and words of
    the memories that were there: a person who deletes a memory root must not find
    them kept in a cache. A snapshot whose root cannot be checked is left alone.
    """
    for name in os.listdir(directory_fd):
        if not _SNAPSHOT_NAME.fullmatch(name):
            continue
        header = _read_header(directory_fd, name)
        if header is None or not _root_is_gone(header):
            continue
        _sweep(directory_fd, name)  # the temp files of its interrupted saves
        for orphan in (name, name.removesuffix(".bin") + ".forgotten"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(orphan, dir_fd=directory_fd)


def _read_header(directory_fd: int, name: str) -> dict[str, Any] | None:
    """The header of a snapshot in the directory, or None when the file is not one of
    this user's private snapshots or its header cannot be read."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=directory_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        # A regular file reads whole up to its end: a short read is a short file.
        start = os.read(fd, len(MAGIC) + HEADER.size)
        if len(start) != len(MAGIC) + HEADER.size:
            return None
        (size,) = HEADER.unpack_from(start, len(MAGIC))
        if size > _MAX_HEADER:
            return None
        header, _ = parse_container(start + os.read(fd, size))
        return header
    except (OSError, ValueError, struct.error):
        return None
    finally:
        os.close(fd)


def _root_is_gone(header: Mapping[str, Any]) -> bool:
    root, device, inode = header.get("root"), header.get("device"), header.get("inode")
    if not isinstance(root, str) or not os.path.isabs(root):
        return False
    try:
        info = os.stat(root)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):  # not ours to judge: unreadable, or no valid path
        return False
    return (info.st_dev, info.st_ino) != (device, inode)


def read_snapshot(directory: Path, root: Path) -> bytes | None:
    """The snapshot file's bytes, or None when there is none.

    Raises `SnapshotUnusable` when the directory or the file is not private to this user
    (``unsafe_directory``, ``unsafe_file``), the file is larger than `MAX_SNAPSHOT_BYTES`
    (``too_large``) or cannot be read (``corrupt``).
    """
    directory_fd = _open_directory(directory, create=False)
    if directory_fd is None:
        return None
    try:
        try:
            fd = os.open(snapshot_path(directory, root).name, _READ_FLAGS, dir_fd=directory_fd)
        except FileNotFoundError:
            return None
        except OSError:
            raise SnapshotUnusable("unsafe_file") from None
        try:
            info = os.fstat(fd)
            if (
                not stat.S_ISREG(info.st_mode)
                or info.st_uid != os.geteuid()
                or info.st_mode & 0o022
            ):
                raise SnapshotUnusable("unsafe_file")
            if info.st_size > MAX_SNAPSHOT_BYTES:
                raise SnapshotUnusable("too_large")
            data = read_at_most(fd, MAX_SNAPSHOT_BYTES, _READ_CHUNK)
            if data is None:
                raise SnapshotUnusable("too_large")
            return data
        except OSError:
            raise SnapshotUnusable("corrupt") from None
        finally:
            os.close(fd)
    finally:
        os.close(directory_fd)


def remove_snapshot(directory: Path, root: Path) -> None:
    """Delete the snapshot of ``root`` and the temp files of interrupted saves (call
    holding `SAVES`); raises OSError when that fails."""
    # No ownership check here: whatever the directory has become, a copy must not stay.
    try:
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return  # no directory, so no copy in it
    # Also the file of this spelling of the root's path, where earlier versions kept it.
    targets = {snapshot_path(directory, root).name, _named(directory, os.path.abspath(root)).name}
    try:
        for target in targets:
            _sweep(directory_fd, target)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target, dir_fd=directory_fd)
    finally:
        os.close(directory_fd)


# -- forgetting across processes --------------------------------------------------------


def closed_to_snapshots(directory: Path) -> bool:
    """Whether no process of this user can write a snapshot into ``directory`` now: it
    is no directory (nor could one be made there, or the mark would have been), or one
    closed to writing, a read-only file system's included. A forget that could not leave
    its mark there then has nobody to tell."""
    try:
        info = os.stat(directory)
    except OSError:
        return True
    return not stat.S_ISDIR(info.st_mode) or not os.access(directory, os.W_OK | os.X_OK)


_MARK_BYTES: Final = 64


def _mark_name(directory: Path, root: Path) -> str:
    return snapshot_path(directory, root).with_suffix(".forgotten").name


def mark_forgotten(directory: Path, root: Path) -> str:
    """Say to every process that shares ``root`` that a record was forgotten: write a
    fresh token to the mark file and return it (call holding `SAVES`).

    A process that saves its snapshot reads the mark first; a token it has not seen
    means its rows may hold the forgotten record's text, so it re-reads the files
    before it saves. Raises OSError when the mark cannot be written.
    """
    token = secrets.token_hex(16)
    directory_fd = _open_directory(directory, create=True)
    assert directory_fd is not None
    try:
        replace_private_file(
            directory_fd, _mark_name(directory, root), token.encode("ascii"), durable=False
        )
    finally:
        os.close(directory_fd)
    return token


def read_forget_mark(directory: Path, root: Path) -> str:
    """The mark's current token: empty when no process ever forgot a record of ``root``
    here; a file that is not this user's private regular file reads as a token no
    process wrote, so that whoever reads it checks its rows."""
    try:
        directory_fd = _open_directory(directory, create=False)
    except SnapshotUnusable:
        return "unreadable"
    if directory_fd is None:
        return ""
    try:
        fd = os.open(_mark_name(directory, root), _READ_FLAGS, dir_fd=directory_fd)
    except FileNotFoundError:
        return ""
    except OSError:
        return "unreadable"
    finally:
        os.close(directory_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return "unreadable"
        return os.read(fd, _MARK_BYTES).decode("ascii", "replace")
    except OSError:
        return "unreadable"
    finally:
        os.close(fd)


# -- the key of logged file ids ---------------------------------------------------------

_FILE_KEY_NAME: Final = "memory-file-key"
_FILE_KEY_HEX: Final = 64


def file_key(directory: Path | None) -> bytes:
    """The key `file_id` digests paths with. Kept in the cache directory, so that every
    process of this user names a file alike (the server's log, `mymcp memory check`);
    the first process that needs it makes it, and a file there that is not this user's
    private key (others may read it, or it was edited) is replaced by a fresh one. Where
    none can be kept or read, a key of this process's own: its ids then match no other
    process's, which costs the operator a correlation, never a path."""
    if directory is not None:
        with contextlib.suppress(OSError, SnapshotUnusable):
            try:
                key = _read_file_key(directory)
            except SnapshotUnusable as unusable:
                if unusable.reason == "unsafe_directory":
                    raise
                _put_file_key(directory, replace=True)
                key = _read_file_key(directory)
            if key is None:
                _put_file_key(directory, replace=False)
                key = _read_file_key(directory)
            if key is not None:
                return key
    return _own_key()


def _put_file_key(directory: Path, *, replace: bool) -> None:
    """Write a fresh key: in place of the file there (`replace`), or only where there is
    none (another process may have been first, and then its key is the one kept)."""
    directory_fd = _open_directory(directory, create=True)
    assert directory_fd is not None
    made = secrets.token_hex(_FILE_KEY_HEX // 2).encode("ascii")
    try:
        if replace:
            replace_private_file(directory_fd, _FILE_KEY_NAME, made)
        else:
            with contextlib.suppress(FileExistsError):
                create_private_file(directory_fd, _FILE_KEY_NAME, made)
    finally:
        os.close(directory_fd)


@functools.cache
def _own_key() -> bytes:
    """This process's key, where none is kept: one for all its indexes, so that they
    name a file alike."""
    return secrets.token_bytes(_FILE_KEY_HEX // 2)


def _read_file_key(directory: Path) -> bytes | None:
    """The kept key; None when there is none yet. A file that is not this user's private
    regular file of the key's form raises `SnapshotUnusable` (`file_key` replaces it)."""
    directory_fd = _open_directory(directory, create=False)
    if directory_fd is None:
        return None
    try:
        fd = os.open(_FILE_KEY_NAME, _READ_FLAGS, dir_fd=directory_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link in the key's place
            raise SnapshotUnusable("unsafe_key") from None
        raise
    finally:
        os.close(directory_fd)
    try:
        info = os.fstat(fd)
        private = stat.S_ISREG(info.st_mode) and not info.st_mode & 0o077
        if not private or info.st_uid != os.geteuid():
            raise SnapshotUnusable("unsafe_key")
        text = os.read(fd, _FILE_KEY_HEX + 1)
    finally:
        os.close(fd)
    if len(text) != _FILE_KEY_HEX or not all(c in b"0123456789abcdef" for c in text):
        raise SnapshotUnusable("corrupt_key")
    return bytes.fromhex(text.decode("ascii"))
