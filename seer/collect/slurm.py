"""SLURM job arrays: a command's work split into shards, one per array task.

``--slurm FILE`` on a command that takes ``--shard i/n`` writes a batch script instead of
doing the work: ``sbatch FILE`` then runs the same command once per array task, task i of
n on shard i/n. Array task ids run from 1, as seer's shards do. The shard count is written
into the script rather than read from ``SLURM_ARRAY_TASK_COUNT``: a task submitted again
on its own (``sbatch --array=3 FILE``) must still run shard 3 of n, not of 1.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Sequence

from seer.errors import InputError

# seer.output (numpy, pandas) is imported where a script is written, not here: every command's
# parser adds the --slurm options, and building it must not load the prediction stack.

#: Options that shape the job array, not the command each task runs; ``--shard`` is set per task.
SLURM_OPTIONS = ("--slurm", "--slurm-tasks", "--slurm-partition", "--slurm-constraint", "--slurm-time",
                 "--slurm-cpus", "--slurm-logs")
SHARD_OPTION = "--shard"
DEFAULT_TASKS = 4
DEFAULT_TIME = "02:00:00"
#: ``--time`` formats sbatch takes: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|infinite|unlimited", re.IGNORECASE)
#: What a partition, constraint or job name may hold: a space or quote would end or split
#: the #SBATCH line (constraints keep sbatch's operators: & | [ ] * , and parentheses).
_DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9_.,:@+=&|\[\]*()!-]+")


def add_slurm_options(parser) -> None:
    """The ``--slurm`` options of a command that takes ``--shard``."""
    group = parser.add_argument_group("SLURM job array", "write a batch script whose array tasks each run "
                                      "this command on one shard, instead of running it")
    group.add_argument("--slurm", metavar="FILE", help="write the script here (- for standard output), "
                                                       "run nothing; submit it with sbatch FILE")
    group.add_argument("--slurm-tasks", type=int, default=DEFAULT_TASKS, metavar="N",
                       help=f"array tasks, one shard each (default {DEFAULT_TASKS})")
    group.add_argument("--slurm-partition", metavar="NAME", help="partition to run in (default: the cluster's)")
    group.add_argument("--slurm-constraint", metavar="FEATURES", help="node features a task needs, e.g. h100")
    group.add_argument("--slurm-time", default=DEFAULT_TIME, metavar="TIME",
                       help=f"time limit of each task: MM, HH:MM:SS, D-HH:MM, ... (default {DEFAULT_TIME})")
    group.add_argument("--slurm-cpus", type=int, metavar="N", help="CPU cores per task (default: the cluster's)")
    group.add_argument("--slurm-logs", type=Path, metavar="DIR",
                       help="folder of the tasks' logs, JOBNAME-ARRAYJOB_TASK.out (default: the current folder)")


def strip_slurm_options(argv: Sequence[str]) -> list[str]:
    """``argv`` without the ``--slurm`` options and ``--shard`` (each with its value).

    Takes the forms argparse took: ``--opt VALUE``, ``--opt=VALUE`` and unambiguous
    abbreviations (``--slurm-ta 8``); everything after ``--`` is kept as it is.
    """
    removed = (*SLURM_OPTIONS, SHARD_OPTION)
    out: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            out.append(token)
            out.extend(tokens)
            break
        name, equals, _ = token.partition("=")
        # An exact name wins; otherwise argparse took only a prefix that named one option.
        matches = [o for o in removed if o == name] or [o for o in removed if len(name) > 2 and o.startswith(name)]
        if name.startswith("--") and len(matches) == 1:
            if not equals:
                next(tokens, None)  # its value
            continue
        out.append(token)
    return out


def check_time(text: str) -> str:
    """``text`` if sbatch takes it as ``--time``; else an InputError."""
    if not _TIME.fullmatch(text):
        raise InputError(f"not a SLURM time limit: {text!r}; give MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                         "D-HH:MM:SS", field="slurm-time")
    return text


def _directive_value(text: str, field: str) -> str:
    if not _DIRECTIVE_VALUE.fullmatch(text):
        raise InputError(f"{text!r} has a character an #SBATCH line cannot hold (a space, quote, ...)", field=field)
    return text


def _directive_path(path: Path, field: str) -> str:
    text = str(path)
    if any(c in text for c in '"\n\r'):
        raise InputError("a quote or line break cannot stand in an #SBATCH line", path=text, field=field)
    # sbatch reads a double-quoted value of a directive as one argument.
    return f'"{text}"' if any(c.isspace() for c in text) else text


def job_array_script(argv: Sequence[str], *, tasks: int = DEFAULT_TASKS, partition: str | None = None,
                     constraint: str | None = None, time: str = DEFAULT_TIME, gpus_per_task: int = 1,
                     cpus_per_task: int | None = None, job_name: str = "seer", workdir: str | Path | None = None,
                     log_dir: str | Path | None = None, python: str = sys.executable) -> str:
    """A bash sbatch script: an array of ``tasks`` tasks, task i running ``python -m seer
    ARGV --shard i/tasks`` in ``workdir`` (default: the current folder).

    ``argv`` is the command after ``seer`` (``collect --gpu h100 ...``), without ``--shard``
    and the ``--slurm`` options (:func:`strip_slurm_options`). Logs go to
    ``log_dir/JOB_NAME-ARRAYJOB_TASK.out`` (default: ``workdir``).
    """
    if tasks < 1:
        raise InputError(f"must be at least 1, got {tasks}", field="slurm-tasks")
    if gpus_per_task < 0:
        raise InputError(f"must be >= 0, got {gpus_per_task}", field="slurm-gpus")
    if cpus_per_task is not None and cpus_per_task < 1:
        raise InputError(f"must be at least 1, got {cpus_per_task}", field="slurm-cpus")
    check_time(time)
    # Absolute, so that neither sbatch's folder nor the node's matter; relative paths in argv
    # then mean what they meant here.
    workdir = Path(os.path.abspath(workdir if workdir is not None else Path.cwd()))
    log_dir = workdir if log_dir is None else Path(os.path.abspath(workdir / log_dir))
    lines = ["#!/bin/bash",
             f"# seer {' '.join(argv[:1])} as a SLURM job array: task i of {tasks} runs shard i/{tasks}.",
             "# Submit with sbatch; a failed task can be run again alone: sbatch --array=I THIS_FILE",
             f"#SBATCH --job-name={_directive_value(job_name, 'slurm-job-name')}",
             f"#SBATCH --array=1-{tasks}",
             "#SBATCH --ntasks=1"]
    if partition:
        lines.append(f"#SBATCH --partition={_directive_value(partition, 'slurm-partition')}")
    if constraint:
        lines.append(f"#SBATCH --constraint={_directive_value(constraint, 'slurm-constraint')}")
    if gpus_per_task:
        lines.append(f"#SBATCH --gres=gpu:{gpus_per_task}")
    if cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={cpus_per_task}")
    lines += [f"#SBATCH --time={time}",
              # %A: the array's job id, %a: the task id.
              f"#SBATCH --output={_directive_path(log_dir / f'{job_name}-%A_%a.out', 'slurm-logs')}",
              "",
              "set -euo pipefail",
              f"cd {shlex.quote(str(workdir))}",
              # exec: SLURM's SIGTERM at the time limit reaches seer, which stops cleanly.
              f"exec {shlex.join([python, '-m', 'seer', *argv])} "
              f'{SHARD_OPTION} "${{SLURM_ARRAY_TASK_ID:?not a job array task: submit this with sbatch}}/{tasks}"',
              ""]
    return "\n".join(lines)


def write_slurm_script(args, console, *, job_name: str, work: int, unit: str, extra: Sequence[str] = ()) -> int:
    """Write the script of a command parsed with :func:`add_slurm_options` (``args.argv``
    its arguments, ``extra`` added to each task's) to ``args.slurm``, executable; log where
    it went. ``work`` counts the command's shardable items (``unit`` names them): more
    tasks than items is an InputError. Returns exit code 0."""
    if args.slurm_tasks > work:
        raise InputError(f"{args.slurm_tasks} tasks for {work} {unit} would leave some with none",
                         field="slurm-tasks")
    log_dir = args.slurm_logs
    if log_dir is not None:
        try:  # sbatch does not make it, and a task without it fails with no log
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot make this folder: {exc.strerror}", path=log_dir, field="slurm-logs") from None
    text = job_array_script([*strip_slurm_options(args.argv), *extra], tasks=args.slurm_tasks, partition=args.slurm_partition,
                            constraint=args.slurm_constraint, time=args.slurm_time, cpus_per_task=args.slurm_cpus,
                            job_name=job_name, log_dir=log_dir)
    from seer.output import STDOUT, AtomicOutput

    if args.slurm == STDOUT:
        sys.stdout.write(text)
        return 0
    path = Path(args.slurm)
    with AtomicOutput(path) as handle:
        handle.write(text)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)  # executable, as a script is
    console.log(f"wrote {path}: a job array of {args.slurm_tasks} tasks, one shard each; submit it with "
                f"`sbatch {shlex.quote(str(path))}`")
    return 0
