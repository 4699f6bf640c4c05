"""The tidy tables as folders of Parquet parts, one per grid: written only where rows change,
read back exactly as written, and each broken part one InputError naming it."""

import pandas as pd
import pytest

from seer.dataset.build import read_measurements
from seer.dataset.tables import part_grid, part_name, parts, read_parts, write_parts
from seer.errors import InputError
from seer.schema import MEASUREMENT_COLUMNS


@pytest.fixture(scope="module")
def runs(table):
    """Runs of three grids, one of them named with a character a file name avoids."""
    picked = [table[table["grid"] == grid].head(40) for grid in ("seer", "file:unet3d", "general")]
    return pd.concat(picked, ignore_index=True)


def test_a_part_per_grid_named_reversibly_and_read_back_as_written(runs, tmp_path):
    written = write_parts(runs, tmp_path / "measurements")
    assert sorted(p.name for p in parts(tmp_path / "measurements")) == \
        ["file%3Aunet3d.parquet", "general.parquet", "seer.parquet"]
    assert part_grid(tmp_path / part_name("file:unet3d")) == "file:unet3d"
    # The rows come back in the order of their grids, as write_parts returned them.
    assert list(written["grid"].drop_duplicates()) == ["file:unet3d", "general", "seer"]
    pd.testing.assert_frame_equal(read_parts(tmp_path / "measurements"), written)
    again = read_measurements(tmp_path / "measurements")
    assert len(again) == len(runs)
    assert list(again.drop(columns="pass").columns) == list(MEASUREMENT_COLUMNS)
    assert list(again.columns).index("pass") == list(again.columns).index("algo") + 1
    assert (again["pass"] == "fwd").all()  # from the registry: the files do not store it


def test_only_changed_parts_are_written_and_gone_grids_are_removed(runs, tmp_path):
    folder = tmp_path / "measurements"
    write_parts(runs, folder)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in parts(folder)}
    write_parts(runs, folder)  # the same rows: nothing is written
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in parts(folder)} == before
    changed = runs[runs["grid"] != "general"].copy()
    changed.loc[changed["grid"] == "seer", "time_ms"] *= 2
    write_parts(changed, folder)
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in parts(folder)}
    assert set(after) == {"file%3Aunet3d.parquet", "seer.parquet"}
    assert after["file%3Aunet3d.parquet"] == before["file%3Aunet3d.parquet"]
    assert after["seer.parquet"][1] != before["seer.parquet"][1]
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary file left
    write_parts(changed.head(0), folder)  # no rows: no table
    assert not folder.exists()


def test_rows_without_a_grid_column_take_the_grid_they_are_given(tmp_path):
    kernels = pd.DataFrame({"shape_id": ["a", "b", "a"], "kernel_idx": [0, 0, 1]})
    written = write_parts(kernels, tmp_path / "k", grids=pd.Series(["g2", "g1", "g2"]))
    assert list(written["shape_id"]) == ["b", "a", "a"]
    pd.testing.assert_frame_equal(read_parts(tmp_path / "k"), written)


def _error(read, path, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        read(path, **kwargs)
    assert "\n" not in str(caught.value)
    return caught.value


def test_each_broken_part_is_one_error_naming_it(runs, tmp_path):
    folder = tmp_path / "measurements"
    assert "no such file" in str(_error(read_measurements, folder))
    folder.mkdir()
    assert "no .parquet parts" in str(_error(read_measurements, folder))
    write_parts(runs, folder)
    seer = folder / "seer.parquet"
    whole = seer.read_bytes()
    for broken in (b"", whole[: len(whole) // 2], b"shape_id,time_ms\n"):
        seer.write_bytes(broken)
        error = _error(read_measurements, folder)
        assert error.path == str(seer) and "cannot be read as Parquet" in str(error)
    part = runs[runs["grid"] == "seer"].reset_index(drop=True)
    for frame, field, words in (
            (part.drop(columns=["algo"]), "algo", "missing from the part's columns"),
            (part.assign(status=part["status"].where(part.index != 3, "great")), "status", "unknown status 'great'"),
            (part.assign(time_ms=[None if i != 5 else "fast" for i in part.index]),
             "time_ms", "not a number 'fast' (row 6)")):
        frame.to_parquet(seer, index=False)
        error = _error(read_measurements, folder)
        assert (error.path, error.field) == (str(seer), field) and words in str(error), str(error)


def test_the_committed_census_reads_with_its_dtypes(census):
    assert census["batch"].dtype == "int64" and str(census["heuristic_rank"].dtype) == "Int64"
    assert census["grid"].is_monotonic_increasing  # the order of the parts
