"""Every package map is true: the docstring of each package's ``__init__.py`` (wmrl/ and every
package under it, callbacks/, strategies/) names each of its modules as ``name.py`` and each
subpackage as ``name/``, in double backticks, and names no module that is not there (a
``name/`` may also be a data folder, or a folder of a layout it describes: ``action/`` of a
world model). A path with a ``/`` before the name (``envs/wan_env.py``, ``scripts/fit.py``)
points elsewhere and must exist, read from the package's folder or from the repository's
root."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"``([\w./-]+?(?:\.py|/))``")


def packages() -> list[Path]:
    found = [p.parent for p in sorted((ROOT / "wmrl").rglob("__init__.py"))]
    return found + [ROOT / "callbacks", ROOT / "strategies"]


def package_map(package: Path) -> tuple[set[str], set[str]]:
    """(names in the map, names on disk): ``x.py`` for modules, ``x/`` for subpackages, and
    every path-qualified name that does not exist (as ``missing: <path>``). A named folder that
    is not a subpackage is dropped (data, or a layout's: not a claim; build outputs such as
    ``*.egg-info/`` may sit beside the modules)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    named, missing = set(), set()
    for name in NAMED.findall(doc):
        if "/" in name.rstrip("/"):
            if not any((base / name).exists() for base in (package, ROOT)):
                missing.add(f"missing: {name}")
        elif not name.endswith("/") or (package / name / "__init__.py").exists():
            named.add(name)
    on_disk = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    on_disk |= {f"{p.parent.name}/" for p in package.glob("*/__init__.py")}
    return named | missing, on_disk


def test_every_package_map_names_its_files_and_only_them():
    wrong = {}
    for package in packages():
        named, on_disk = package_map(package)
        if named != on_disk:
            wrong[str(package.relative_to(ROOT))] = {"not named": sorted(on_disk - named),
                                                     "not there": sorted(named - on_disk)}
    assert wrong == {}


def test_a_map_is_read_as_written(tmp_path):
    """A map naming ``a.py``, a subpackage ``sub/``, a data folder ``data/``, a layout's
    ``action/`` and a path elsewhere that exists (``tests/toys.py``), but not ``b.py`` nor the
    subpackage ``other/``, and a gone ``c.py`` and ``gone/x.py``."""
    for sub in ("sub", "other"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "__init__.py").write_text(
        '"""Parts: ``a.py``, ``sub/``, ``data/``, ``c.py``; see ``tests/toys.py`` and '
        '``gone/x.py``; writes ``action/``."""\n')
    named, on_disk = package_map(tmp_path)
    assert on_disk == {"a.py", "b.py", "sub/", "other/"}
    assert named == {"a.py", "sub/", "c.py", "missing: gone/x.py"}
