"""When a store cannot resume from its checkpoint and must be restored from scratch."""

from __future__ import annotations

from ostinato.schemas.topics import TOMBSTONE_RETENTION_MS
from ostinato.services.history.restore import _stale_reason
from ostinato.services.history.store import (
    CHECKPOINT_HISTORY,
    CHECKPOINT_STATE,
    CHECKPOINT_TIME,
    Family,
    MemoryStore,
    pack_int,
)

NOW = 1_800_000_000_000


def _store(state: int, history: int, written_ms: int) -> MemoryStore:
    store = MemoryStore()
    store.write({Family.META: {CHECKPOINT_STATE: pack_int(state), CHECKPOINT_HISTORY: pack_int(history),
                               CHECKPOINT_TIME: pack_int(written_ms)}})
    return store


def test_an_empty_store_simply_reads_from_the_start() -> None:
    assert _stale_reason(MemoryStore(), NOW) == ""


def test_a_recent_checkpoint_resumes() -> None:
    assert _stale_reason(_store(10, 20, NOW - TOMBSTONE_RETENTION_MS + 1000), NOW) == ""


def test_a_checkpoint_older_than_the_tombstone_retention_restores_from_scratch() -> None:
    """Compaction may have removed tombstones it never saw: deleted runs would live on in the store."""
    reason = _stale_reason(_store(10, 20, NOW - TOMBSTONE_RETENTION_MS - 1), NOW)
    assert "tombstone retention" in reason
