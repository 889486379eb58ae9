"""Limits every network read obeys, hub and registry alike: connect and read timeouts, a
minimum rate over a window (a peer that drips bytes never hangs a command), and an overall
deadline for documents that should arrive in one piece (manifests, indexes, listings).

``<PREFIX>_CONNECT_TIMEOUT``, ``_READ_TIMEOUT``, ``_MIN_RATE``, ``_RATE_WINDOW`` and
``_DEADLINE`` environment variables override the defaults (``SPECBUNDLE_HUB``,
``SPECBUNDLE_OCI``).
"""

from __future__ import annotations

import os
import time

from specbundle.errors import SourceUnavailable, UsageError

__all__ = ["NetLimits", "RateWatch"]


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        raise UsageError(f"${name} must be a number of seconds or bytes") from None
    return value if value > 0 else default


class NetLimits:
    """Timeouts, rate floor and document deadline, read from the environment now."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        #: connect timeout and longest wait for any byte
        self.connect = _env_float(f"{prefix}_CONNECT_TIMEOUT", 15.0)
        self.read = _env_float(f"{prefix}_READ_TIMEOUT", 60.0)
        #: a transfer averaging under ``min_rate`` bytes/s over ``window`` seconds is abandoned
        self.min_rate = _env_float(f"{prefix}_MIN_RATE", 16 * 1024.0)
        self.window = _env_float(f"{prefix}_RATE_WINDOW", 30.0)
        #: the most a small document (manifest, index, listing, token) may take in all
        self.deadline = _env_float(f"{prefix}_DEADLINE", 120.0)


class RateWatch:
    """Counts the bytes of one transfer; :meth:`add` raises once it runs under the floor
    over a window, or past ``deadline`` seconds in all (when given)."""

    def __init__(self, limits: NetLimits, what: str, *, deadline: float | None = None,
                 hint: str = "rerun to resume") -> None:
        self._t, self._what, self._hint = limits, what, hint
        self._start = self._since = time.monotonic()
        self._got = 0
        self._deadline = deadline

    def add(self, n: int) -> None:
        """Account ``n`` more bytes (call after every network read)."""
        self._got += n
        now = time.monotonic()
        if self._deadline is not None and now - self._start > self._deadline:
            raise SourceUnavailable(
                f"{self._what} abandoned: not complete after {now - self._start:.0f} s",
                hint=f"{self._hint} ({self._t.prefix}_DEADLINE sets the limit)")
        if now - self._since >= self._t.window:
            if self._got / (now - self._since) < self._t.min_rate:
                raise SourceUnavailable(
                    f"{self._what} abandoned: {self._got} bytes in {now - self._since:.0f} s, "
                    f"under {self._t.min_rate:.0f} B/s",
                    hint=f"{self._hint} ({self._t.prefix}_MIN_RATE sets the floor)")
            self._since, self._got = now, 0
