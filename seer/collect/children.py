"""Child processes of a collection: start one, follow its events, and never leave one behind.

The orchestrator runs every GPU call in a child (the worker, wrapped by ncu when profiling)
so that a crash there cannot take the collection down. :func:`run_child` starts one, hands
over each event it appends to its results file (:class:`seer.collect.protocol.EventReader`),
kills it when it stops reporting, and says how it ended (:class:`ChildOutcome`).

No child may outlive the orchestrator and keep the GPU busy. Each child gets its own process
group, which is killed whenever the orchestrator is done with it (normal exit, timeout,
Ctrl-C), and on Linux a parent-death signal, for when the orchestrator itself is killed
and can clean nothing up. The worker arms that signal again for itself at start-up
(:func:`die_with_parent`), since under ncu its parent is one of ncu's processes, not the
orchestrator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Sequence

from seer.collect import protocol
from seer.collect.protocol import EventReader, event_key

#: Names the orchestrator's pid in a child's environment, so that a worker started after
#: the orchestrator died (its grandchild under ncu) can tell and exit.
ORCHESTRATOR_PID = "SEER_ORCHESTRATOR_PID"
#: Exit status of a worker that found its orchestrator gone at start-up.
EXIT_ORPHANED = 1
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def worker_command() -> list[str]:
    """How to start the GPU worker: the module of the installed (or importable) package, with
    the orchestrator's own interpreter."""
    return [sys.executable, "-m", "seer.gpu.worker"]


def child_env() -> dict[str, str]:
    """The environment of a child: the orchestrator's, output unbuffered, our pid named."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env[ORCHESTRATOR_PID] = str(os.getpid())
    return env


# -- never outliving the orchestrator -----------------------------------------------------
@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None where there is none (not Linux). Resolved before any fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent exits; False where it cannot.

    The setting survives exec (not a set-uid one), so a child armed before exec keeps it.
    """
    prctl = _prctl()
    if prctl is None:
        return False
    # prctl is variadic and reads its extra arguments as unsigned longs: pass them so.
    return prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), ctypes.c_ulong(0), ctypes.c_ulong(0),
                 ctypes.c_ulong(0)) == 0


def die_with_parent() -> None:
    """Arm the parent-death signal for this process (the worker, at start-up); exit if too late.

    A parent that died before the signal was armed sends none, so look again afterwards:
    a changed parent, or an orchestrator that is gone, means nobody is waiting for this
    process's results. Under ncu the parent is one of ncu's own processes, which need not
    die with the orchestrator (ncu's launcher only is the orchestrator's child), so there
    the orchestrator is also watched directly. A process not started by an orchestrator
    (none named in its environment: a worker run by hand) is left as it is.
    """
    orchestrator = os.environ.get(ORCHESTRATOR_PID, "")
    if not orchestrator.isdigit():
        return
    parent = os.getppid()
    if not set_parent_death_signal():
        return
    if os.getppid() != parent or not process_running(int(orchestrator)):
        os._exit(EXIT_ORPHANED)
    if parent != int(orchestrator):
        threading.Thread(target=_exit_when_gone, args=(int(orchestrator),), name="orchestrator-watch",
                         daemon=True).start()


#: How often a worker under ncu looks whether its orchestrator still exists.
WATCH_INTERVAL_S = 0.25


def _exit_when_gone(pid: int) -> None:
    while process_running(pid):
        time.sleep(WATCH_INTERVAL_S)
    os._exit(EXIT_ORPHANED)


