"""`ostinato replay` over archive files: the command an operator runs before deploying new workflow code."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ostinato.connectors.archive import ArchivedRun, write_container
from tests.conftest import run_cli
from tests.unit.test_archive_container import run  # noqa: F401 - the fixture: a real run's history


def test_replay_reads_archives_from_a_directory(run: ArchivedRun, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "a.avro").write_bytes(write_container(run))
    (tmp_path / "b.avro").write_bytes(write_container(run))
    done = run_cli("replay", "tests.unit.test_archive_container:Mixed", str(tmp_path), "-o", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["replayed"] == 2
    (tmp_path / "c.avro").write_bytes(b"junk")
    bad = run_cli("replay", "tests.unit.test_archive_container:Mixed", str(tmp_path / "c.avro"),
                  env={**os.environ, "COLUMNS": "400"})  # the error box must not wrap the message
    assert bad.returncode == 2 and "not an Ostinato history archive" in bad.stderr
