"""SLURM job arrays: the script's text, its syntax, and what each task would run (no SLURM needed)."""

import os
import shutil
import subprocess
import sys

import pytest

from seer.cli import main
from seer.collect.slurm import check_time, job_array_script, strip_slurm_options
from seer.errors import InputError

ARGV = ["collect", "--gpu", "h100", "--grid", "my layers.txt", "--data-dir", "data"]


def _stub(tmp_path):
    """An executable that prints its arguments one per line, in place of the Python that runs seer."""
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    return stub


def _run_task(script, tmp_path, **env):
    path = tmp_path / "job.sh"
    path.write_text(script)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run(["bash", str(path)], env={**environment, **env}, capture_output=True, text=True,
                          timeout=30)


def test_the_script_is_an_array_of_shards(tmp_path):
    script = job_array_script(ARGV, tasks=8, partition="gpu", constraint="h100", time="1-12:00",
                              cpus_per_task=16, job_name="seer-collect-h100", workdir=tmp_path,
                              python="/opt/venv/bin/python")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("--array=1-8", "--partition=gpu", "--constraint=h100", "--gres=gpu:1", "--time=1-12:00",
                      "--cpus-per-task=16", "--job-name=seer-collect-h100",
                      f"--output={tmp_path}/seer-collect-h100-%A_%a.out"):
        assert f"#SBATCH {directive}" in lines
    assert "set -euo pipefail" in lines and f"cd {tmp_path}" in lines
    command = lines[-1]
    assert command.startswith("exec /opt/venv/bin/python -m seer collect --gpu h100 --grid 'my layers.txt' ")
    # The shard count is the script's own, whatever SLURM_ARRAY_TASK_COUNT says.
    assert command.endswith('--shard "${SLURM_ARRAY_TASK_ID:?not a job array task: submit this with sbatch}/8"')
    # sbatch stops reading directives at the first command.
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(lines) if line.startswith("#SBATCH"))


def test_options_left_out_are_not_written(tmp_path):
    script = job_array_script(ARGV, workdir=tmp_path, gpus_per_task=0)
    assert "--partition" not in script and "--constraint" not in script and "--gres" not in script
    assert "--cpus-per-task" not in script and "#SBATCH --array=1-4" in script and "--time=02:00:00" in script


