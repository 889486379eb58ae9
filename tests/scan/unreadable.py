"""A file or folder the scan really cannot read, whoever runs the tests.

Mode 000 binds an ordinary user; root (CI containers) passes it through two capabilities,
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, which are dropped from the calling thread's effective
set for the block (capabilities are per thread; the scan runs in it) and restored after.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

_CAPS_V3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
_DAC = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _caps(call: str, head: _Header, data: ctypes.Array[_Data]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, call)(ctypes.byref(head), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{call}: {os.strerror(err)}")


@contextlib.contextmanager
def unreadable(path: Path) -> Iterator[None]:
    """``path`` at mode 000, its permission bits binding this thread, for the block."""
    mode = path.stat().st_mode & 0o7777
    head, data = _Header(_CAPS_V3, 0), (_Data * 2)()
    _caps("capget", head, data)
    saved = data[0].effective
    path.chmod(0)
    try:
        data[0].effective = saved & ~_DAC
        _caps("capset", head, data)
        with contextlib.suppress(PermissionError):
            os.close(os.open(path, os.O_RDONLY))
            raise AssertionError(f"{path} is still readable at mode 000")
        yield
    finally:
        data[0].effective = saved
        _caps("capset", head, data)
        path.chmod(mode)
