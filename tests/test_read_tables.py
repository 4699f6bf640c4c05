"""Reading the tidy tables back: the committed files read as they are, and each way a
file can be broken is one InputError naming file, line and column."""

import gzip
import json
import lzma
import time

import pandas as pd
import pytest

from conftest import REPO
from seer.collect.store import RunStore
from seer.dataset.build import census_table, read_census, read_measurements
from seer.dataset.tables import parts
from seer.errors import InputError
from seer.schema import CENSUS_COLUMNS, MEASUREMENT_COLUMNS, MEASUREMENT_TEXT_COLUMNS

H100 = REPO / "data" / "h100"


@pytest.fixture(scope="module")
def committed(table):
    """The committed measurements as read_measurements reads them: conftest's table, read once per run."""
    return table


@pytest.fixture(scope="module")
def small(committed):
    """Five runs of the committed table, as text (what a CSV file holds)."""
    return committed.head(5).astype(object).where(committed.head(5).notna(), None)


@pytest.fixture(scope="module")
def small_census(tmp_path_factory):
    """The census of a store holding the first raw census records."""
    with lzma.open(H100 / "raw" / "census.jsonl.xz", "rt") as handle:
        records = [json.loads(next(handle)) for _ in range(6)]
    store = RunStore(tmp_path_factory.mktemp("census"))
    store.append("census", records)
    store.close()
    return census_table(store)


def _write(frame: pd.DataFrame, path):
    frame.to_csv(path, index=False, compression="gzip" if str(path).endswith(".gz") else None)
    return path


