"""The shape of the tests: unit tests mirror the packages they test, and no test module
imports another (what tests share lives in ``tests/support``)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
# Unit tests of what is not a Python package: the alert rules, the docs site.
NOT_PACKAGES = {"deploy", "docs"}


def test_no_test_module_imports_another() -> None:
    offenders = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)} imports {n}" for n in names
                          if n.startswith(("tests.unit", "tests.integration"))]
    assert not offenders, offenders


def test_unit_tests_mirror_the_packages() -> None:
    for path in (TESTS / "unit").rglob("test_*.py"):
        folder = path.parent.relative_to(TESTS / "unit")
        if folder == Path("."):
            assert path.name == Path(__file__).name, f"{path.name} sits outside a package's folder"
            continue
        if folder.parts[0] in NOT_PACKAGES:
            assert (ROOT / folder.parts[0]).is_dir(), folder
            continue
        assert (ROOT / folder / "__init__.py").exists(), f"tests/unit/{folder} mirrors no package"
