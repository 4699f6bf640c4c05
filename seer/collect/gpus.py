"""Collection over every GPU of one host: one ``seer collect`` (or ``seer profile-network``)
process per GPU at a time. (``seer profile-network`` runs one process per GPU, which share
its job list instead of cutting it: :mod:`seer.collect.claims`.)

The grid is cut into ``shards_per_gpu`` times as many shards as there are GPUs
(``--shard i/n``, as a SLURM job array cuts it; fewer for a small grid: :func:`shards_per_gpu`);
each GPU takes the next shard from one
queue as soon as it is free, so a slower GPU or a longer shard holds no other back. Each
process is pinned to its GPU (``CUDA_VISIBLE_DEVICES``, numbered in PCI order as NVML
numbers them), writes its shard's own resumable files and runs its own worker, which
loses only the item in flight when it dies. A shard whose process fails goes back to the
queue once, for whichever GPU frees first; Ctrl-C interrupts every process (each ends its
item and logs its session; after 10 s it is killed). The tables are
built once, at the end, from everything recorded.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from seer.errors import EXIT_INTERRUPTED, EnvironmentProblem, InputError
from seer.progress import CollectionProgress

#: Shards per GPU: enough that the GPUs finish close together, few enough that each
#: process's start (imports, the plan, the device probe: seconds) stays small beside its work.
SHARDS_PER_GPU = 4
#: The fewest shapes a collection's shard gets while it has more than one per GPU. Each shard's
#: process spends about 16 s before and around its timings (Python's and PyTorch's imports, the
#: probe, its worker's first cuDNN calls: ``benchmarks/results/h200-collect-gpus/``), while a layer
#: takes about 0.2 s to time forward and 0.5 s backward; shards drawn evenly over a grid finish
#: within about 10% of each other, so a GPU gains little from a second shard of a short job. On
#: 1,700 forward layers, four shards per GPU (100 shapes each at least, the earlier rule) took
#: 128.6 s on four GPUs and 202.6 s on two, one shard per GPU 85.7 s and 161.1 s.
MIN_SHAPES_PER_SHARD = 1000
#: Times a shard is started before its failure is reported instead of retried.
ATTEMPTS = 2


def shards_per_gpu(shapes: int, gpus: int) -> int:
    """Shards per GPU for a collection of ``shapes`` shapes over ``gpus`` GPUs: :data:`SHARDS_PER_GPU`,
    fewer where shards would hold under :data:`MIN_SHAPES_PER_SHARD` shapes, and at least one."""
    return max(1, min(SHARDS_PER_GPU, shapes // max(1, gpus * MIN_SHAPES_PER_SHARD)))


def parse_gpus(text: str) -> list[str]:
    """``--gpus``: ``all`` (every visible GPU) or comma-separated device numbers, each once."""
    if text.strip().lower() == "all":
        return visible_gpus()
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus) or len(set(gpus)) != len(gpus):
        raise InputError(f"--gpus takes all or distinct device numbers such as 0,1,3; got {text!r}", field="gpus")
    return gpus


def visible_gpus() -> list[str]:
    """The GPUs this process may use: those ``CUDA_VISIBLE_DEVICES`` lists, else every GPU NVML sees."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        gpus = [g.strip() for g in listed.split(",") if g.strip()]
        if not gpus:
            raise EnvironmentProblem("CUDA_VISIBLE_DEVICES lists no GPU")
        return gpus
    try:
        import pynvml
    except ImportError:
        raise EnvironmentProblem("--gpus all counts the GPUs with NVML: install the gpu extra "
                                 "(nvidia-ml-py), or name them: --gpus 0,1") from None
    try:
        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        raise EnvironmentProblem(f"NVML cannot count the GPUs: {exc}") from None
    if not count:
        raise EnvironmentProblem("NVML sees no GPU")
    return [str(i) for i in range(count)]


@dataclass
class ShardOutcome:
    """What became of one shard: the GPU of its last attempt, its exit status, its attempts."""

    shard: int
    gpu: str
    returncode: int
    attempts: int
    log_tail: str = ""


@dataclass
class _Running:
    shard: int
    process: object
    log: Path


