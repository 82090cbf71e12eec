"""What a person sees when the machine is not ready: one clear line and exit code 1, never a stack trace."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from ostinato.infra.process import free_ports
from tests.conftest import run_cli


def _env(tmp_path: Path, path: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "OSTINATO_KAFKA")}
    return {**env, "PATH": path, "OSTINATO_HOME": str(tmp_path / "home"), **extra}


def _assert_clear_failure(result: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for phrase in phrases:
        assert phrase in result.stderr


def test_missing_java(tmp_path: Path) -> None:
    no_java = tmp_path / "bin"
    no_java.mkdir()
    (port,) = free_ports(1)
    result = run_cli("infra", "kafka", "start", "--home", str(tmp_path / "k"), "--port", str(port),
                     env=_env(tmp_path, str(no_java)))
    _assert_clear_failure(result, "`java` was not found", "apt-get install")


def test_missing_mvn_with_an_empty_cache(tmp_path: Path) -> None:
    only_java = tmp_path / "bin"
    only_java.mkdir()
    java = shutil.which("java")
    assert java, "java is needed for this test"
    (only_java / "java").symlink_to(java)
    (port,) = free_ports(1)
    result = run_cli("infra", "kafka", "start", "--home", str(tmp_path / "k"), "--port", str(port),
                     env=_env(tmp_path, str(only_java), OSTINATO_CACHE_DIR=str(tmp_path / "cache")))
    _assert_clear_failure(result, "`mvn` was not found", "maven")


def test_failed_download(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    result = run_cli("infra", "kafka", "start", "--home", str(tmp_path / "k"), "--port", str(port),
                     env=_env(tmp_path, os.environ["PATH"], OSTINATO_CACHE_DIR=str(tmp_path / "cache"),
                              OSTINATO_KAFKA_VERSION="0.0.0-no-such-release"))
    _assert_clear_failure(result, "could not download Apache Kafka 0.0.0-no-such-release from Maven Central")
    assert not any((tmp_path / "cache").rglob("*.jar"))  # nothing half-downloaded is left to look complete


def test_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("infra", "kafka", "start", "--home", str(tmp_path / "k"), "--port", str(port),
                         env=_env(tmp_path, os.environ["PATH"]))
    _assert_clear_failure(result, f"port {port} on 127.0.0.1 is already in use")


def test_unreachable_kafka(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    result = run_cli("cluster", "status", "--kafka", f"127.0.0.1:{port}", "--timeout", "3",
                     env=_env(tmp_path, os.environ["PATH"]))
    _assert_clear_failure(result, f"cannot reach Kafka at 127.0.0.1:{port} within 3s")


def test_invalid_json_input_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    (port,) = free_ports(1)  # nothing listens there: a refusal that tried to send would say "cannot reach"
    env = _env(tmp_path, os.environ["PATH"], COLUMNS="200")
    for args in (("start", "T", "--id", "wf", "-q", "q", "-i", "{bad"), ("signal", "wf", "go", "--input", "[1,"),
                 ("query", "wf", "state", "--arg", '"open')):
        result = run_cli("workflow", *args, "--server", f"http://127.0.0.1:{port}", env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "looks like JSON but is not valid JSON" in result.stderr and "Traceback" not in result.stderr
        assert "cannot reach" not in result.stderr
