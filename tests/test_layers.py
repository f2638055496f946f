"""kayak's packages import only downward: the layers README's Layout section describes.

Each top-level package may import only the packages listed for it here (and itself); a new
arrow upward (the broker importing the console, the client importing the broker) fails this
test, which names the file and the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

KAYAK = Path(__file__).resolve().parent.parent / "kayak"

# The packages each may import, lowest layer first.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "protocol": {"errors"},
    "serde": {"errors"},
    "client": {"errors", "protocol"},
    "registry": {"errors", "client"},
    "broker": {"errors", "protocol", "registry"},
    "cdc": {"errors", "client", "serde"},
    "spark": {"errors", "client", "serde"},
    "pipeline": {"errors", "client", "serde", "cdc", "spark"},
    "console": {"errors", "protocol", "client", "serde", "broker", "pipeline"},
    "cli": {
        "errors",
        "protocol",
        "client",
        "serde",
        "broker",
        "registry",
        "cdc",
        "pipeline",
        "console",
    },
    "__main__": {"cli"},
    "__init__": set(),
}


def _kayak_imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("kayak.")]
    return found


def test_no_package_imports_upward() -> None:
    upward = []
    for path in sorted(KAYAK.rglob("*.py")):
        package = path.relative_to(KAYAK).parts[0].removesuffix(".py")
        allowed = MAY_IMPORT[package] | {package}
        for line, imported in _kayak_imports(path):
            if imported not in allowed:
                upward.append(f"{path.relative_to(KAYAK.parent)}:{line} imports kayak.{imported}")
    assert not upward, "\n".join(upward)


def test_the_shared_registry_core_does_not_import_the_client() -> None:
    # The broker serves kayak.registry's core, and the broker never loads the client: only
    # the standalone registry (kayak/registry/cluster/, not its __init__) may import it.
    registry = KAYAK / "registry"
    offending = [
        f"{path.relative_to(KAYAK.parent)}:{line} imports kayak.client"
        for path in sorted(registry.rglob("*.py"))
        if path.parent != registry / "cluster" or path.name == "__init__.py"
        for line, imported in _kayak_imports(path)
        if imported == "client"
    ]
    assert not offending, "\n".join(offending)