def process_running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # without /proc, existing is all we can tell
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def start(command: Sequence[str], output: IO, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a child in its own process group, armed to die with this process; ``env`` adds
    to (or overrides) :func:`child_env`.

    Its own group keeps a terminal's Ctrl-C away from it (the orchestrator decides what
    happens to it) and lets :func:`stop` reach everything it started.
    """
    orchestrator = os.getpid()
    _prctl()  # load libc here, not in the forked child

    def arm() -> None:  # runs in the child, between fork and exec
        if set_parent_death_signal() and os.getppid() != orchestrator:
            os._exit(EXIT_ORPHANED)

    return subprocess.Popen(list(command), stdout=output, stderr=subprocess.STDOUT, env=child_env() | (env or {}),
                            process_group=0, preexec_fn=arm)


def stop(proc: subprocess.Popen) -> None:
    """Kill a child's whole process group (what it started too), then reap the child.

    Called with the child unreaped where possible: its pid keeps the group id from being
    reused by an unrelated process.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is empty already
    proc.wait()


def has_exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it (see :func:`stop`)."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def run_to_end(command: Sequence[str], log: Path, timeout_s: float) -> int:
    """Run a child to its end with its output in ``log``; its exit status.

    Raises subprocess.TimeoutExpired after ``timeout_s`` seconds; the child is stopped
    in every case.
    """
    with open(log, "w") as handle:
        proc = start(command, handle)
    try:
        proc.wait(timeout=timeout_s)
    finally:
        stop(proc)
    return proc.returncode


# -- one child over a plan ----------------------------------------------------------------
@dataclass
class Deadline:
    """When a collection stops cleanly, as a ``time.monotonic()`` value; None for never."""

    at: float | None = None

    @classmethod
    def after(cls, seconds: float | None) -> "Deadline":
        return cls(None if seconds is None else time.monotonic() + seconds)

    @property
    def passed(self) -> bool:
        return self.at is not None and time.monotonic() > self.at


@dataclass
class ChildOutcome:
    """How a child ended, as far as the orchestrator can tell."""

    returncode: int | None
    finished: bool  # the child said "done"
    current: tuple | None  # key of an item started but never reported
    log_tail: str
    timed_out: bool = False

    def describe(self) -> str:
        if self.timed_out:
            return "no result within the item timeout; worker killed"
        rc = self.returncode
        if rc is not None and rc < 0:
            try:
                how = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"killed by signal {-rc}"
        else:
            how = f"exited with code {rc}"
        tail = " | ".join(self.log_tail.strip().splitlines()[-3:])
        return f"worker {how}" + (f": {tail}" if tail else "")


def run_child(command: Sequence[str], results: Path, log: Path, on_event: Callable[[dict], None],
              item_timeout_s: float, first_timeout_s: float = 600.0,
              stop_file: Path | None = None, deadline: Deadline | None = None) -> ChildOutcome:
    """Start a child, hand each event it appends to ``results`` to ``on_event``, wait for it.

    The child is killed if it reports nothing for ``item_timeout_s`` seconds
    (``first_timeout_s`` before its first event: start-up, ncu and library loading).
    Once ``deadline`` passes, ``stop_file`` is created, which asks the child to finish its
    current shape and exit normally. Whatever happens, the child and everything it started
    are gone when this returns or raises.
    """
    results.write_text("")
    if stop_file is not None and stop_file.exists():
        stop_file.unlink()
    with open(log, "w") as log_handle:
        proc = start(command, log_handle)
    reader = EventReader(results)
    finished, current, timed_out = False, None, False
    last_event = time.monotonic()
    seen_any = False
    try:
        while True:
            exited = has_exited(proc)
            for event in reader.new_events():
                last_event, seen_any = time.monotonic(), True
                kind = event.get(protocol.EVENT)
                if kind == protocol.START:
                    current = event_key(event)
                elif kind == protocol.DONE:
                    finished = True
                else:
                    current = None
                    on_event(event)
            if exited:
                break
            if deadline is not None and deadline.passed and stop_file is not None \
                    and not stop_file.exists():
                stop_file.touch()
            limit = item_timeout_s if seen_any else first_timeout_s
            if time.monotonic() - last_event > limit:
                timed_out = True
                break
            time.sleep(0.05)
    finally:
        stop(proc)
    return ChildOutcome(proc.returncode, finished, current, tail(log), timed_out)


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a child's log, or "" if it wrote none."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""
