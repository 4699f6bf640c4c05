"""Merging shards' raw records: each record once, torn lines left behind, writers that shared a tag side by side."""

import itertools
import json
import lzma
import types

import pytest

from conftest import DATASET
from seer.cli import main
from seer.collect.merge import merge_raw
from seer.collect.store import TORN_SUFFIX, RunStore, read_jsonl
from seer.errors import InputError

KEY = ("shape_id", "math", "algo")


@pytest.fixture(scope="module")
def records():
    """Real timing records: the first of the committed H100 data, 16 runs per shape."""
    with lzma.open(DATASET / "raw" / "timing.jsonl.xz", "rt") as handle:
        return [json.loads(line) for line in itertools.islice(handle, 96)]


def _shard(root, name, tag, records, sessions=()):
    """A dataset folder ``root/name/h100`` written by one shard, as ``seer collect --shard`` writes it."""
    directory = root / name / "h100"
    with RunStore(directory, tag=tag) as store:
        store.append("timing", records)
        for session in sessions:
            store.log_session(session)
    return directory


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, " ".join(capsys.readouterr().err.split())


def _keys(directory):
    return sorted(tuple(r[k] for k in KEY) for r in RunStore(directory).records("timing"))


def test_two_shards_merge_into_one_dataset(tmp_path, records):
    one = _shard(tmp_path, "one", "node1-1of2", records[:48], [{"shard": "1/2"}])
    two = _shard(tmp_path, "two", "node2-2of2", records[48:], [{"shard": "2/2"}])
    target = tmp_path / "data" / "h100"
    result = merge_raw([one, two], target)
    assert sorted(p.name for p in (target / "raw").iterdir()) == [
        "sessions.jsonl", "timing-node1-1of2.jsonl", "timing-node2-2of2.jsonl"]
    assert (result.records, result.skipped, result.sessions, result.kinds) == (96, 0, 2, {"timing"})
    assert _keys(target) == sorted(tuple(r[k] for k in KEY) for r in records)
    assert RunStore(target).sessions() == [{"shard": "1/2"}, {"shard": "2/2"}]
    # Copies keep their shard's modification time: the store reads loose files oldest first.
    assert (target / "raw" / "timing-node1-1of2.jsonl").stat().st_mtime_ns == \
        (one / "raw" / "timing-node1-1of2.jsonl").stat().st_mtime_ns
    # Again: everything is there already, and nothing changes.
    before = {p.name: p.read_bytes() for p in (target / "raw").iterdir()}
    again = merge_raw([one, two], target)
    assert (again.written, again.skipped, again.sessions) == ([], 2, 0)
    assert {p.name: p.read_bytes() for p in (target / "raw").iterdir()} == before


def test_a_torn_last_line_stays_behind(tmp_path, records):
    one = _shard(tmp_path, "one", "a", records[:10])
    source = one / "raw" / "timing-a.jsonl"
    with open(source, "a") as handle:
        handle.write(json.dumps(records[10])[:50])  # a crash mid-write
    torn = source.read_bytes()
    (one / "raw" / ("timing-a.jsonl" + TORN_SUFFIX)).write_text('{"shape_id": "x"\n')
    target = tmp_path / "data" / "h100"
    result = merge_raw([one], target)
    copied = target / "raw" / "timing-a.jsonl"
    assert copied.read_bytes() == torn[:torn.rindex(b"\n") + 1] and len(read_jsonl(copied)) == 10
    assert source.read_bytes() == torn  # a source is never changed
    assert [p.name for p in result.ignored] == ["timing-a.jsonl" + TORN_SUFFIX]
    assert sorted(p.name for p in (target / "raw").iterdir()) == ["timing-a.jsonl"]


