"""Record every schema version ever shipped, so records written by any of them stay readable forever.

`schemas/avro/released.json` maps a fingerprint to the canonical form it was computed from. The registry loads
every entry as a writer schema; a test fails when a shipped schema is missing from the file (run
`python -m ostinato.schemas.release` once the change is known to be Avro-compatible) and when any released
version no longer resolves to today's reader. Entries are only ever added.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

RELEASED_FILE = "released.json"


def released() -> dict[str, dict[str, str]]:
    """Fingerprint (hex) -> {"name", "canonical"} of every released schema version."""
    text = (resources.files("ostinato.schemas") / "avro" / RELEASED_FILE).read_text()
    entries: dict[str, dict[str, str]] = json.loads(text)
    return entries


def main(argv: list[str] | None = None) -> int:
    """Add the current schemas to released.json in the source tree (never removes an entry)."""
    from ostinato.schemas.codec import SchemaRegistry

    target = Path(__file__).resolve().parent / "avro" / RELEASED_FILE
    entries = json.loads(target.read_text()) if target.exists() else {}
    added = []
    for info in SchemaRegistry(load_released=False).schemas:
        key = info.fingerprint.hex()
        if key not in entries:
            entries[key] = {"name": info.name, "canonical": info.canonical}
            added.append(info.name)
    target.write_text(json.dumps(dict(sorted(entries.items())), indent=1, sort_keys=True) + "\n")
    print(f"{len(added)} new schema version(s) recorded in {target}", file=sys.stderr)
    for name in sorted(added)[:20]:
        print(f"  {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
