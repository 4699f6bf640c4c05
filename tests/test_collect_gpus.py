"""``seer collect --gpus``: the shards over a host's GPUs, each process pinned to one, a failed
shard taken up again, Ctrl-C stopping all. The processes here stand in for ``seer collect``
(which needs a GPU): each records its shard and the GPU it was given."""

from __future__ import annotations

import sys

import pytest
from rich.console import Console

from seer.cli import main
from seer.collect.gpus import (ATTEMPTS, MIN_SHAPES_PER_SHARD, SHARDS_PER_GPU, collect_on_gpus, parse_gpus,
                              shard_command, shards_per_gpu)
from seer.errors import EXIT_INTERRUPTED, InputError


def test_gpus_are_all_the_visible_ones_or_distinct_numbers(monkeypatch):
    assert parse_gpus("0,1, 3") == ["0", "1", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert parse_gpus("all") == ["2", "3"]
    for bad in ("", "0,0", "gpu0", "1,-1"):
        with pytest.raises(InputError, match="--gpus takes all or distinct device numbers"):
            parse_gpus(bad)


def test_each_shard_runs_the_users_command_with_its_shard():
    command = shard_command(["collect", "--gpu", "h100", "--gpus", "0,1", "--shard", "1/1", "--stop-after=5",
                             "--no-parse", "--grid", "seer"])
    assert command(2, 8, None)[1:] == ["-m", "seer", "collect", "--gpu", "h100", "--grid", "seer", "--shard", "2/8",
                                       "--no-parse"]
    assert command(3, 8, 1.5)[-2:] == ["--stop-after", "1.500"]


def test_a_small_grid_gets_fewer_and_longer_shards():
    """Each shard's process pays seconds to start, so a shard gets at least MIN_SHAPES_PER_SHARD
    shapes while the GPUs have more than one shard each; a big grid gets SHARDS_PER_GPU per GPU."""
    assert shards_per_gpu(16000, 4) == SHARDS_PER_GPU == 4 and shards_per_gpu(8000, 4) == 2
    assert shards_per_gpu(1700, 4) == shards_per_gpu(1700, 2) == shards_per_gpu(1700, 1) == 1
    assert shards_per_gpu(2000, 1) == 2
    assert shards_per_gpu(5, 4) == 1 and shards_per_gpu(0, 1) == 1
    for shapes in (1, 150, 399, 400, 1000, 1999, 2000, 10**6):
        for gpus in (1, 2, 4, 8):
            per_gpu = shards_per_gpu(shapes, gpus)
            assert 1 <= per_gpu <= SHARDS_PER_GPU
            assert per_gpu == 1 or shapes / (gpus * per_gpu) >= MIN_SHAPES_PER_SHARD


def test_seer_collect_cuts_its_grid_by_its_size(tmp_path, monkeypatch):
    import seer.collect.gpus

    seen = []

    def on_gpus(command, gpus, folder, console, shards_per_gpu, stop_after_s=None):  # no processes
        seen.append((gpus, shards_per_gpu, command(1, len(gpus) * shards_per_gpu, None)))
        return []

    monkeypatch.setattr(seer.collect.gpus, "collect_on_gpus", on_gpus)
    for limit, per_gpu in (("250", 1), ("4000", 2)):
        assert main(["collect", "--gpu", "h100", "--data-dir", str(tmp_path), "--grid", "random", "--gpus", "0,1",
                     "--limit-shapes", limit, "--no-parse"]) == 0
        gpus, shards, command = seen[-1]
        assert gpus == ["0", "1"] and shards == per_gpu and command[-3:] == ["--shard", f"1/{2 * per_gpu}", "--no-parse"]


def _stand_in(record, fail_once=None, exit_code=3):
    """A command that appends 'shard gpu' to ``record`` and exits 0 (or ``exit_code`` the first
    time shard ``fail_once`` runs)."""
    script = ("import os, sys; shard = int(sys.argv[1]); gpu = os.environ['CUDA_VISIBLE_DEVICES']\n"
              f"marker = {str(record)!r} + f'.failed{{shard}}'\n"
              f"if shard == {fail_once!r} and not os.path.exists(marker):\n"
              "    open(marker, 'w').close(); sys.exit(" + str(exit_code) + ")\n"
              f"open({str(record)!r}, 'a').write(f'{{shard}} {{gpu}}\\n')\n")
    return lambda shard, shards, minutes: [sys.executable, "-c", script, str(shard), str(shards)]


def test_every_shard_runs_once_on_one_of_the_gpus_and_a_failed_one_is_taken_up_again(tmp_path):
    record = tmp_path / "ran.txt"
    outcomes = collect_on_gpus(_stand_in(record, fail_once=3), ["0", "1"], tmp_path, Console(stderr=True),
                               shards_per_gpu=3, poll_s=0.01)
    ran = [line.split() for line in record.read_text().splitlines()]
    assert sorted(int(shard) for shard, _ in ran) == list(range(1, 7))  # each shard once, done
    assert {gpu for _, gpu in ran} <= {"0", "1"}
    assert [o.returncode for o in outcomes] == [0] * 6 and outcomes[2].attempts == 2
    assert ATTEMPTS == 2


def test_a_shard_that_keeps_failing_is_reported_with_its_log(tmp_path):
    command = lambda shard, shards, minutes: [sys.executable, "-c", "import sys; print('no GPU here'); sys.exit(1)"]  # noqa: E731
    outcomes = collect_on_gpus(command, ["0"], tmp_path, Console(stderr=True), shards_per_gpu=2, poll_s=0.01)
    assert [(o.returncode, o.attempts) for o in outcomes] == [(1, ATTEMPTS)] * 2
    assert "no GPU here" in outcomes[0].log_tail


def test_an_interrupted_shard_stops_the_others(tmp_path):
    slow = tmp_path / "slow.txt"
    def command(shard, shards, minutes):
        if shard == 1:
            return [sys.executable, "-c", f"import sys; sys.exit({EXIT_INTERRUPTED})"]
        return [sys.executable, "-c", f"import time; time.sleep(30); open({str(slow)!r}, 'w')"]
    with pytest.raises(KeyboardInterrupt):
        collect_on_gpus(command, ["0", "1"], tmp_path, Console(stderr=True), shards_per_gpu=1, poll_s=0.01)
    assert not slow.exists()  # the other shard was stopped, not left to finish


def test_no_shard_starts_after_the_time_limit(tmp_path):
    record = tmp_path / "ran.txt"
    assert collect_on_gpus(_stand_in(record), ["0"], tmp_path, Console(stderr=True), stop_after_s=0) == []
    assert not record.exists()


@pytest.mark.parametrize("argv, words", [
    (["--gpus", "0,1", "--shard", "2/3"], "leave out --shard"),
    (["--gpus", "0,0"], "distinct device numbers"),
    (["--gpus", "0,1", "--slurm", "job.sh"], "give one"),
])
def test_gpus_mistakes_are_one_line(capsys, argv, words):
    assert main(["collect", "--gpu", "h100", "--grid", "seer", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_profile_network_shards_end_without_tables_and_take_no_time_limit():
    command = shard_command(["profile-network", "resnet50", "--input", "1x3x224x224", "--out", "o", "--gpus", "all",
                             "--no-tables"], finish=("--no-tables",), stop_option=None)
    assert command(1, 8, 2.0)[1:] == ["-m", "seer", "profile-network", "resnet50", "--input", "1x3x224x224",
                                      "--out", "o", "--shard", "1/8", "--no-tables"]


@pytest.mark.parametrize("argv, words", [
    (["--gpus", "0,1", "--shard", "2/3"], "leave out --shard"),
    (["--gpus", "0,1", "--tables-only"], "leave out --tables-only"),
    (["--gpus", "0,0"], "distinct device numbers"),
    (["--gpus", "0,1", "--slurm", "job.sh"], "give one"),
])
def test_profile_network_gpus_mistakes_are_one_line(capsys, tmp_path, argv, words):
    assert main(["profile-network", "resnet18", "--input", "1x3x32x32", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_shards_that_the_time_limit_ended_are_named(tmp_path, capsys, monkeypatch):
    """A shard that --stop-after ended exits 0 like a finished one; its session says so, and the
    collection over the GPUs names it (sessions from earlier runs do not count)."""
    import seer.cli
    from seer.collect.orchestrate import now
    from seer.collect.store import RunStore

    store = RunStore(tmp_path / "h100")
    store.log_session({"shard": "3/4", "started_at": "2020-01-01T00:00:00+00:00", "stopped_at_time_limit": True})

    def shards(gpus_text, command, saved, stop_after_s=None, shapes=None):  # stands in for the processes on the GPUs
        for shard, stopped in (("1/4", False), ("2/4", True), ("4/4", True)):
            store.log_session({"shard": shard, "started_at": now(), "stopped_at_time_limit": stopped})
        return 0

    monkeypatch.setattr(seer.cli, "_shards_on_gpus", shards)
    code = main(["collect", "--gpu", "h100", "--data-dir", str(tmp_path), "--grid", "quick", "--gpus", "0,1",
                 "--no-parse", "--stop-after", "1"])
    err = capsys.readouterr().err
    assert code == 0 and "shards 2/4, 4/4 stopped at the time limit" in err and "3/4" not in err, err


def test_the_sm_clock_is_read_from_the_gpu_the_process_runs_on_not_nvmls_first(monkeypatch):
    """Under --gpus a process pinned to the host's second GPU sees it as CUDA device 0, while NVML
    numbers every GPU of the host: the clock recorded beside each timing is its own GPU's."""
    import types

    from seer.gpu.worker import _sm_clock_reader

    clocks = {"first": 345, "second": 1980}  # the first GPU idles; this process's GPU runs
    nvml = types.SimpleNamespace(
        NVML_CLOCK_SM=0, nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: ["first", "second"][i],
        nvmlDeviceGetHandleByPciBusId=lambda bus: {"0000:1A:00.0": "first", "0000:2B:00.0": "second"}[bus],
        nvmlDeviceGetClockInfo=lambda handle, kind: clocks[handle])
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(
        pci_bus_id="0000:2B:00.0")))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert _sm_clock_reader()() == 1980