def test_a_shard_that_went_on_writing_gives_the_longer_file(tmp_path, records):
    one = _shard(tmp_path, "one", "a", records[:10])
    target = tmp_path / "data" / "h100"
    merge_raw([one], target)
    early = (one / "raw" / "timing-a.jsonl").read_bytes()
    with RunStore(one, tag="a") as store:
        store.append("timing", records[10:20])
    result = merge_raw([one], target)
    assert result.written == [target / "raw" / "timing-a.jsonl"] and len(read_jsonl(result.written[0])) == 20
    # An older copy of the same shard adds nothing.
    old = tmp_path / "old" / "h100" / "raw"
    old.mkdir(parents=True)
    (old / "timing-a.jsonl").write_bytes(early)
    result = merge_raw([old.parent], target)
    assert (result.written, result.skipped) == ([], 1) and len(read_jsonl(target / "raw" / "timing-a.jsonl")) == 20


def test_writers_that_shared_a_tag_keep_their_records_side_by_side(capsys, tmp_path, records):
    one = _shard(tmp_path, "one", "a", records[:10])
    other = _shard(tmp_path, "other", "b", records[30:40])
    clash = _shard(tmp_path, "two", "a", records[10:20])  # another writer with the same tag (same host name)
    target = tmp_path / "data" / "h100"
    code, err = _run(capsys, "merge", "--gpu", "h100", "--data-dir", tmp_path / "data", "--no-parse", other, one, clash)
    assert code == 0 and "1 files of writers that shared a tag" in err, err
    names = sorted(p.name for p in (target / "raw").glob("timing-*"))
    assert names[0].startswith("timing-a-merged-") and names[1:] == ["timing-a.jsonl", "timing-b.jsonl"]
    def ids(rows):
        return sorted((r["shape_id"], r["math"], r["algo"]) for r in rows)

    assert ids(read_jsonl(target / "raw" / "timing-a.jsonl")) == ids(records[:10])
    assert ids(read_jsonl(target / "raw" / names[0])) == ids(records[10:20])
    assert sum(len(read_jsonl(target / "raw" / n)) for n in names) == 30
    # Merged again, nothing is copied twice.
    result = merge_raw([other, one, clash], target)
    assert result.written == [] and result.skipped == 3
    assert len(list((target / "raw").glob("timing-*"))) == 3


@pytest.mark.parametrize("make, words", [
    (lambda root: root / "nothing", "no raw/ folder here"),
    (lambda root: root / "data" / "h100", "is the merge's target"),
])
def test_bad_sources_exit_2(capsys, tmp_path, records, make, words):
    one = _shard(tmp_path, "one", "a", records[:10])
    _shard(tmp_path, "data", "own", records[10:20])
    code, err = _run(capsys, "merge", "--gpu", "h100", "--data-dir", tmp_path / "data", one, make(tmp_path))
    assert code == 2 and words in err and f"{make(tmp_path)}:" in err
    assert not (tmp_path / "data" / "h100" / "raw" / "timing-a.jsonl").exists()


def test_records_of_another_command_are_refused_in_a_dataset(tmp_path):
    source = tmp_path / "profiled" / "raw"
    source.mkdir(parents=True)
    (source / "layer_times-node1-1of2.jsonl").write_text('{"model": "resnet50"}\n')
    with pytest.raises(InputError, match="holds layer_times records, which this target does not take"):
        merge_raw([source.parent], tmp_path / "data" / "h100", kinds=("timing", "census"))


def test_packed_files_are_copied_beside_the_targets_pack(tmp_path, records):
    one = _shard(tmp_path, "one", "a", records[:30])
    RunStore(one).pack("timing", KEY)
    target = _shard(tmp_path, "data", "b", records[30:60])
    RunStore(target).pack("timing", KEY)
    result = merge_raw([one], target)
    (copied,) = result.written
    assert copied.name.startswith("timing-merged-") and copied.name.endswith(".jsonl.xz")
    assert copied.read_bytes() == (one / "raw" / "timing.001.jsonl.xz").read_bytes()
    assert RunStore(target).files("timing") == [target / "raw" / "timing.001.jsonl.xz", copied]
    assert _keys(target) == sorted(tuple(r[k] for k in KEY) for r in records[:60])
    # The same pack again, from another copy of its folder, is the same file.
    (tmp_path / "copy" / "raw").mkdir(parents=True)
    (tmp_path / "copy" / "raw" / "timing.001.jsonl.xz").write_bytes((one / "raw" / "timing.001.jsonl.xz").read_bytes())
    again = merge_raw([tmp_path / "copy"], target)
    assert (again.written, again.skipped) == ([], 1)
    # Nor is the target's own pack, from a copy of the target.
    (tmp_path / "mirror" / "raw").mkdir(parents=True)
    (tmp_path / "mirror" / "raw" / "timing.001.jsonl.xz").write_bytes(
        (target / "raw" / "timing.001.jsonl.xz").read_bytes())
    again = merge_raw([tmp_path / "mirror"], target)
    assert (again.written, again.skipped) == ([], 1)


