"""Maps the top-level folders into the one `ostinato.*` import namespace (DESIGN.md §2).

Metadata and dependencies live in pyproject.toml; only the package list is computed here, so a new
subpackage under any layer folder is picked up without editing a list.
"""

from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).parent
LAYERS = ("schemas", "kafka", "streams", "services", "sdk", "connectors", "infra")


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = ["ostinato"], {"ostinato": "src/ostinato"}
    # The public modules' own subpackages (ostinato.worker.workflow_sandbox, as Temporal's path).
    packages += [".".join(init.parent.relative_to(ROOT / "src").parts)
                 for init in sorted((ROOT / "src" / "ostinato").rglob("__init__.py")) if init.parent.name != "ostinato"]
    for layer in LAYERS:
        for init in sorted((ROOT / layer).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT)
            packages.append(".".join(("ostinato", *rel.parts)))
        # Folders of data files (schemas/avro, infra/templates) are packages to setuptools too: named here, so it
        # ships them without warning that they look like packages left out.
        for folder in sorted(p for p in (ROOT / layer).rglob("*") if p.is_dir() and p.name.isidentifier()):
            if not (folder / "__init__.py").exists() and folder.name != "__pycache__" and any(folder.iterdir()):
                packages.append(".".join(("ostinato", *folder.relative_to(ROOT).parts)))
        package_dir[f"ostinato.{layer}"] = layer
    return packages, package_dir


# The compiled Avro writers' C engine (schemas/native_writer.py). Optional: where it cannot be built (no C compiler),
# the install goes on and the generated Python writers do the same work, slower.
NATIVE = Extension("ostinato.schemas._avro_native", ["schemas/_avro_native.c"], optional=True,
                   extra_compile_args=["-O2"])

packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir, ext_modules=[NATIVE])
