"""Resolve a runtime classpath from Maven Central into the cache, once, atomically."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from ostinato.infra.defaults import MAVEN_DEPENDENCY_PLUGIN
from ostinato.infra.errors import InfraError
from ostinato.infra.process import require_executable

_COMPLETE = ".complete"


def fetch_classpath(pom: Path, target: Path, properties: Mapping[str, str], label: str) -> Path:
    """Copy the runtime dependencies of `pom` into `target` (a directory of jars) unless already there.

    The jars land in a temporary sibling and are renamed into place only when mvn succeeds, so an interrupted
    download never leaves a half-filled classpath that looks complete.
    """
    if (target / _COMPLETE).exists():
        return target
    mvn = require_executable("mvn", "Install Apache Maven (Debian: `apt-get install -y maven`).")
    require_executable("java", "Install a JDK 17+ (Debian: `apt-get install -y openjdk-17-jdk-headless`).")
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"Fetching {label} from Maven Central into {target} (first run only)...", file=sys.stderr, flush=True)
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    argv = [mvn, "-B", "-ntp", "-q", "-f", str(pom), f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
    argv += [f"-D{k}={v}" for k, v in properties.items()]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=target.parent, timeout=900)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        raise InfraError(
            f"downloading {label} with mvn took longer than 15 minutes; is Maven Central reachable?"
        ) from None
    if proc.returncode != 0 or not any(staging.glob("*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        output = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise InfraError(
            f"could not download {label} from Maven Central (mvn exited {proc.returncode}).\n{output}\n"
            "Check the network or proxy settings (~/.m2/settings.xml) and the version asked for."
        )
    jars = sorted(p.name for p in staging.glob("*.jar"))
    (staging / _COMPLETE).write_text("\n".join(jars) + "\n")
    if target.exists() and not (target / _COMPLETE).exists():  # a leftover of an old interrupted layout
        shutil.rmtree(target)
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / _COMPLETE).exists():
            raise
        # Another process finished the same download first; its copy is as good as ours.
    print(f"Fetched {len(jars)} jars in {time.monotonic() - started:.1f}s.", file=sys.stderr, flush=True)
    return target
