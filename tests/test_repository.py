"""The repository stays light to clone: large files live in the data folders only."""

from __future__ import annotations

import subprocess

import pytest

from conftest import REPO

#: Folders that may hold large files (datasets, shipped models, benchmark data).
DATA_FOLDERS = ("data/", "seer/data/", "benchmarks/data/")
#: The largest file, in bytes, allowed outside them.
LARGEST_OUTSIDE_DATA = 5_000_000


def test_no_large_file_is_tracked_outside_the_data_folders():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    large = [path for path in tracked.decode().split("\0") if path and (REPO / path).is_file()
             and (REPO / path).stat().st_size > LARGEST_OUTSIDE_DATA and not path.startswith(DATA_FOLDERS)]
    assert not large, f"tracked files over {LARGEST_OUTSIDE_DATA:,} bytes outside {DATA_FOLDERS}: {large}"
