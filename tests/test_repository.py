"""The repository stays light to clone: large files live in the data folders only."""

from __future__ import annotations

import subprocess

import pytest

from conftest import REPO

#: Folders that may hold large files (datasets, shipped models, benchmark data).
DATA_FOLDERS = ("data/", "models/", "seer/data/", "benchmarks/data/")
#: The largest file, in bytes, allowed outside them.
LARGEST_OUTSIDE_DATA = 5_000_000


def test_no_large_file_is_tracked_outside_the_data_folders():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    large = [path for path in tracked.decode().split("\0") if path and (REPO / path).is_file()
             and (REPO / path).stat().st_size > LARGEST_OUTSIDE_DATA and not path.startswith(DATA_FOLDERS)]
    assert not large, f"tracked files over {LARGEST_OUTSIDE_DATA:,} bytes outside {DATA_FOLDERS}: {large}"


#: seer's stages in data-flow order (docs/architecture.md): each package imports only those
#: before it and the shared top-level modules, never a later one.
STAGES = ("layers", "hardware", "collect", "gpu", "dataset", "predict", "training", "torch", "networks", "reporting")
#: Top-level modules every stage may use; they import no stage but layers.
SHARED = ("errors", "progress", "output", "schema", "algorithms", "metrics", "gc_pause")


def _imported_units(path) -> set[str]:
    """The stages and shared modules that a source file imports (at its top or inside a function)."""
    import re

    found = set()
    for match in re.finditer(r"^\s*(?:from|import) seer\.(\w+)", path.read_text(), re.M):
        found.add(match.group(1))
    return found


def test_the_stages_import_only_earlier_stages():
    backwards = []
    for position, stage in enumerate(STAGES):
        for path in sorted((REPO / "seer" / stage).rglob("*.py")):
            for unit in _imported_units(path) - {stage}:
                allowed = unit in SHARED or (unit in STAGES and STAGES.index(unit) < position)
                if not allowed:
                    backwards.append(f"{path.relative_to(REPO)} imports seer.{unit}")
    for name in SHARED:
        for unit in _imported_units(REPO / "seer" / f"{name}.py"):
            if unit in STAGES and unit != "layers":
                backwards.append(f"seer/{name}.py imports seer.{unit}")
    assert not backwards, backwards
    # Every package of seer is a stage, the command line, or the shipped data.
    packages = {p.name for p in (REPO / "seer").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(STAGES)


def test_pyproject_lists_every_package_and_maps_the_shipped_models():
    import tomllib

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {"seer", *(f"seer.{p.name}" for p in (REPO / "seer").iterdir() if (p / "__init__.py").exists())}
    assert set(setuptools["packages"]) == found | {"seer.shipped_models"}
    assert setuptools["package-dir"] == {"seer.shipped_models": "models"}
    assert (REPO / "models" / "h100" / "model.json").exists()
