"""Maps the top-level folders into the one `ostinato.*` import namespace (DESIGN.md §2).

Metadata and dependencies live in pyproject.toml; only the package list is computed here, so a new
subpackage under any layer folder is picked up without editing a list.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
LAYERS = ("schemas", "streams", "services", "sdk", "connectors", "infra")


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = ["ostinato"], {"ostinato": "src/ostinato"}
    for layer in LAYERS:
        for init in sorted((ROOT / layer).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT)
            packages.append(".".join(("ostinato", *rel.parts)))
        package_dir[f"ostinato.{layer}"] = layer
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
