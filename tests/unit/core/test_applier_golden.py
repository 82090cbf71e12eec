"""Shipped appliers are frozen: old histories must replay forever through exactly the code that wrote them.

Each (event type, version) has a hash of its source and of every helper it calls, in
`tests/unit/data/applier_hashes.json`. Changing what an event does means registering version n+1 (new events use
it); the old version stays byte for byte. `OSTINATO_ADD_APPLIER_HASHES=1` records hashes of new versions only.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import types
from pathlib import Path

from ostinato.streams.appliers import APPLIERS

GOLDEN = Path(__file__).parents[1] / "data" / "applier_hashes.json"


def _closure_source(fn: types.FunctionType, seen: set[str] | None = None) -> str:
    """The source of `fn` and, recursively, of the core functions and tables it refers to by name."""
    seen = set() if seen is None else seen
    parts = [inspect.getsource(fn)]
    modules = [v for v in fn.__globals__.values()
               if isinstance(v, types.ModuleType) and v.__name__.startswith("ostinato.streams")]
    for name in fn.__code__.co_names:
        target = fn.__globals__.get(name)
        if target is None:  # an attribute of a core module, e.g. ev.CLOSE_STATUS: tables are behaviour too
            for module in modules:
                table = getattr(module, name, None)
                if isinstance(table, dict) and name not in seen:
                    seen.add(name)
                    parts.append(f"{name} = {sorted(table.items())!r}")
        module = getattr(target, "__module__", "") or ""
        if isinstance(target, types.FunctionType) and module.startswith("ostinato.streams") and name not in seen:
            seen.add(name)
            parts.append(_closure_source(target, seen))
        elif hasattr(target, "moves") and name not in seen:  # a lifecycle table: its moves are behaviour too
            seen.add(name)
            parts.append(repr(sorted((k, sorted(v)) for k, v in target.moves.items())))
    return "\n".join(parts)


def current_hashes() -> dict[str, str]:
    return {f"{event_type}/v{version}": hashlib.sha256(_closure_source(fn).encode()).hexdigest()
            for (event_type, version), fn in sorted(APPLIERS.items())}


def test_shipped_appliers_are_unchanged() -> None:
    golden: dict[str, str] = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    current = current_hashes()
    new = {k: v for k, v in current.items() if k not in golden}
    if new and os.environ.get("OSTINATO_ADD_APPLIER_HASHES") == "1":
        GOLDEN.write_text(json.dumps({**golden, **new}, indent=1, sort_keys=True) + "\n")
        golden, new = {**golden, **new}, {}
    changed = sorted(k for k in golden if k in current and current[k] != golden[k])
    assert not changed, (
        f"shipped appliers changed: {changed}. Old histories replay through them; register a new version "
        "(@applier(type, version=n+1)) instead of editing version n."
    )
    removed = sorted(k for k in golden if k not in current)
    assert not removed, f"shipped appliers removed: {removed}; they must stay registered for old histories"
    assert not new, (f"appliers without a recorded hash: {sorted(new)}; once final, record them with "
                     "OSTINATO_ADD_APPLIER_HASHES=1")


def test_the_hash_covers_helpers_too() -> None:
    """Editing a shared helper (here `_close`) must show up in the hash of every applier that calls it."""
    from ostinato.streams.appliers import execution

    source = _closure_source(execution.completed)
    assert "def _close" in source  # the helper's code
    assert "'CONTINUED_AS_NEW'" in source  # the run lifecycle table and the close-status table