def test_a_damaged_compressed_file_is_refused(tmp_path):
    source = tmp_path / "one" / "raw"
    source.mkdir(parents=True)
    (source / "timing.jsonl.xz").write_bytes(lzma.compress(b'{"a": 1}\n' * 1000)[:40])
    with pytest.raises(InputError, match="damaged compressed file"):
        merge_raw([source.parent], tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_sessions_are_appended_once(tmp_path, records):
    one = _shard(tmp_path, "one", "a", records[:5], [{"n": 1}, {"n": 2}])
    target = _shard(tmp_path, "data", "b", records[5:10], [{"n": 2}, {"n": 0}])
    with open(target / "raw" / "sessions.jsonl", "a") as handle:
        handle.write('{"n": ')  # torn
    assert merge_raw([one, one], target).sessions == 1
    assert RunStore(target).sessions() == [{"n": 2}, {"n": 0}, {"n": 1}]
    assert (target / "raw" / ("sessions.jsonl" + TORN_SUFFIX)).read_text() == '{"n": \n'


def test_merge_and_parse_a_dataset(capsys, tmp_path, records):
    one = _shard(tmp_path, "one", "node1-1of2", records[:48])
    two = _shard(tmp_path, "two", "node2-2of2", records[48:])
    code, err = _run(capsys, "merge", "--gpu", "h100", "--data-dir", tmp_path / "data", one, two)
    assert code == 0, err
    assert "2 files written (96 records), 0 already there" in err
    assert (tmp_path / "data" / "h100" / "measurements").is_dir() and "(96 runs)" in err


def test_merge_into_a_profile_output_rebuilds_its_tables(capsys, tmp_path, monkeypatch):
    calls = []

    def write_tables(out):  # stands in for seer.networks.profile_network's: the merge only has to call it
        calls.append(out)
        return types.SimpleNamespace(overall=out / "overall.csv", layers=out / "layers.csv", plots=[], steps=None,
                                     step_layers=None)

    monkeypatch.setattr("seer.networks.profile_network.write_tables", write_tables)
    sources = []
    for shard in (1, 2):
        raw = tmp_path / f"shard{shard}" / "raw"
        raw.mkdir(parents=True)
        for kind in ("layer_times", "pass_times"):
            (raw / f"{kind}-node-{shard}of2.jsonl").write_text(json.dumps({"model": "resnet50", "n": shard}) + "\n")
        sources.append(raw.parent)
    out = tmp_path / "out"
    code, err = _run(capsys, "merge", "--into", out, *sources)
    assert code == 0 and calls == [out] and "4 files written (4 records)" in err
    assert len(list((out / "raw").glob("*.jsonl"))) == 4
    code, err = _run(capsys, "merge", "--into", out, "--no-parse", *sources)
    assert code == 0 and calls == [out] and "0 files written (0 records), 4 already there" in err
    # A dataset of seer collect is not a profile output.
    dataset = _shard(tmp_path, "one", "a", [{"shape_id": "s1", "math": "fma", "algo": "GEMM"}])
    code, err = _run(capsys, "merge", "--into", out, dataset)
    assert code == 2 and ("holds timing records, which this target does not take (layer_times, pass_times, "
                          "step_times, step_layer_times)") in err
