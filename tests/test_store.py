import gzip
import json
import lzma
import os

import pytest

from seer.collect.store import TORN_SUFFIX, RunStore, read_jsonl
from seer.errors import InputError

KEY = ("shape_id", "math", "algo")


def _row(sid, algo, status="ok", t=1.0):
    return {"shape_id": sid, "math": "fma", "algo": algo, "status": status, "time_ms": t}


def test_append_read_and_last_record_wins(tmp_path):
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s1", "GEMM", "error", None), _row("s1", "FFT")])
        store.append("timing", [_row("s1", "GEMM", "ok", 2.0)])
    frame = RunStore(tmp_path).read("timing", KEY)
    assert len(frame) == 2
    assert frame.set_index("algo").loc["GEMM", "status"] == "ok"


def _line(record):
    return json.dumps(record, separators=(",", ":")) + "\n"


#: Ends of a file whose last write was torn by a crash: cut mid-record without a newline,
#: cut mid-record with one, and a whole record whose newline never came.
TORN_TAILS = ['{"shape_id": "s2", "ma', '{"shape_id": "s2", "ma\n', json.dumps(_row("s2", "GEMM"))]
TORN_IDS = ["cut-no-newline", "cut-with-newline", "whole-record-no-newline"]


@pytest.mark.parametrize("tail", TORN_TAILS, ids=TORN_IDS)
def test_readers_skip_a_torn_last_line_and_leave_the_file_alone(tmp_path, tail):
    path = tmp_path / "raw" / "timing-x.jsonl"
    path.parent.mkdir()
    path.write_text(_line(_row("s1", "GEMM")) + tail)
    before = path.read_bytes()
    assert [r["shape_id"] for r in read_jsonl(path)] == ["s1"]
    # The torn item is not done, so a resumed collection measures it again.
    assert RunStore(tmp_path).done_keys("timing", KEY) == {("s1", "fma", "GEMM")}
    assert path.read_bytes() == before and not path.with_name(path.name + TORN_SUFFIX).exists()


@pytest.mark.parametrize("tail", TORN_TAILS, ids=TORN_IDS)
def test_the_writer_sets_a_torn_last_line_aside_and_appends_on_a_clean_line(tmp_path, tail):
    path = tmp_path / "raw" / "timing-a.jsonl"
    path.parent.mkdir()
    path.write_text(_line(_row("s1", "GEMM")) + tail)
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s2", "GEMM")])
    assert path.read_text() == _line(_row("s1", "GEMM")) + _line(_row("s2", "GEMM"))
    aside = path.with_name(path.name + TORN_SUFFIX)
    assert aside.read_text() == tail.rstrip("\n") + "\n"
    # A later tear is set aside after the first; every run after that reads everything.
    with open(path, "a") as handle:
        handle.write('{"shape_id": "s3"')
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s3", "GEMM")])
    assert aside.read_text() == tail.rstrip("\n") + "\n" + '{"shape_id": "s3"\n'
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s4", "GEMM")])
    assert [r["shape_id"] for r in read_jsonl(path)] == ["s1", "s2", "s3", "s4"]
    assert len(path.read_text().splitlines()) == 4


def test_a_file_with_no_complete_record_is_emptied_and_a_long_last_record_is_kept(tmp_path):
    path = tmp_path / "raw" / "kernels-a.jsonl"
    path.parent.mkdir()
    path.write_text('{"shape_id": "s1", "ma')
    with RunStore(tmp_path, tag="a") as store:
        store.append("kernels", [_row("s1", "GEMM")])
    assert path.read_text() == _line(_row("s1", "GEMM"))
    # A record longer than the chunks in which the file's end is searched backwards.
    long = _row("s2", "GEMM") | {"status_detail": "x" * 200_000}
    with open(path, "a") as handle:
        handle.write(_line(long) + '{"shape_id": "s3", "ma')
    with RunStore(tmp_path, tag="a") as store:
        store.append("kernels", [_row("s4", "GEMM")])
    assert [r["shape_id"] for r in read_jsonl(path)] == ["s1", "s2", "s4"]
    assert path.with_name(path.name + TORN_SUFFIX).read_text() == '{"shape_id": "s1", "ma\n{"shape_id": "s3", "ma\n'


