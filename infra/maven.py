"""Resolve a runtime classpath from Maven Central into the cache, once, atomically."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ostinato.infra.defaults import MAVEN_DEPENDENCY_PLUGIN
from ostinato.infra.errors import InfraError
from ostinato.infra.process import require_executable

_COMPLETE = ".complete"


def fetch_classpath(pom: Path, target: Path, properties: Mapping[str, str], label: str) -> Path:
    """Copy the runtime dependencies of `pom` into `target` (a directory of jars) unless already there."""
    if (target / _COMPLETE).exists():
        return target
    require_executable("java", "Install a JDK 17+ (Debian: `apt-get install -y openjdk-17-jdk-headless`).")
    args = ["-f", str(pom), f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime"]
    args += [f"-D{k}={v}" for k, v in properties.items()]
    _download(args, target, label, lambda staged: sorted(p.name for p in staged.glob("*.jar")))
    return target


def fetch_artifact(coordinates: str, target: Path, label: str) -> Path:
    """Copy one artifact (`group:artifact:version[:type[:classifier]]`) into directory `target` unless already
    there; returns the file."""
    if not (target / _COMPLETE).exists():
        args = [f"{MAVEN_DEPENDENCY_PLUGIN}:copy", f"-Dartifact={coordinates}"]
        _download(args, target, f"{label} ({coordinates})", _single_file)
    return target / (target / _COMPLETE).read_text().splitlines()[0]


def _single_file(staged: Path) -> list[str]:
    names = [p.name for p in staged.iterdir()]
    return names if len(names) == 1 else []


def _download(args: list[str], target: Path, label: str, files: Callable[[Path], list[str]]) -> None:
    """Run mvn with `args` into a temporary sibling of `target` and rename it into place only when mvn
    succeeded and `files(staging)` names what it fetched, so an interrupted download never looks complete."""
    mvn = require_executable("mvn", "Install Apache Maven (Debian: `apt-get install -y maven`).")
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"Fetching {label} from Maven Central into {target} (first run only)...", file=sys.stderr, flush=True)
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    argv = [mvn, "-B", "-ntp", "-q", *args, f"-DoutputDirectory={staging}"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=target.parent, timeout=900)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        raise InfraError(
            f"downloading {label} with mvn took longer than 15 minutes; is Maven Central reachable?"
        ) from None
    fetched = files(staging) if proc.returncode == 0 else []
    if not fetched:
        shutil.rmtree(staging, ignore_errors=True)
        output = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise InfraError(
            f"could not download {label} from Maven Central (mvn exited {proc.returncode}).\n{output}\n"
            "Check the network or proxy settings (~/.m2/settings.xml) and the version asked for."
        )
    (staging / _COMPLETE).write_text("\n".join(fetched) + "\n")
    if target.exists() and not (target / _COMPLETE).exists():  # a leftover of an old interrupted layout
        shutil.rmtree(target)
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / _COMPLETE).exists():
            raise
        # Another process finished the same download first; its copy is as good as ours.
    print(f"Fetched {len(fetched)} file(s) in {time.monotonic() - started:.1f}s.", file=sys.stderr, flush=True)
