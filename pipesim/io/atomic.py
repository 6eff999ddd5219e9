"""Files written atomically: a reader never sees half a file, a failed write keeps the old one, and a command that
writes several files writes all of them or none (`write_files`), so an output that cannot be written never costs
the user a file that was already there.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pipesim.numbers import shown

STANDARD_OUTPUT = "-"  # an output path that means standard output, the command-line convention


def is_standard_output(path: str | Path | None) -> bool:
    """Whether an output path is `-`: standard output, not a file named `-` (write `./-` for that)."""
    return path is not None and str(path) == STANDARD_OUTPUT


def check_output(path: str | Path) -> None:
    """Refuse an output path `write_file` would refuse (a folder, a FIFO, a missing folder) before any work is
    done or any other file written; what can only fail in the write itself (permissions, a full disk) fails there.
    `-` (standard output) is always writable."""
    if is_standard_output(path):
        return
    given = Path(path)
    try:
        target = Path(os.path.realpath(given, strict=False))
        if os.path.islink(given):
            os.stat(given)  # a link that leads nowhere it can resolve (a loop) cannot be written through
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnwritableOutput(f"cannot write {given}: it is a symbolic link loop") from None
    except ValueError:  # an embedded null byte
        raise UnwritableOutput(f"cannot write {shown(str(given))}: not a file name") from None
    if target.exists() and not target.is_file():
        kind = "a folder" if target.is_dir() else "not a regular file (a FIFO, socket or device)"
        raise UnwritableOutput(f"cannot write {given}: it is {kind}; give the path of a file")
    if not target.parent.is_dir():
        raise UnwritableOutput(f"cannot write {given}: folder {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UnwritableOutput(f"cannot write {given}: permission denied")


class UnwritableOutput(ValueError):
    """An output file that cannot be written (a folder, a FIFO, a missing folder, no permission, a full disk): the
    inputs were fine, the output was not (the command lines' exit status 1, not a usage error)."""


def write_file(content: str | bytes, path: str | Path) -> None:
    """Write a file atomically: a reader never sees half of it, a failed write keeps the old one and leaves no
    temporary file behind.

    The file gets the mode any new file would (0666 less the umask), or keeps the mode of the file it replaces, so a
    run folder or an exported chart is as readable to a teammate or a web server as the user's other files. A
    symbolic link is written through to its target (the link stays, the target keeps its mode). A path that exists
    but is not a regular file (a folder, a FIFO, a device such as /dev/null) is refused rather than replaced. Every
    failure is an UnwritableOutput (a ValueError) that names the path the user gave, never the temporary file.
    `-` writes to standard output.
    """
    write_files({path: content})


def write_files(contents: Mapping[str | Path, str | bytes]) -> None:
    """Write several files, all or none: each is written whole to a temporary file beside its target first, and
    only when every one is written are they renamed into place; a failure removes the temporary files and leaves
    every existing file as it was (`synthesize --csv` into a read-only folder keeps the `--json` file there).
    An output `-` goes to standard output, after every file is in place."""
    staged: list[tuple[str, Path, Path]] = []  # (temporary, target, the path as given)
    to_stdout = [content for path, content in contents.items() if is_standard_output(path)]
    try:
        for path, content in contents.items():
            if is_standard_output(path):
                continue
            given = Path(path)
            check_output(given)
            target = Path(os.path.realpath(given))
            staged.append((_staged(content, target, given), target, given))
        for temporary, target, given in staged:
            try:
                os.replace(temporary, target)
            except OSError as error:
                raise UnwritableOutput(f"cannot write {given}: {error.strerror or error}") from None
    finally:
        for temporary, _, _ in staged:
            if os.path.exists(temporary):
                os.unlink(temporary)
    for content in to_stdout:
        _write_stdout(content)


def _write_stdout(content: str | bytes) -> None:
    if isinstance(content, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(content)
    else:
        sys.stdout.write(content if content.endswith("\n") or not content else content + "\n")
    sys.stdout.flush()


def _staged(content: str | bytes, target: Path, given: Path) -> str:
    """A temporary file beside `target` holding `content`, with the mode the target will have."""
    temporary = None
    try:
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~current_umask()
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.fchmod(handle, mode)  # mkstemp makes it 0600 whatever the umask
        if isinstance(content, bytes):
            with os.fdopen(handle, "wb") as out:
                out.write(content)
        else:
            with os.fdopen(handle, "w", newline="") as out:  # newline="": keep the text's own line endings (CSV)
                out.write(content)
        return temporary
    except OSError as error:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
        raise UnwritableOutput(f"cannot write {given}: {error.strerror or error}") from None


def current_umask() -> int:
    """The process's umask, read without changing it (/proc on Linux): setting it to read it back, as os.umask
    must, would give another thread's new files the wrong mode meanwhile (the app writes from several)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc: the only other way, briefly
    os.umask(mask)
    return mask