def collect_on_gpus(command: Callable[[int, int, float | None], Sequence[str]], gpus: Sequence[str],
                    folder: Path, console: Console, shards_per_gpu: int = SHARDS_PER_GPU,
                    stop_after_s: float | None = None, poll_s: float = 0.2) -> list[ShardOutcome]:
    """Run ``command(shard, shards, minutes_left)`` once per shard of ``len(gpus) *
    shards_per_gpu``, each on the next free GPU of ``gpus``, with its output in ``folder``;
    every shard's outcome, in shard order. ``stop_after_s``: no shard starts after that
    many seconds, and each is told the minutes left. Ctrl-C stops every process and
    raises KeyboardInterrupt once they are gone."""
    from seer.collect import children  # here: every `seer` command reads the shard rule above, none other needs this

    total = len(gpus) * shards_per_gpu
    queue, attempts = deque(range(1, total + 1)), {}
    free, running, outcomes = list(gpus), {}, {}
    deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
    try:
        with CollectionProgress("shards", total, console, unit="shards") as progress:
            while queue or running:
                left = None if deadline is None else deadline - time.monotonic()
                while queue and free and (left is None or left > 0):
                    shard, gpu = queue.popleft(), free.pop(0)
                    attempts[shard] = attempts.get(shard, 0) + 1
                    log = folder / f"shard-{shard}of{total}-try{attempts[shard]}.log"
                    minutes = None if left is None else left / 60
                    with open(log, "w") as handle:
                        process = children.start(command(shard, total, minutes), handle,
                                                 env={"CUDA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
                    running[gpu] = _Running(shard, process, log)
                    progress.note(f"GPU {gpu}: shard {shard}")
                if left is not None and left <= 0 and not running:
                    break  # out of time: the shards not started stay to do
                for gpu, run in list(running.items()):
                    code = run.process.poll()
                    if code is None:
                        continue
                    del running[gpu]
                    free.append(gpu)
                    if code == EXIT_INTERRUPTED:
                        raise KeyboardInterrupt
                    if code != 0 and attempts[run.shard] < ATTEMPTS:
                        console.log(f"shard {run.shard}/{total} failed on GPU {gpu} (exit {code}); "
                                    f"queued again:\n{children.tail(run.log, 5)}")
                        queue.append(run.shard)
                        continue
                    outcomes[run.shard] = ShardOutcome(run.shard, gpu, code, attempts[run.shard],
                                                       "" if code == 0 else children.tail(run.log))
                    progress.advance()
                time.sleep(poll_s)
    except KeyboardInterrupt:
        _interrupt([run.process for run in running.values()])
        raise
    return [outcomes[s] for s in sorted(outcomes)]


def _interrupt(processes: list, grace_s: float = 10.0) -> None:
    """Ctrl-C to each process's group (it finishes its item and logs its session, as a
    ``seer collect`` interrupted at a terminal does), then, after ``grace_s``, a kill."""
    from seer.collect import children

    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not all(children.has_exited(p) for p in processes):
        time.sleep(0.1)
    for process in processes:
        children.stop(process)


def shard_command(argv: Sequence[str], finish: Sequence[str] = ("--no-parse",),
                  stop_option: str | None = "--stop-after",
                  shard_option: str = "--shard") -> Callable[[int, int, float | None], list[str]]:
    """The command of one shard: ``argv`` (the user's ``seer collect``, or another command that
    takes ``--shard``, without ``--gpus``, ``--shard``, ``stop_option`` and the ``finish``
    flags) with the shard as ``shard_option`` gives it, the minutes left where the command
    takes ``stop_option``, and the ``finish`` flags (``--no-parse``: the tables are built
    once, at the end)."""
    options = {"--gpus": True, "--shard": True, shard_option: True, **{flag: False for flag in finish}}
    if stop_option:
        options[stop_option] = True
    kept = _without_options(list(argv), options)

    def command(shard: int, shards: int, minutes: float | None) -> list[str]:
        return [sys.executable, "-m", "seer", *kept, shard_option, f"{shard}/{shards}", *finish,
                *(() if minutes is None or not stop_option else (stop_option, f"{minutes:.3f}"))]
    return command


def _without_options(argv: list[str], options: dict[str, bool]) -> list[str]:
    """``argv`` without ``options`` (name -> whether it takes a value, as ``--x v`` or ``--x=v``)."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in options:
            skip = options[name] and "=" not in token
            continue
        out.append(token)
    return out
