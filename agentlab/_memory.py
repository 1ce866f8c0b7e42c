"""Giving freed memory back to the operating system after a large, short-lived burst of allocations.

Loading a million rows' tree, or building an index segment, allocates some hundreds of megabytes of temporary
numpy arrays. glibc's allocator keeps freed memory in its heap for reuse (its threshold for giving large blocks
their own mappings grows as they are freed), so without help a process keeps those megabytes resident for its
whole life. :func:`release_freed_memory` asks glibc to return them (``malloc_trim``), and pyarrow's pool to drop
what it caches; elsewhere, or if either is missing, it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

__all__ = ["release_freed_memory"]

_libc: Any = None


def release_freed_memory() -> None:
    """Return memory freed by the process to the operating system, where the platform allows it."""
    global _libc
    if sys.platform.startswith("linux"):
        if _libc is None:
            try:
                _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            except OSError:
                _libc = False
        trim = getattr(_libc, "malloc_trim", None) if _libc else None
        if trim is not None:
            trim(0)
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
