"""Imports point down the layers only (lakewarden/LAYERS.md): every module of lakewarden/,
services/, cli/ and migrations/ is read with `ast` (nothing is imported), and each import of
ours must stay in the importer's layer or go below it; the services never import each
other. The layer list is read from LAYERS.md itself, so the note and the check agree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTE = ROOT / "lakewarden" / "LAYERS.md"
PACKAGES = ("lakewarden", "services", "cli", "migrations")
OURS = (*PACKAGES, "benchmarks")
SERVICES = "services"


def read_layers(note: str) -> dict[str, int]:
    """Module prefix -> layer number (1 = bottom), from the note's numbered list."""
    layers: dict[str, int] = {}
    for line in note.splitlines():
        m = re.match(r"(\d+)\. (.*?) — ", line)
        if not m:
            continue
        for name in re.findall(r"`([^`]+)`", m.group(2)):
            name = name.rstrip("/").replace("/", ".")
            layers[name if name.startswith(PACKAGES) else f"lakewarden.{name}"] = int(m.group(1))
    return layers


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_modules(root: Path) -> dict[str, str]:
    """Module name -> source, for every module of our packages."""
    return {
        module_name(p, root): p.read_text()
        for package in PACKAGES
        for p in sorted((root / package).rglob("*.py"))
    }


def imports_of(name: str, source: str, known: set[str], is_package: bool) -> set[str]:
    """The modules of ours that `name` imports, anywhere in it (functions and TYPE_CHECKING
    blocks too): `from a import b` counts as `a.b` when that is a module."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in out if m.split(".")[0] in OURS}


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    if module == "lakewarden":
        return 1  # the package itself: its docstring and version
    if module == SERVICES:
        return layers["services.api"]
    prefixes = [p for p in layers if module == p or module.startswith(p + ".")]
    return layers[max(prefixes, key=len)] if prefixes else None


def service_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == SERVICES and len(parts) > 1 else None


def violations(modules: dict[str, str], layers: dict[str, int], packages: set[str]) -> list[str]:
    known = set(modules)
    out = []
    for name, source in sorted(modules.items()):
        mine = layer_of(name, layers)
        if mine is None:
            out.append(f"{name} is in no layer: place it in lakewarden/LAYERS.md")
            continue
        for target in sorted(imports_of(name, source, known, name in packages)):
            theirs = layer_of(target, layers)
            if theirs is None:
                continue  # reported as a module of its own
            if theirs > mine:
                out.append(f"{name} (layer {mine}) imports {target} (layer {theirs}, above it)")
            elif service_of(name) and service_of(target) and service_of(name) != service_of(target):
                out.append(f"{name} imports another service: {target}")
    return out


def _tree() -> tuple[dict[str, str], dict[str, int], set[str]]:
    modules = read_modules(ROOT)
    packages = {
        module_name(p, ROOT) for package in PACKAGES for p in (ROOT / package).rglob("__init__.py")
    }
    return modules, read_layers(NOTE.read_text()), packages


def test_every_import_points_down_the_layers() -> None:
    assert violations(*_tree()) == []


def test_the_note_names_only_modules_that_exist() -> None:
    modules, layers, _ = _tree()
    assert len(set(layers.values())) >= 9
    missing = [p for p in layers if not any(m == p or m.startswith(p + ".") for m in modules)]
    assert missing == []


def test_the_core_imports_neither_the_services_nor_the_cli() -> None:
    """lakewarden/ is the shared core: no module of it, at any layer, imports a process
    (services/) or the command line that starts them (cli/)."""
    modules, _, packages = _tree()
    known = set(modules)
    upward = [
        f"{name} imports {target}"
        for name, source in sorted(modules.items())
        if name.split(".")[0] == "lakewarden"
        for target in imports_of(name, source, known, name in packages)
        if target.split(".")[0] in (SERVICES, "cli")
    ]
    assert upward == []


def test_every_import_of_ours_names_a_module_that_exists() -> None:
    """mypy runs with ignore_missing_imports (for third-party packages), so it takes an
    import of a moved or renamed module of ours as Any: this finds them, in the packages
    and in benchmarks/, tests/ and scripts/ too."""
    modules, _, _ = _tree()
    known = (
        set(modules)
        | {"lakewarden", SERVICES}
        | {module_name(p, ROOT) for p in (ROOT / "benchmarks").rglob("*.py")}
    )
    sources = {
        str(p.relative_to(ROOT)): p.read_text()
        for folder in (*PACKAGES, "benchmarks", "tests", "scripts")
        for p in sorted((ROOT / folder).rglob("*.py"))
    }
    dangling = [
        f"{path} imports {target}"
        for path, source in sources.items()
        for target in imports_of(path, source, known, False)
        if target not in known
    ]
    assert dangling == []


def test_the_check_catches_upward_and_sideways_imports() -> None:
    modules, layers, packages = _tree()
    bad = {
        **modules,
        "lakewarden.spark.sql": "from lakewarden.kinds.base import Kind\n",
        "lakewarden.db.models": "def f():\n    from lakewarden import runtime\n",
        "lakewarden.policy.model": "from services.api.schemas import TableOut\n",
        "services.worker.main": "import services.scheduler.reaper\n",
        "lakewarden.tables": "import cli.main\n",
        "lakewarden.newthing": "",
    }
    found = "\n".join(violations(bad, layers, packages))
    assert "lakewarden.spark.sql (layer 5) imports lakewarden.kinds.base (layer 6" in found
    assert "lakewarden.db.models (layer 2) imports lakewarden.runtime (layer 4" in found
    assert "lakewarden.policy.model (layer 3) imports services.api.schemas (layer 8" in found
    assert "services.worker.main imports another service: services.scheduler.reaper" in found
    assert "lakewarden.tables (layer 4) imports cli.main (layer 9" in found
    assert "lakewarden.newthing is in no layer" in found


def test_lock_names_come_from_the_enum() -> None:
    """Every lease and advisory-lock name is a member of lakewarden.db.locks.DBLocks."""
    modules, _, _ = _tree()
    raw = [
        name
        for name, source in modules.items()
        if name != "lakewarden.db.locks"
        and re.search(r"pg_advisory|hashtext|leader_lease\s+WHERE\s+name\s*=\s*'", source)
    ]
    assert raw == []