def test_a_torn_session_line_is_set_aside_before_the_next_session_is_logged(tmp_path):
    store = RunStore(tmp_path)
    store.log_session({"n": 1})
    path = tmp_path / "raw" / "sessions.jsonl"
    with open(path, "a") as handle:
        handle.write('{"n": 2, "gp')
    assert store.sessions() == [{"n": 1}]
    store.log_session({"n": 3})
    assert store.sessions() == [{"n": 1}, {"n": 3}]
    assert path.read_text() == '{"n": 1}\n{"n": 3}\n'
    assert path.with_name(path.name + TORN_SUFFIX).read_text() == '{"n": 2, "gp\n'


def test_corruption_before_the_last_line_is_reported_and_never_cut(tmp_path):
    path = tmp_path / "raw" / "timing-a.jsonl"
    path.parent.mkdir()
    path.write_text('{"broken\n' + _line(_row("s1", "GEMM")))
    with pytest.raises(InputError) as info:
        read_jsonl(path)
    assert info.value.line == 1 and str(path) in str(info.value)
    # The writer repairs only a torn end: the damage stays where a person can see it.
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s2", "GEMM")])
    assert path.read_text().startswith('{"broken\n' + _line(_row("s1", "GEMM")))
    with pytest.raises(InputError, match="corrupt record") as info:
        RunStore(tmp_path).read("timing", KEY)
    assert info.value.line == 1 and info.value.path == str(path)


def test_done_keys_can_leave_statuses_to_retry(tmp_path):
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s1", "GEMM", "error"), _row("s1", "FFT", "ok")])
    store = RunStore(tmp_path)
    assert store.done_keys("timing", KEY) == {("s1", "fma", "GEMM"), ("s1", "fma", "FFT")}
    assert store.done_keys("timing", KEY, skip_status=["error"]) == {("s1", "fma", "FFT")}


def test_pack_merges_sorts_and_never_rewrites_a_pack(tmp_path):
    with RunStore(tmp_path, tag="b") as store:
        store.append("timing", [_row("s2", "GEMM"), _row("s1", "GEMM", "error")])
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s1", "GEMM", "ok", 3.0)])
    store = RunStore(tmp_path)
    packed = store.pack("timing", KEY)
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["timing.001.jsonl.xz"]
    records = [json.loads(line) for line in lzma.open(packed, "rt")]
    assert [(r["shape_id"], r["status"]) for r in records] == [("s1", "ok"), ("s2", "ok")]
    first = packed.read_bytes()
    # A new record after packing supersedes the packed one, and goes to a pack of its own.
    with RunStore(tmp_path, tag="c") as store2:
        store2.append("timing", [_row("s2", "GEMM", "ok", 9.0)])
    assert RunStore(tmp_path).read("timing", KEY).set_index("shape_id").loc["s2", "time_ms"] == 9.0
    second = RunStore(tmp_path).pack("timing", KEY)
    assert second.name == "timing.002.jsonl.xz" and packed.read_bytes() == first
    assert [json.loads(line)["time_ms"] for line in lzma.open(second, "rt")] == [9.0]
    assert RunStore(tmp_path).read("timing", KEY).set_index("shape_id").loc["s2", "time_ms"] == 9.0
    with RunStore(tmp_path, tag="d") as store3:  # the same record again: nothing new to pack
        store3.append("timing", [_row("s2", "GEMM", "ok", 9.0)])
    assert RunStore(tmp_path).pack("timing", KEY) == second
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["timing.001.jsonl.xz", "timing.002.jsonl.xz"]
    assert RunStore(tmp_path).pack("timing", KEY) == second  # nothing loose: nothing written