def test_the_script_parses_and_runs_one_shard_per_task(tmp_path):
    script = job_array_script(ARGV, tasks=3, workdir=tmp_path / "work dir", python=str(_stub(tmp_path)))
    (tmp_path / "work dir").mkdir()
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    done = _run_task(script, tmp_path, SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_TASK_COUNT="3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["-m", "seer", *ARGV, "--shard", "2/3"]
    # Task 3 submitted again alone (sbatch --array=3) still runs shard 3 of 3.
    again = _run_task(script, tmp_path, SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_TASK_COUNT="1")
    assert again.stdout.splitlines()[-2:] == ["--shard", "3/3"]


def test_the_script_outside_slurm_says_so(tmp_path):
    done = _run_task(job_array_script(ARGV, workdir=tmp_path, python=str(_stub(tmp_path))), tmp_path)
    assert done.returncode != 0 and "submit this with sbatch" in done.stderr and not done.stdout


def test_a_log_folder_with_a_space_is_quoted(tmp_path):
    script = job_array_script(ARGV, workdir=tmp_path, log_dir="my logs", job_name="j")
    assert f'#SBATCH --output="{tmp_path}/my logs/j-%A_%a.out"' in script.splitlines()


@pytest.mark.parametrize("argv, kept", [
    (["collect", "--gpu", "h100", "--slurm", "job.sh", "--shard", "1/2", "--seed", "3"],
     ["collect", "--gpu", "h100", "--seed", "3"]),
    (["collect", "--slurm=job.sh", "--slurm-tasks", "8", "--slurm-partition=gpu", "--slurm-constraint", "h100",
      "--slurm-time", "10", "--slurm-cpus", "4", "--slurm-logs", "logs", "--shard=2/8", "--no-parse"],
     ["collect", "--no-parse"]),
    # Abbreviations argparse takes, and '-' (standard output) as a value.
    (["collect", "--slurm", "-", "--slurm-ta", "8", "--sha", "1/2", "--grid", "quick"],
     ["collect", "--grid", "quick"]),
])
def test_strip_slurm_options(argv, kept):
    assert strip_slurm_options(argv) == kept


@pytest.mark.parametrize("text", ["30", "30:00", "02:00:00", "1-0", "1-12:30", "2-00:00:00", "UNLIMITED"])
def test_slurm_times(text):
    assert check_time(text) == text


@pytest.mark.parametrize("text", ["2h", "1:2:3:4", "1-", "-1:00", "", "01:00 ", "1.5"])
def test_bad_slurm_times(text):
    with pytest.raises(InputError, match="not a SLURM time limit") as info:
        job_array_script(ARGV, time=text)
    assert info.value.field == "slurm-time"


@pytest.mark.parametrize("options, field", [
    ({"tasks": 0}, "slurm-tasks"),
    ({"partition": "gpu a"}, "slurm-partition"),
    ({"constraint": "h100\n#SBATCH --x"}, "slurm-constraint"),
    ({"cpus_per_task": 0}, "slurm-cpus"),
])
def test_bad_values_are_input_errors(options, field):
    with pytest.raises(InputError) as info:
        job_array_script(ARGV, **options)
    assert info.value.field == field


def test_collect_with_slurm_writes_the_script_and_runs_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["collect", "--gpu", "h100", "--grid", "quick", "--profile-shapes", "0", "--slurm", "job.sh",
                 "--slurm-tasks", "5", "--slurm-constraint", "h100", "--slurm-time", "8:00:00",
                 "--slurm-logs", "logs", "--shard", "1/9"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0 and "sbatch job.sh" in err
    script = (tmp_path / "job.sh").read_text()
    assert os.access(tmp_path / "job.sh", os.X_OK) and (tmp_path / "logs").is_dir()
    assert "#SBATCH --array=1-5" in script and "#SBATCH --constraint=h100" in script
    assert f"#SBATCH --output={tmp_path}/logs/seer-collect-h100-%A_%a.out" in script
    command = script.splitlines()[-1]
    # Each task leaves the tables to one `seer parse` after them all.
    assert f"{sys.executable} -m seer collect --gpu h100 --grid quick --profile-shapes 0 --no-parse --shard" in command
    assert "seer parse --gpu h100 --data-dir data" in err
    assert "1/9" not in command and "--slurm" not in command
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sh", "logs"]  # no dataset: nothing collected


def test_collect_with_slurm_to_standard_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["collect", "--gpu", "h100", "--grid", "quick", "--slurm", "-"]) == 0
    assert capsys.readouterr().out.startswith("#!/bin/bash\n") and not any(tmp_path.iterdir())


@pytest.mark.parametrize("argv, words", [
    (["--slurm-time", "2h"], "slurm-time: not a SLURM time limit"),
    (["--slurm-tasks", "21"], "slurm-tasks: 21 tasks for 20 shapes"),
    (["--gpu", "v200"], "Unknown GPU"),
])
def test_collect_with_slurm_checks_its_options_first(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    code = main(["collect", "--gpu", "h100", "--grid", "quick", "--slurm", "job.sh", *argv])
    assert code in (1, 2) and words in capsys.readouterr().err and not any(tmp_path.iterdir())


@pytest.mark.slurm
def test_sbatch_takes_the_script(tmp_path):
    """On a SLURM cluster: sbatch parses the script (--test-only submits nothing)."""
    path = tmp_path / "job.sh"
    path.write_text(job_array_script(["gpus"], tasks=2, workdir=tmp_path, gpus_per_task=0, time="5"))
    done = subprocess.run([shutil.which("sbatch"), "--test-only", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
