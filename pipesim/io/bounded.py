"""The one way pipesim and the executor read a file: bounded, regular files only, never blocking.

A path given by a user, or found in a run folder, may be anything: a FIFO (opening one for reading waits for a
writer forever), a device (`/dev/zero` never ends), a symlink loop, a folder, or a regular file of gigabytes.
`read_bytes` opens without following into a wait (`O_NONBLOCK`: a FIFO opens at once), asks the open file
itself what it is (`fstat`: no race between a check and the open), refuses anything but a regular file, and
refuses a file over `limit` bytes before reading any of it. It then reads at most `limit + 1` bytes, so a file
that grows while it is read (or a /proc file that says it is empty) is refused too. Every failure is one
ValueError that names the path the user gave and, for a size, the limit (pipesim/limits.py).
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

_CHUNK = 1 << 20


def _size(num_bytes: float) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if num_bytes >= factor:
            return f"{num_bytes / factor:,.1f} {unit}"
    return f"{num_bytes:,.0f} bytes"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _open_error(path: str | Path, error: OSError) -> ValueError:
    if error.errno == errno.ELOOP:
        return ValueError(f"cannot read {path}: it is a symbolic link loop")
    return ValueError(f"cannot read {path}: {error.strerror or error}")


def file_size(path: str | Path, limit: int, what: str = "file") -> int:
    """The size of regular file `path`, checked against `limit` without opening it (lstat after resolving
    symlinks, as `os.stat` does); ValueError naming the path for anything else."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise _open_error(path, error) from None
    _check(path, info, limit, what)
    return info.st_size


def _check(path: str | Path, info: os.stat_result, limit: int, what: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"cannot read {path}: it is {_kind(info.st_mode)}; give a regular {what}")
    check_size(path, info.st_size, limit, what)


def check_size(name: str | Path, size: int, limit: int, what: str = "file") -> None:
    """ValueError naming `name` when its `size` (bytes) is over `limit`: a file's, or an upload's already in
    memory."""
    if size > limit:
        raise ValueError(
            f"{name} is {_size(size)}; pipesim reads a {what} of at most {_size(limit)} (pipesim/limits.py)"
        )


def _open(path: str | Path) -> int:
    """A read-only descriptor that never blocks on opening (a FIFO with no writer would hang a plain open)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise _open_error(path, error) from None


def read_bytes(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The whole content of regular file `path`, at most `limit` bytes; ValueError naming `path` otherwise.

    `what` names the kind of file in the messages ("schedule file", "trace")."""
    handle = _open(path)
    try:
        _check(path, os.fstat(handle), limit, what)
        data = _read_up_to(handle, limit + 1)  # one byte more than allowed tells a file that grew
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    finally:
        os.close(handle)
    if len(data) > limit:
        raise ValueError(f"{path} grew past {_size(limit)} while it was read (pipesim/limits.py)")
    return data


def _read_up_to(handle: int, count: int) -> bytes:
    """At most `count` bytes from `handle`'s position, in chunks of `_CHUNK`, until the end of the file."""
    chunks, total = [], 0
    while total < count and (chunk := os.read(handle, min(_CHUNK, count - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_buffer(path: str | Path, limit: int, what: str = "file") -> bytearray:
    """`read_bytes` into one buffer of the file's size, read in place: no chunks joined at the end, so a file of
    200 MB takes 200 MB, not twice that for a moment (`pipesim balance` of 10^6 stages)."""
    handle = _open(path)
    try:
        info = os.fstat(handle)
        _check(path, info, limit, what)
        buffer = bytearray(info.st_size + 1)  # a byte more: a file that grew while it was read shows
        with memoryview(buffer) as view, io.FileIO(handle, closefd=False) as reader:
            total = 0
            while total < len(buffer):
                count = reader.readinto(view[total : total + _CHUNK])
                if not count:
                    break
                total += count
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    finally:
        os.close(handle)
    if total > info.st_size:
        raise ValueError(f"{path} grew while it was read; read it again once it is written")
    del buffer[total:]
    return buffer


def read_text(path: str | Path, limit: int, what: str = "file") -> str:
    """`read_bytes` decoded as UTF-8 (a byte-order mark dropped); a file that is not text names itself."""
    raw = read_bytes(path, limit, what)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a UTF-8 text file (byte {error.start} cannot be decoded)") from None


def read_tail(path: str | Path, max_bytes: int) -> str:
    """The last `max_bytes` of regular file `path` as text (a log's latest lines, however long the log grew),
    opened as `read_bytes` opens (a FIFO or a device is refused at once); undecodable bytes replaced."""
    handle = _open(path)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"cannot read {path}: it is {_kind(info.st_mode)}; give a regular file")
        os.lseek(handle, max(info.st_size - max_bytes, 0), os.SEEK_SET)
        data = _read_up_to(handle, max_bytes)
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    finally:
        os.close(handle)
    return data.decode("utf-8", errors="replace")
