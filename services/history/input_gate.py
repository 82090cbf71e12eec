"""Timeouts judged against the log, not only the wall clock (issue 16).

A timeout is a verdict: "no completion came in time". On Kafka, a completion can be written in time and still be
unreadable: a read_committed consumer stops at the last stable offset, so one open transaction of a crashed or
frozen producer on the shard's commands partition hides every record after it (worker completions included)
until the coordinator aborts it. Firing timeouts meanwhile re-runs work that finished.

So per shard, when timeouts fall due, the gate notes the partition's high watermark (everything written so far,
stable or not; asked of the leader then, since the consumer's cached figure is as old as its last fetch) and holds
those timeouts until the consumer's position has passed it: everything written before they fell due has then been
read and processed, in this batch or earlier, before them. Without a stuck transaction that costs a ListOffsets
and one fetch (milliseconds); with one, the timeouts wait for the abort. The verdict written to
history is the same decision the core always makes; only the moment the shell asks for it moves, and the holds
are counted (`ostinato_timeouts_held_total`) and logged when long.
"""

from __future__ import annotations

from dataclasses import dataclass

from ostinato.services.history.changelog import fire_at_of, parse_timer_key
from ostinato.streams.deadlines import TIMEOUTS

UNKNOWN = -1  # no fetch response yet: the high watermark is not known


def is_timeout(key: bytes) -> bool:
    return parse_timer_key(key)[2].kind in TIMEOUTS


@dataclass
class InputGate:
    """One shard's gate; `judge` is called with the due deadlines of each batch."""

    target: int | None = None  # the high watermark to reach before the held timeouts fire
    since_ms: int = 0  # when the target was taken: timeouts due by then fire once it is reached
    held_since_ms: int | None = None  # when the current hold began (for the log line)

    def judge(self, due: list[bytes], now_ms: int, position: int, high_watermark: int) -> tuple[list[bytes], int]:
        """The deadlines that may fire now, in their order, and how many timeouts are held back."""
        timeouts = [k for k in due if is_timeout(k)]
        if not timeouts:
            return due, 0
        if self.target is None:
            if high_watermark == UNKNOWN:
                self._hold(now_ms)
                return [k for k in due if k not in set(timeouts)], len(timeouts)
            self.target, self.since_ms = high_watermark, now_ms
        if position < self.target:
            self._hold(now_ms)
            held = set(timeouts)
            return [k for k in due if k not in held], len(timeouts)
        # Everything written before `since_ms` has been read: timeouts due by then may fire; later ones wait for
        # the next round, with a new target.
        ready = {k for k in timeouts if fire_at_of(k) <= self.since_ms}
        self.target = None
        self.held_since_ms = None
        waiting = len(timeouts) - len(ready)
        return [k for k in due if k in ready or k not in set(timeouts)], waiting

    def held_for_ms(self, now_ms: int) -> int:
        return 0 if self.held_since_ms is None else now_ms - self.held_since_ms

    def _hold(self, now_ms: int) -> None:
        if self.held_since_ms is None:
            self.held_since_ms = now_ms
