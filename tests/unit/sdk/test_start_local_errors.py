"""`WorkflowEnvironment.start_local()` says what is missing when it cannot run a broker, before starting anything."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ostinato.testing import WorkflowEnvironment


def test_start_local_without_java_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OSTINATO_KAFKA", raising=False)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(RuntimeError, match=r"needs Java 17\+.*start_time_skipping\(\) needs neither"):
        asyncio.run(WorkflowEnvironment.start_local())

