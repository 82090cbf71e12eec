"""The SDK's modules import one another without cycles (issue 14): for no two modules of `ostinato.sdk` does a
chain of imports lead from each to the other, imports inside functions and under `TYPE_CHECKING` included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# grimp scans a package's folder, but the layers map into `ostinato.*` only through the installed finder, and the
# test process has imported `ostinato` already: so the graph is built in a child process over a copy of `sdk/`
# placed as `ostinato/sdk`. The layers below the SDK never import it back (import-linter guards that), so every
# cycle through an SDK module lies inside `sdk/`.
GRAPH = """
import itertools, json, grimp
graph = grimp.build_graph("ostinato")
modules = sorted(m for m in graph.modules if m.startswith("ostinato.sdk"))
cycles = [[graph.find_shortest_chain(importer=a, imported=b), graph.find_shortest_chain(importer=b, imported=a)]
          for a, b in itertools.combinations(modules, 2) if graph.chain_exists(a, b) and graph.chain_exists(b, a)]
print(json.dumps({"modules": modules, "cycles": cycles}))
"""


def _sdk_graph(root: Path) -> dict[str, list[list[list[str]]]]:
    package = root / "ostinato"
    shutil.copytree(REPO / "sdk", package / "sdk", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run([sys.executable, "-c", GRAPH], cwd=root, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    found: dict[str, list[list[list[str]]]] = json.loads(result.stdout)
    return found


def test_sdk_modules_import_one_another_without_cycles(tmp_path: Path) -> None:
    graph = _sdk_graph(tmp_path)
    assert "ostinato.sdk.client" in graph["modules"] and "ostinato.sdk.worker" in graph["modules"]
    cycles = [" -> ".join(there) + "  and back  " + " -> ".join(back) for there, back in graph["cycles"]]
    assert not cycles, "import cycles among the SDK's modules:\n" + "\n".join(cycles)
