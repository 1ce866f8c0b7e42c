"""A fingerprint of a DuckDB file's committed state, for caches kept in files beside it.

DuckDB makes a commit durable in the write-ahead log (``<file>.wal``) and folds the log into the file at a
checkpoint, which rewrites one of the file's two database headers with a larger iteration counter. The first
three 4 KiB blocks of the file (the main header, which carries a random identifier DuckDB gives every new file,
and the two database headers) therefore change with every checkpoint, and differ between any two files.

:func:`file_stamp` hashes those blocks, and is None while the log holds commits not yet checkpointed. Two equal
stamps of one path mean that no commit reached the file in between, whoever made it (this process, another
process, another program). A derived file stamped with it is current exactly when the stamps agree.
"""

from __future__ import annotations

import hashlib
import os

__all__ = ["FileStamper", "file_stamp"]

_HEADER_BYTES = 3 * 4096


def file_stamp(path: str, fd: int | None = None) -> str | None:
    """The fingerprint of ``path``'s checkpointed state, or None if it has commits only in its log (or is unreadable).

    Take it while holding the file (an open connection keeps other processes from writing it), through ``fd``, a
    descriptor of the file kept open as long as the connection: DuckDB locks the file with POSIX record locks,
    which a process loses as soon as it closes *any* descriptor of the file, so opening and closing the file
    again here would let another process in.
    """
    try:
        wal = os.path.getsize(path + ".wal")
    except OSError:
        wal = 0
    if wal:
        return None
    try:
        if fd is not None:
            header = os.pread(fd, _HEADER_BYTES, 0)
        else:
            with open(path, "rb") as handle:
                header = handle.read(_HEADER_BYTES)
    except OSError:
        return None
    if len(header) < _HEADER_BYTES:
        return None
    return hashlib.sha256(header).hexdigest()


class FileStamper:
    """:func:`file_stamp` of one file through a descriptor opened now and kept until :meth:`close`.

    Open it before DuckDB locks the file and close it after DuckDB let go (see :func:`file_stamp` for why). A file
    that cannot be opened gives no stamp (None), which only makes derived files check themselves against it.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path or ""
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY) if path else None
        except OSError:
            self._fd = None

    def stamp(self) -> str | None:
        return None if self._fd is None else file_stamp(self.path, self._fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
