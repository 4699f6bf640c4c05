import gzip
import json

import pytest

from seer.collect.store import RunStore, read_jsonl
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


def test_torn_last_line_is_dropped_but_corruption_elsewhere_is_reported(tmp_path):
    path = tmp_path / "raw" / "timing-x.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(_row("s1", "GEMM")) + "\n" + '{"shape_id": "s2", "ma')
    assert [r["shape_id"] for r in read_jsonl(path)] == ["s1"]
    path.write_text('{"broken\n' + json.dumps(_row("s1", "GEMM")) + "\n")
    with pytest.raises(InputError) as info:
        read_jsonl(path)
    assert info.value.line == 1 and str(path) in str(info.value)


def test_done_keys_can_leave_statuses_to_retry(tmp_path):
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s1", "GEMM", "error"), _row("s1", "FFT", "ok")])
    store = RunStore(tmp_path)
    assert store.done_keys("timing", KEY) == {("s1", "fma", "GEMM"), ("s1", "fma", "FFT")}
    assert store.done_keys("timing", KEY, skip_status=["error"]) == {("s1", "fma", "FFT")}


def test_pack_merges_sorts_and_is_byte_stable(tmp_path):
    with RunStore(tmp_path, tag="b") as store:
        store.append("timing", [_row("s2", "GEMM"), _row("s1", "GEMM", "error")])
    with RunStore(tmp_path, tag="a") as store:
        store.append("timing", [_row("s1", "GEMM", "ok", 3.0)])
    store = RunStore(tmp_path)
    packed = store.pack("timing", KEY)
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["timing.jsonl.gz"]
    records = [json.loads(line) for line in gzip.open(packed, "rt")]
    assert [(r["shape_id"], r["status"]) for r in records] == [("s1", "ok"), ("s2", "ok")]
    first = packed.read_bytes()
    # A new record after packing supersedes the packed one; packing again is deterministic.
    with RunStore(tmp_path, tag="c") as store2:
        store2.append("timing", [_row("s2", "GEMM", "ok", 9.0)])
    assert RunStore(tmp_path).read("timing", KEY).set_index("shape_id").loc["s2", "time_ms"] == 9.0
    RunStore(tmp_path).pack("timing", KEY)
    assert packed.read_bytes() != first
    again = packed.read_bytes()
    RunStore(tmp_path).pack("timing", KEY)
    assert packed.read_bytes() == again


def test_done_keys_can_require_a_value(tmp_path):
    store = RunStore(tmp_path)
    store.append("timing", [{"shape_id": "s1", "math": "fma", "algo": "GEMM", "status": "ok"},
                            {"shape_id": "s1", "math": "fma", "algo": "FFT", "status": "ok",
                             "timing_protocol": 2}])
    assert store.done_keys("timing", KEY, require={"timing_protocol": 2}) == {("s1", "fma", "FFT")}
    assert store.done_keys("timing", KEY, require={"timing_protocol": 3}) == set()
    assert store.done_keys("timing", KEY, require={"no_such_column": 1}) == set()
