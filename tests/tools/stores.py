"""Read shard stores a stopped server left on disk, and compare them with the history topic's fold."""

from __future__ import annotations

from pathlib import Path

from ostinato.schemas.keys import split_key
from ostinato.services.admin.checker import CheckReport, fold_runs
from ostinato.services.history.store import Family, RocksStore
from ostinato.streams.model import decode_run, durable_bytes

RunId = tuple[str, str, str]


def dump_store(path: Path) -> dict[Family, dict[bytes, bytes]]:
    """Every family of a shard store (the server must be stopped: RocksDB allows one open per directory)."""
    store = RocksStore(path)
    try:
        return {f: dict(store.scan(f)) for f in Family}
    finally:
        store.close()


def shard_dirs(data_dir: Path, prefix: str) -> list[Path]:
    return sorted((data_dir / prefix).glob("shard-*"))


def durable_states(data_dirs: list[Path], prefix: str) -> dict[RunId, bytes]:
    """Durable state bytes per run across the stores of several servers; a shard found in several data dirs (it
    moved) is taken from the store whose checkpoint is furthest along."""
    best: dict[str, dict[Family, dict[bytes, bytes]]] = {}
    for data_dir in data_dirs:
        for path in shard_dirs(data_dir, prefix):
            dump = dump_store(path)
            if path.name not in best or _progress(dump) > _progress(best[path.name]):
                best[path.name] = dump
    states: dict[RunId, bytes] = {}
    for dump in best.values():
        for key, value in dump[Family.STATE].items():
            parts = split_key(key.decode())
            if len(parts) == 3:
                states[(parts[0], parts[1], parts[2])] = durable_bytes(decode_run(value))
    return states


def _progress(dump: dict[Family, dict[bytes, bytes]]) -> tuple[int, int]:
    meta = dump[Family.META]
    return (int.from_bytes(meta.get(b"offset/state", b"\0" * 8), "big"),
            int.from_bytes(meta.get(b"offset/history", b"\0" * 8), "big"))


def mismatches(report: CheckReport, states: dict[RunId, bytes]) -> list[str]:
    """Runs whose stored durable state differs from the fold of their history (or that only one side has)."""
    folded = fold_runs(report.histories)
    out = [f"{'/'.join(run)}: in history, not in any store" for run in folded.keys() - states.keys()]
    out += [f"{'/'.join(run)}: in a store, not in history" for run in states.keys() - folded.keys()]
    out += [f"{'/'.join(run)}: store state differs from the fold of its history"
            for run in folded.keys() & states.keys() if folded[run] != states[run]]
    return sorted(out)