def test_pack_keeps_a_single_pack_of_an_earlier_version_and_reads_every_compression(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    with gzip.open(raw / "timing.jsonl.gz", "wt") as handle:  # packed before packs were xz
        handle.write(json.dumps(_row("s1", "GEMM", "ok", 1.0)) + "\n")
    with lzma.open(raw / "timing-m-1of1-c2.jsonl.xz", "wt") as handle:
        handle.write(json.dumps(_row("s1", "GEMM", "ok", 2.0)) + "\n")
    with gzip.open(raw / "timing-m-1of1-c1.jsonl.gz", "wt") as handle:
        handle.write(json.dumps(_row("s2", "GEMM", "ok", 5.0)) + "\n")
    os.utime(raw / "timing-m-1of1-c1.jsonl.gz", (1, 1))  # older than the .xz loose file
    times = RunStore(tmp_path).read("timing", KEY).set_index("shape_id")["time_ms"]
    assert times.to_dict() == {"s1": 2.0, "s2": 5.0}
    before = (raw / "timing.jsonl.gz").read_bytes()
    RunStore(tmp_path).pack("timing", KEY)
    assert sorted(p.name for p in raw.iterdir()) == ["timing.001.jsonl.xz", "timing.jsonl.gz"]
    assert (raw / "timing.jsonl.gz").read_bytes() == before
    assert RunStore(tmp_path).files("timing") == [raw / "timing.jsonl.gz", raw / "timing.001.jsonl.xz"]
    assert RunStore(tmp_path).read("timing", KEY).set_index("shape_id")["time_ms"].to_dict() == times.to_dict()


@pytest.mark.parametrize("suffix", [".gz", ".xz"])
def test_a_damaged_compressed_file_names_itself(tmp_path, suffix):
    raw = tmp_path / "raw"
    raw.mkdir()
    opener = gzip.open if suffix == ".gz" else lzma.open
    path = raw / f"timing.jsonl{suffix}"
    with opener(path, "wt") as handle:
        handle.writelines(json.dumps(_row(f"s{i}", "GEMM")) + "\n" for i in range(200))
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(InputError, match="damaged compressed file") as info:
        RunStore(tmp_path).read("timing", KEY)
    assert info.value.path == str(path)


def test_done_keys_can_require_a_value(tmp_path):
    store = RunStore(tmp_path)
    store.append("timing", [{"shape_id": "s1", "math": "fma", "algo": "GEMM", "status": "ok"},
                            {"shape_id": "s1", "math": "fma", "algo": "FFT", "status": "ok",
                             "timing_protocol": 2}])
    assert store.done_keys("timing", KEY, require={"timing_protocol": 2}) == {("s1", "fma", "FFT")}
    assert store.done_keys("timing", KEY, require={"timing_protocol": 3}) == set()
    assert store.done_keys("timing", KEY, require={"no_such_column": 1}) == set()


@pytest.mark.parametrize("tail", TORN_TAILS, ids=TORN_IDS)
def test_reading_some_shapes_gives_their_records_as_reading_all_does(tmp_path, tail):
    # A shard of a collection decodes only its own shapes' records (its start on a large dataset).
    path = tmp_path / "raw" / "timing-x.jsonl"
    path.parent.mkdir()
    rows = [_row("s1", "GEMM", "error"), _row("s3", "FFT"), _row("s1", "GEMM"), {**_row("s3", "GEMM"), "grid": "g"},
            {"math": "fma", "algo": "FFT", "status": "ok", "shape_id": "s1"}]  # its shape last: decoded to be read
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]) + "".join(_line(r) for r in rows[3:]) + tail)
    store = RunStore(tmp_path)
    for ids in ({"s1"}, {"s2", "s3"}, {"s1", "s2", "s3"}, set()):
        everything = store.read("timing")
        assert store.read("timing", shape_ids=ids).equals(
            everything[everything["shape_id"].isin(ids)].dropna(axis=1, how="all").reset_index(drop=True))
    assert [r["algo"] for r in read_jsonl(path, {"s1"})] == ["GEMM", "GEMM", "FFT"]


def test_a_corrupt_record_of_the_shapes_read_is_still_reported(tmp_path):
    path = tmp_path / "raw" / "timing-x.jsonl"
    path.parent.mkdir()
    path.write_text('{"shape_id": "s1", "ma\n' + _line(_row("s2", "GEMM")) + _line(_row("s1", "GEMM")))
    assert [r["shape_id"] for r in read_jsonl(path, {"s2"})] == ["s2"]  # another shard's damage is its own
    with pytest.raises(InputError, match="corrupt record"):
        read_jsonl(path, {"s1"})
