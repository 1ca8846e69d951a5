"""Linux inotify change notification for the memory index (decision D9's fast path).

The index may skip its stat walk only while it can prove nothing under the walked
directories changed. This module supplies that proof: every directory a walk opens is
watched *before* it is listed, and any queued event says "walk again". It never decides
what changed; the stat walk stays the single source of answers.

Everything here is best effort and fails towards walking: no Linux, no libc through
``ctypes``, no ``/proc``, a full watch table (ENOSPC), a queue overflow or a filesystem
whose changes inotify cannot see (network and FUSE mounts) all make :class:`Watcher`
report "not armed" and the index walks as before. Nothing is loaded at import time.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import sys
import weakref
from typing import Any

__all__ = ["Watcher", "load_libc"]

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
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
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
    directory from an open descriptor, ``drain`` consumes the queue and says whether
    anything happened. The descriptor is closed by :meth:`close` or, at the latest, when
    the watcher is garbage collected.
    """

    def __init__(self, libc: Any, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._watches: set[int] = set()
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

    @property
    def fileno(self) -> int:
        return self._fd

    @property
    def watch_count(self) -> int:
        return len(self._watches)

    def close(self) -> None:
        self.broken = True
        self._watches.clear()
        self._finalizer()

    def watch(self, dir_fd: int) -> bool:
        """Watch the directory open as ``dir_fd``; False when it cannot be (walk each call).

        The watch is placed through ``/proc/self/fd``: the magic link names exactly the
        directory we opened without following symlinks, so no lookup by path can be raced
        into watching something else. (That is also why IN_DONT_FOLLOW is not set here: it
        would watch the magic link itself.) Watching a directory twice returns the same
        descriptor, so re-arming after each walk is cheap.
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
        self._watches.add(wd)
        return True

    def drain(self) -> bool:
        """Consume every queued event; True when there was at least one.

        Watches the kernel dropped (IN_IGNORED) or that followed a directory elsewhere
        (IN_MOVE_SELF) are forgotten so the next walk re-arms what it visits. A read
        failure other than "nothing queued" marks the watcher broken.
        """
        if self.broken:
            return True
        seen = False
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return seen
            except InterruptedError:
                continue
            except OSError:
                self.broken = True
                return True
            if not data:
                return seen
            seen = True
            self._forget_dropped(data)

    def _forget_dropped(self, data: bytes) -> None:
        offset, size = 0, _EVENT.size
        while offset + size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += size + length
            if mask & IN_IGNORED:
                self._watches.discard(wd)
            elif mask & (IN_MOVE_SELF | IN_DELETE_SELF) and wd in self._watches:
                # The kernel sends IN_IGNORED after a deletion; a moved directory keeps
                # its watch wherever it went, so drop it ourselves.
                self._watches.discard(wd)
                self._libc.inotify_rm_watch(self._fd, wd)

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
