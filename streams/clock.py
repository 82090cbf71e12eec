"""The fake clock of the in-memory engine: time moves only when a test (or the SDK's time skipping) moves it."""

from __future__ import annotations

DEFAULT_START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z: a realistic epoch, so times print like real ones


class FakeClock:
    """Epoch milliseconds that never move by themselves.

    The core reads time only from the `now_ms` it is given; the engine gives it this clock's reading, so a
    test controls every timestamp in history and every deadline. Time never goes backwards: deadlines already
    fired must stay in the past.
    """

    def __init__(self, now_ms: int = DEFAULT_START_MS) -> None:
        self._now_ms = now_ms

    @property
    def now_ms(self) -> int:
        return self._now_ms

    def jump(self, ms: int) -> int:
        """Move forward by `ms` milliseconds and return the new time.

        Raises:
            ValueError: if `ms` is negative.
        """
        if ms < 0:
            raise ValueError(f"time only moves forward: cannot jump by {ms} ms")
        self._now_ms += ms
        return self._now_ms

    def set(self, ms: int) -> int:
        """Move to epoch millisecond `ms` (now or later) and return it.

        Raises:
            ValueError: if `ms` is before the current time.
        """
        if ms < self._now_ms:
            raise ValueError(f"time only moves forward: cannot go from {self._now_ms} back to {ms}")
        self._now_ms = ms
        return ms

    def __repr__(self) -> str:
        return f"FakeClock(now_ms={self._now_ms})"
