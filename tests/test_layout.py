"""Tests mirror the packages (docs/architecture.md, "Tests mirror the packages"): every test file under a
package folder is named for a module of that package, so a module's tests are found without a search."""

from __future__ import annotations

from tests.paths import ROOT

PACKAGE_DIRS = {
    "agent": ROOT / "agent",
    "alerts": ROOT / "alerts",
    "collectors": ROOT / "collectors",
    "dashboards": ROOT / "dashboards",
    "pipelines": ROOT / "pipelines",
    "simulator": ROOT / "simulator",
    "slurmscope": ROOT / "slurmscope",
}
WHOLE_PRODUCT = {"test_docs.py", "test_security.py", "test_crash.py", "test_reconcile.py", "test_layout.py"}


def _modules(package_dir) -> set[str]:
    """Module and subpackage names of a package folder (nested folders count by their own name too)."""
    names = {p.stem for p in package_dir.rglob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in package_dir.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    return names


def test_every_test_file_names_a_module_of_its_package():
    tests = ROOT / "tests"
    misplaced = []
    for folder, package_dir in PACKAGE_DIRS.items():
        modules = _modules(package_dir)
        for path in sorted((tests / folder).glob("test_*.py")):
            stem = path.stem.removeprefix("test_")
            if not any(stem == m or stem.startswith(m + "_") for m in modules):
                misplaced.append(str(path.relative_to(ROOT)))
    assert not misplaced, f"test files naming no module of their package: {misplaced}"


def test_only_whole_product_tests_sit_at_the_top():
    top = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    assert top <= WHOLE_PRODUCT, top - WHOLE_PRODUCT
    assert set(PACKAGE_DIRS) <= {p.name for p in (ROOT / "tests").iterdir() if p.is_dir()}
