"""A history processor whose commits are held back on demand, to open the windows a loaded broker opens.

Held before the commit, a transaction's round trip is slow (`test_pipelined_commits.py`: what S4 measured under
load). Held after it, the transaction is already on the broker, readable by every read_committed consumer, while
the processor has not heard so yet (`test_read_your_writes.py`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from confluent_kafka import Producer

from ostinato.services.history.processor import Processor


class HeldCommits:
    """The processor's transactional producer, each commit held `seconds` while `hold` is set: before the commit,
    or with `after` once it is done."""

    def __init__(self, inner: Producer, hold: threading.Event, seconds: float, after: bool) -> None:
        self._inner, self._hold, self._seconds, self._after = inner, hold, seconds, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit_transaction(self, *args: Any) -> None:
        held = self._hold.is_set()
        if held and not self._after:
            time.sleep(self._seconds)
        self._inner.commit_transaction(*args)
        if held and self._after:
            time.sleep(self._seconds)


class HeldCommitProcessor(Processor):
    """A `Processor` whose producers are `HeldCommits`; `hold` is clear at first."""

    def __init__(self, *args: Any, hold_s: float, after: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = threading.Event()
        self._hold_s, self._after = hold_s, after

    def _new_producer(self) -> Producer:
        return cast(Producer, HeldCommits(super()._new_producer(), self.hold, self._hold_s, self._after))
