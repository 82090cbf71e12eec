"""The layering contract of DESIGN.md §2 is enforced: a forbidden import makes `.ci/check-layers` fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CHECK = REPO / ".ci" / "check-layers"


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache")
    shutil.copytree(REPO, copy, dirs_exist_ok=True, ignore=ignore)
    return copy


def _check(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VENV": sys.prefix}  # the environment running these tests has import-linter
    return subprocess.run([str(CHECK), str(src)], capture_output=True, text=True, timeout=300, env=env)


def test_the_repository_keeps_its_layers() -> None:
    result = _check(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("layer", "line", "forbidden"), [
    ("streams", "import confluent_kafka", "ostinato.streams is not allowed to import confluent_kafka"),
    ("streams", "import time", "ostinato.streams is not allowed to import time"),
    ("streams", "from ostinato.services import cluster", "ostinato.streams is not allowed to import ostinato.services"),
    ("sdk", "from ostinato.services import cluster", "ostinato.sdk is not allowed to import ostinato.services"),
    ("schemas", "import rocksdict", "ostinato.schemas is not allowed to import rocksdict"),
    ("kafka", "from ostinato.services.admin import cluster",
     "ostinato.kafka is not allowed to import ostinato.services"),
    ("services/history", "from ostinato.services.frontend import http",
     "ostinato.services.history is not allowed to import ostinato.services.frontend"),
    ("services/frontend", "from ostinato.services.history import shard",
     "ostinato.services.frontend.zz_violation -> ostinato.services.history.shard"),
])
def test_a_forbidden_import_breaks_the_build(source_copy: Path, layer: str, line: str, forbidden: str) -> None:
    bad = source_copy / layer / "zz_violation.py"
    bad.write_text(f"{line}  # noqa\n")
    try:
        result = _check(source_copy)
    finally:
        bad.unlink()
    assert result.returncode != 0
    assert forbidden in result.stdout
