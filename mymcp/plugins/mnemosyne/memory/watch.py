"""inotify change notification for the directories a walk opens: while no event arrived
for a directory, what was listed from it is still current."""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

from .model import RelativePath

# <sys/inotify.h>
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_ONLYDIR = 0x01000000
IN_EXCL_UNLINK = 0x04000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# Everything that can change what a directory lists or what a listed file holds.
# IN_ATTRIB covers chmod (readability) and utime; atime updates from our own reads do
# not raise it. IN_EXCL_UNLINK: an unlinked file still held open elsewhere is gone for us.
WATCH_MASK = (
    IN_CREATE
    | IN_DELETE
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_ATTRIB
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_EXCL_UNLINK
)

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_SIZE = 64 * 1024
# Events that say something happened to a watched directory as a whole, or to the queue.
_RESCAN_MASK = IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_ISDIR


@dataclass(slots=True)
class Changes:
    """What one drain of the event queue saw.

    ``entries`` are the (watched directory parts, entry name) pairs named by events about
    non-directory entries; ``rescan`` is set when some event cannot be attributed to one
    such entry, so only a full walk can tell what changed.
    """

    rescan: bool = False
    entries: set[tuple[RelativePath, str]] = field(default_factory=set)


# statfs f_type of local filesystems, where every change goes through this kernel and
# so raises inotify events. Anything else (NFS, SMB, FUSE, 9p, Ceph, ...) can change
# behind our back: the index then always walks.
_LOCAL_FILESYSTEMS = frozenset(
    {
        0xEF53,  # ext2/3/4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0x858458F6,  # ramfs
        0x794C7630,  # overlayfs
        0x2FC12FC1,  # zfs
        0xF2F52010,  # f2fs
        0xCA451A4E,  # bcachefs
        0x52654973,  # reiserfs
        0x3153464A,  # jfs
        0x4D44,  # vfat
        0x2011BAB0,  # exfat
        0x5346544E,  # ntfs
        0x7366746E,  # ntfs3
        0x482B,  # hfsplus
    }
)


@functools.cache
def load_libc() -> Any | None:
    """libc through ctypes with the inotify entry points typed, or None where unusable."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # here, not at import time: only a built index needs it

        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_init1.restype = ctypes.c_int
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_add_watch.restype = ctypes.c_int
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.inotify_rm_watch.restype = ctypes.c_int
        libc.fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fstatfs.restype = ctypes.c_int
    except (ImportError, OSError, AttributeError):
        return None
    return libc


class Watcher:
    """One inotify instance watching the directories of one memory root.

    Callers serialise all use (the index does, under its lock). ``watch`` arms a
    directory from an open descriptor, ``drain`` consumes the queue and reports which
    entries the events named (or that a walk is needed). The descriptor is closed by
    :meth:`close` or, at the latest, when the watcher is garbage collected.
    """

    def __init__(self, libc: Any, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        # Watch descriptor -> root-relative parts of the directory it was placed on.
        self._watches: dict[int, RelativePath] = {}
        self._local_devices: dict[int, bool] = {}
        self._finalizer = weakref.finalize(self, _close, fd)
        self.broken = False

    @classmethod
    def create(cls) -> Watcher | None:
        """A new watcher, or None where inotify is unavailable."""
        libc = load_libc()
        if libc is None:
            return None
        try:
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except Exception:  # a libc without the entry point: no fast path
            return None
        if fd < 0:  # EMFILE (max_user_instances), ENOSYS, ...
            return None
        return cls(libc, fd)

    def close(self) -> None:
        self.broken = True
        self._watches.clear()
        self._finalizer()

    def watch(self, dir_fd: int, parts: RelativePath = ()) -> bool:
        """Watch the directory open as ``dir_fd`` (at ``parts`` under the root); False when
        it cannot be (walk each call).

        The watch is placed through ``/proc/self/fd``: the magic link names exactly the
        directory we opened without following symlinks, so no lookup by path can be raced
        into watching something else. (That is also why inotify's don't-follow flag is
        not set here: it would watch the magic link itself.) Watching a directory twice
        returns the same descriptor, so re-arming after each walk is cheap.
        """
        if self.broken:
            return False
        try:
            device = os.fstat(dir_fd).st_dev
        except OSError:
            return False
        local = self._local_devices.get(device)
        if local is None:
            local = self._local_devices[device] = self._is_local(dir_fd)
        if not local:
            return False
        path = f"/proc/self/fd/{dir_fd}".encode()
        wd = self._libc.inotify_add_watch(self._fd, path, WATCH_MASK)
        if wd < 0:
            # ENOSPC (max_user_watches), ENOENT (no /proc), EACCES, ...: not armed.
            return False
        # Re-watching a directory returns the same descriptor; the latest parts win.
        self._watches[wd] = parts
        return True

    def drain(self) -> Changes | None:
        """Consume every queued event; None when there was none.

        Watches the kernel dropped (IN_IGNORED) or that followed a directory elsewhere
        (IN_MOVE_SELF) are forgotten so the next walk re-arms what it visits. A read
        failure other than "nothing queued" marks the watcher broken (and asks for a
        rescan).
        """
        if self.broken:
            return Changes(rescan=True)
        changes: Changes | None = None
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return changes
            except InterruptedError:
                continue
            except OSError:
                self.broken = True
                return Changes(rescan=True)
            if not data:
                return changes
            if changes is None:
                changes = Changes()
            self._collect(data, changes)

    def _collect(self, data: bytes, changes: Changes) -> None:
        offset, size = 0, _EVENT.size
        watches = self._watches
        while offset + size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + size : offset + size + length].rstrip(b"\0")
            offset += size + length
            if mask & IN_IGNORED:
                watches.pop(wd, None)
            elif mask & (IN_MOVE_SELF | IN_DELETE_SELF) and wd in watches:
                # The kernel sends IN_IGNORED after a deletion; a moved directory keeps
                # its watch wherever it went, so drop it ourselves.
                del watches[wd]
                self._libc.inotify_rm_watch(self._fd, wd)
            parts = watches.get(wd)
            if mask & _RESCAN_MASK or parts is None or not name:
                # The queue, a watch or a directory as a whole changed (or an event about
                # the directory itself, e.g. its permissions): only a walk can tell.
                changes.rescan = True
            else:
                changes.entries.add((parts, os.fsdecode(name)))

    def _is_local(self, dir_fd: int) -> bool:
        # struct statfs starts with f_type (a C long on every Linux ABI that matters; on
        # others the value read is garbage, which is "not local": the safe answer).
        import ctypes

        buffer = ctypes.create_string_buffer(256)
        if self._libc.fstatfs(dir_fd, buffer) != 0:
            return False
        f_type = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
        return f_type in _LOCAL_FILESYSTEMS


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
