"""Putting a finished file or folder in place in one step, so a killed writer never leaves half of one.

A writer builds its result under a temporary name beside the destination (the same folder, hence the same file
system, where a rename is atomic) and moves it into place only when it is complete:

* :func:`exchange` swaps two folders atomically (Linux ``renameat2(RENAME_EXCHANGE)``), so a folder is replaced
  with no moment at which the destination is missing. Where the system cannot swap it returns False and the
  caller falls back to two renames.
* :func:`put_folder_in_place` puts a finished folder at its destination (swapping, or with two renames), and
  :func:`recover_folder` undoes what a writer killed meanwhile left: a destination moved aside is put back,
  temporary folders go. A folder counts as complete when it holds its *marker* file, written last.
* :func:`rename_noreplace` moves a file to a name that must not exist yet, and fails (``FileExistsError``)
  instead of replacing one that appeared meanwhile.

Temporary names carry the writer's process id: ``.<destination>~agentlab-<kind>-<pid>-<token>``. A later writer
removes only the leftovers of processes that no longer run (:func:`leftovers`), never those of a live writer,
which may still be working. A process id reused by an unrelated process only delays that clean-up.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import re
import secrets
import shutil
import sys
from pathlib import Path

from agentlab.store import fsync_dir

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM}
_TEMP = re.compile(r"^\.(?P<stem>.+)~agentlab-(?P<kind>[a-z]+)-(?P<pid>\d+)-[0-9a-f]{8}(?P<suffix>\.[a-z]+)?$")


def _stem(dest: Path) -> str:
    # Readable start of the destination's name plus a hash of all of it: temporary names stay short, and two
    # destinations that share a long prefix never take each other's leftovers.
    return f"{dest.name[:48]}.{hashlib.sha256(os.fsencode(dest.name)).hexdigest()[:8]}"


def temp_path(dest: Path, kind: str) -> Path:
    """A fresh temporary name beside ``dest`` for a ``kind`` of writer (``export``, ``import``, ...)."""
    return dest.with_name(f".{_stem(dest)}~agentlab-{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (this process counts: another of its threads may be writing)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def leftovers(dest: Path, kind: str) -> list[Path]:
    """Temporary files and folders of ``kind`` for ``dest`` left by processes that no longer run.

    A leftover's name may carry a suffix after the token (``.wal``: files that DuckDB puts beside a database).
    """
    stem = _stem(dest)
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        match = _TEMP.match(name)
        if match and match["stem"] == stem and match["kind"] == kind and not pid_alive(int(match["pid"])):
            found.append(dest.parent / name)
    return found


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """Rename with ``flags``; False when this system or file system cannot (the caller then falls back)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    if function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), os.fspath(src), None, os.fspath(dst))


def exchange(a: Path, b: Path) -> bool:
    """Swap the folders (or files) ``a`` and ``b`` in one atomic step; False if this system cannot."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def rename_noreplace(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst``, which must not exist.

    Raises:
        FileExistsError: ``dst`` exists (``src`` is left where it was).
    """
    if _renameat2(src, dst, _RENAME_NOREPLACE):
        return
    try:
        os.link(src, dst)  # fails if dst exists, with no window in which it could be replaced
    except FileExistsError:
        raise
    except OSError:
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(dst)) from None
        os.rename(src, dst)
        return
    os.unlink(src)


def put_folder_in_place(work: Path, dest: Path, marker: str) -> None:
    """Move the complete folder ``work`` to ``dest``, replacing what is there in one atomic swap if possible.

    Without a swap (not Linux, or a file system without it) the old ``dest`` is first renamed aside; a writer
    killed between the two renames leaves it there, and :func:`recover_folder` puts it back.
    """
    if not os.path.lexists(dest):
        os.rename(work, dest)
    elif exchange(work, dest):
        discard_folder(work, marker)  # the old folder, now under the temporary name
    else:
        old = temp_path(dest, "replaced")
        os.rename(dest, old)
        try:
            os.rename(work, dest)
        except BaseException:
            os.rename(old, dest)
            raise
        discard_folder(old, marker)
    fsync_dir(dest.parent)


def discard_folder(folder: Path, marker: str) -> None:
    """Remove a temporary folder, its ``marker`` first, so a half-removed folder never looks complete."""
    try:
        (folder / marker).unlink(missing_ok=True)
    except OSError:
        pass
    shutil.rmtree(folder, ignore_errors=True)


def recover_folder(dest: Path, marker: str) -> None:
    """Tidy after writers of ``dest`` that were killed: put back a complete ``dest`` they had moved aside (if
    ``dest`` is missing) and remove their temporary folders. Failures are ignored: this is tidying."""
    for old in leftovers(dest, "replaced"):
        if not os.path.lexists(dest) and (old / marker).is_file():
            try:
                os.rename(old, dest)
                continue
            except OSError:
                pass
        discard_folder(old, marker)
    for partial in leftovers(dest, "export"):
        discard_folder(partial, marker)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from, says that the disk or a disk quota is full.

    DuckDB reports a failed write as its own exception type, with the system's message in the text.
    """
    texts = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(current, Exception) and any(text in str(current) for text in texts):
            return True
        current = current.__cause__ or current.__context__
    return False


def detail(exc: BaseException) -> str:
    """An error's message on one line, at most 300 characters (DuckDB's can be long JSON)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."
