"""Processes of one host sharing a job list (seer.collect.claims): each job runs once, a job
whose process died is taken again, and not for ever; profile-network's use of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from seer.collect.claims import ATTEMPTS, JobClaims

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks")


def test_a_job_is_run_by_one_process_and_never_again_once_done(tmp_path):
    first, second = JobClaims(tmp_path), JobClaims(tmp_path)  # two open files: flock tells them apart
    assert first.take("resnet50 fma") and not second.take("resnet50 fma")
    assert second.take("vgg16 fma")
    first.finish("resnet50 fma")
    assert not second.take("resnet50 fma")  # done
    assert not JobClaims(tmp_path).take("resnet50 fma")


def test_a_job_left_by_a_dead_process_is_taken_again_but_not_for_ever(tmp_path):
    assert ATTEMPTS == 2
    dying = JobClaims(tmp_path)
    assert dying.take("densenet121 fma")
    dying.close()  # as the kernel does when the process dies
    retry = JobClaims(tmp_path)
    assert retry.take("densenet121 fma")
    retry.close()
    assert not JobClaims(tmp_path).take("densenet121 fma")  # it killed two processes: left alone


def test_a_claim_of_a_process_killed_outright_is_released(tmp_path):
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; from seer.collect.claims import JobClaims; "
                              f"c = JobClaims({str(tmp_path)!r}); assert c.take('job'); print('taken', flush=True); "
                              "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "taken"
        assert not JobClaims(tmp_path).take("job")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.monotonic() + 5
        while not JobClaims(tmp_path).take("job"):
            assert time.monotonic() < deadline, "the dead process's claim was not released"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()


def _profiler(out, ran):
    """A NetworkProfiler without a GPU: the bookkeeping of run(), each job noted instead of timed."""
    from seer.collect.store import RunStore
    from seer.networks.profile_network import KINDS, NetworkProfiler, ProfileOptions

    profiler = NetworkProfiler.__new__(NetworkProfiler)
    profiler.options = ProfileOptions(out_dir=out)
    profiler.store = RunStore(out, tag="t", kinds=KINDS)
    profiler.tracer = None
    profiler.progress = lambda message: None
    profiler._run_job = lambda job, policies: ran.append(job.network) or len(policies)
    return profiler


def test_profilers_sharing_claims_run_each_job_once(tmp_path):
    from seer.networks.profile_network import plan_jobs

    jobs = plan_jobs(["resnet50", "vgg16", "mobilenet_v2"], [(1, 3, 224, 224)], ["fma"], ["seer", "heuristic"])
    busy = JobClaims(tmp_path / "claims")
    assert busy.take(jobs[0].key)  # another process is in the middle of resnet50
    ran = []
    assert _profiler(tmp_path, ran).run(jobs, claims=JobClaims(tmp_path / "claims")) == 4
    assert ran == ["vgg16", "mobilenet_v2"]
    busy.close()  # that process died: its job goes to the next process that looks
    ran.clear()
    assert _profiler(tmp_path, ran).run(jobs, claims=JobClaims(tmp_path / "claims")) == 2
    assert ran == ["resnet50"]


def test_profile_network_on_gpus_runs_one_worker_per_gpu_sharing_claims(tmp_path, monkeypatch):
    import seer.cli
    from seer.cli import main

    seen = {}

    def on_gpus(gpus_text, command, saved, stop_after_s=None, shapes=None, per_gpu=None):  # no GPU here
        seen.update(gpus=gpus_text, per_gpu=per_gpu, commands=[command(i, 2, None) for i in (1, 2)])
        return 0

    monkeypatch.setattr(seer.cli, "_shards_on_gpus", on_gpus)
    assert main(["profile-network", "resnet18", "--input", "1x3x32x32", "--out", str(tmp_path / "o"),
                 "--gpus", "0,1", "--no-tables"]) == 0
    assert seen["per_gpu"] == 1
    first, second = seen["commands"]
    assert "--gpus" not in first and "--shard" not in first
    assert first[first.index("--worker") + 1] == "1/2" and second[second.index("--worker") + 1] == "2/2"
    assert first[first.index("--claims") + 1] == second[second.index("--claims") + 1]


@pytest.mark.parametrize("argv, words", [
    (["--claims", "c"], "--claims and --worker go together"),
    (["--worker", "1/2"], "--claims and --worker go together"),
    (["--worker", "3/2", "--claims", "c"], "--worker 3/2: need 1 <= i <= n"),
    (["--gpus", "0,1", "--worker", "1/2", "--claims", "c"], "leave out --claims"),
])
def test_claims_mistakes_are_one_line(capsys, tmp_path, argv, words):
    from seer.cli import main

    assert main(["profile-network", "resnet18", "--input", "1x3x32x32", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_claims_folder_that_cannot_be_made_is_one_sentence(tmp_path):
    from seer.errors import EnvironmentProblem

    (tmp_path / "file").write_text("")
    with pytest.raises(EnvironmentProblem, match="cannot make the job claims' folder"):
        JobClaims(tmp_path / "file" / "claims")