def _error(path, read=read_measurements, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        read(path, **kwargs)
    error = caught.value
    assert error.path == str(path) and "\n" not in str(error)
    return error


# -- the committed files ------------------------------------------------------------------
@pytest.mark.slow
def test_committed_measurements_read_as_pandas_reads_them(committed):
    started = time.perf_counter()
    plain = pd.concat([pd.read_parquet(p) for p in parts(H100 / "measurements")], ignore_index=True)
    plain_seconds = time.perf_counter() - started
    started = time.perf_counter()
    read_measurements(H100 / "measurements")
    checked_seconds = time.perf_counter() - started
    assert list(committed.drop(columns="pass").columns) == list(MEASUREMENT_COLUMNS)
    # As a CSV file reads: a whole-number column that may be empty is float.
    plain["workspace_bytes"] = plain["workspace_bytes"].astype(float)
    pd.testing.assert_frame_equal(committed.drop(columns="pass"), plain[list(MEASUREMENT_COLUMNS)])
    for column in MEASUREMENT_TEXT_COLUMNS:
        assert pd.api.types.is_string_dtype(committed[column]), column
    # The checks are vectorised: a fraction of the read itself (generous, for loaded machines).
    assert checked_seconds < 3 * plain_seconds + 1


def test_needed_columns_only_in_the_order_asked(committed):
    columns = ["time_ms", "shape_id", "status", "math", "time_ms"]
    frame = read_measurements(H100 / "measurements", columns=columns)
    assert list(frame.columns) == ["time_ms", "shape_id", "status", "math"]
    pd.testing.assert_frame_equal(frame, committed[["time_ms", "shape_id", "status", "math"]])


def test_columns_outside_the_schema_are_a_bug_of_the_caller(tmp_path):
    with pytest.raises(ValueError, match="speed"):
        read_measurements(tmp_path / "m.csv.gz", columns=["time_ms", "speed"])


def test_census_round_trip_keeps_census_table_dtypes(small_census, tmp_path):
    assert len(small_census) == 6 * 8
    path = _write(small_census, tmp_path / "census.csv.gz")
    read = read_census(path)
    # The file holds the stored columns; the reader adds each answer's pass, from the registry.
    pd.testing.assert_frame_equal(read.drop(columns="pass"), small_census)
    assert list(read.drop(columns="pass").columns) == list(CENSUS_COLUMNS)
    assert list(read.columns).index("pass") == list(CENSUS_COLUMNS).index("algo") + 1
    assert set(read["pass"]) == {"fwd"}


def test_census_unknown_algorithm(small_census, tmp_path):
    broken = small_census.astype(object)
    broken.loc[5, "algo"] = "BWD_DATA_ALGO_9"
    error = _error(_write(broken, tmp_path / "census.csv"), read_census)
    assert (error.line, error.field) == (7, "algo") and "unknown algorithm 'BWD_DATA_ALGO_9'" in str(error)


# -- damaged files --------------------------------------------------------------------------
def test_missing_file(tmp_path):
    for read in (read_measurements, read_census):
        error = _error(tmp_path / "none.csv.gz", read)
        assert error.line is None and "no such file" in str(error)


def test_not_gzip(small, tmp_path):
    path = tmp_path / "m.csv.gz"
    path.write_text(small.to_csv(index=False))
    assert "not a gzip file" in str(_error(path))


def test_truncated_gzip(small, tmp_path):
    whole = gzip.compress(pd.concat([small] * 200).to_csv(index=False).encode())
    path = tmp_path / "m.csv.gz"
    path.write_bytes(whole[: len(whole) // 2])
    assert "cut short" in str(_error(path))
    census = tmp_path / "census.csv.gz"
    census.write_bytes(whole[:30])
    assert "cut short" in str(_error(census, read_census))


def test_corrupt_deflate_stream(tmp_path):
    path = tmp_path / "m.csv.gz"
    # A valid gzip header, then a deflate block of the reserved type 3: zlib refuses it.
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + b"\xff" * 64)
    assert "damaged (Error -3" in str(_error(path))


def test_wrong_checksum(small, tmp_path):
    whole = bytearray(gzip.compress(small.to_csv(index=False).encode()))
    whole[-8] ^= 0xFF  # the CRC-32 of the content, stored after the deflate stream
    path = tmp_path / "m.csv.gz"
    path.write_bytes(bytes(whole))
    assert "damaged (CRC check failed" in str(_error(path))


@pytest.mark.parametrize("name, content", [("m.csv", b""), ("m.csv.gz", b""), ("m.csv.gz", gzip.compress(b"", mtime=0)),
                                           ("m.csv", b"\n\n")])
def test_empty_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    for read in (read_measurements, read_census):
        assert "empty file" in str(_error(path, read))


def test_binary_file(tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(bytes(range(128, 256)) * 4)
    assert "not a text file" in str(_error(path))


# -- malformed content ----------------------------------------------------------------------
def test_header_without_a_needed_column(small, tmp_path):
    path = _write(small.drop(columns=["time_ms", "algo"]), tmp_path / "m.csv.gz")
    error = _error(path)
    assert (error.line, error.field) == (1, "algo")
    assert str(error).startswith(f"{path}:1: algo: missing from the header")
    # A caller that does not need those columns reads the file.
    assert len(read_measurements(path, columns=["shape_id", "status"])) == 5
    error = _error(path, columns=["shape_id", "time_ms"])
    assert (error.line, error.field) == (1, "time_ms")


def test_census_header_without_a_needed_column(small_census, tmp_path):
    path = _write(small_census.drop(columns=["workspace_bytes"]), tmp_path / "census.csv.gz")
    error = _error(path, read_census)
    assert (error.line, error.field) == (1, "workspace_bytes")


def test_not_a_number(small, tmp_path):
    broken = small.copy()
    broken.loc[3, "time_ms"] = "abc"
    path = _write(broken, tmp_path / "m.csv.gz")
    error = _error(path)
    assert str(error) == f"{path}:5: time_ms: not a number 'abc'"
    assert (error.line, error.field) == (5, "time_ms")
    # The first offending row wins, whichever column it is in.
    broken.loc[1, "workspace_bytes"] = "lots"
    assert str(_error(_write(broken, path))) == f"{path}:3: workspace_bytes: not a number 'lots'"
    # A column the caller does not read is not checked.
    assert len(read_measurements(path, columns=["shape_id", "n_reps"])) == 5


def test_census_not_a_number_or_not_whole(small_census, tmp_path):
    broken = small_census.astype(object)
    broken.loc[7, "heuristic_rank"] = "first"
    path = _write(broken, tmp_path / "census.csv.gz")
    assert str(_error(path, read_census)) == f"{path}:9: heuristic_rank: not a number 'first'"
    broken = small_census.astype(object)
    broken.loc[2, "batch"] = 1.5
    error = _error(_write(broken, path), read_census)
    assert (error.line, error.field) == (4, "batch") and "not a whole number 1.5" in str(error)
    broken.loc[2, "batch"] = None
    error = _error(_write(broken, path), read_census)
    assert (error.line, error.field) == (4, "batch") and "empty" in str(error)


@pytest.mark.parametrize("column, value, row", [("status", "fine", 1), ("math", "tf32", 0), ("status", None, 4)])
def test_unknown_status_or_math_mode(small, tmp_path, column, value, row):
    broken = small.copy()
    broken.loc[row, column] = value
    path = _write(broken, tmp_path / "m.csv.gz")
    error = _error(path)
    assert (error.line, error.field) == (row + 2, column)
    assert ("empty" if value is None else repr(value)) in str(error) and "expected one of" in str(error)


def test_census_unknown_status(small_census, tmp_path):
    broken = small_census.astype(object)
    broken.loc[10, "status"] = "maybe"
    error = _error(_write(broken, tmp_path / "census.csv"), read_census)
    assert (error.line, error.field) == (12, "status")


def test_blank_lines_keep_line_numbers_true(small, tmp_path):
    lines = small.to_csv(index=False).splitlines()
    path = tmp_path / "m.csv"
    path.write_text("\n".join([*lines[:3], "", *lines[3:]]) + "\n")
    error = _error(path)
    assert (error.line, error.field) == (4, "status") and "empty" in str(error)


def test_unterminated_quote(small, tmp_path):
    lines = small.to_csv(index=False).splitlines()
    lines[3] = lines[3].replace(",", ',"', 1)
    path = tmp_path / "m.csv"
    path.write_text("\n".join(lines) + "\n")
    error = _error(path)
    assert error.line == 4 and "malformed CSV" in str(error)
