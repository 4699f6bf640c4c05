"""Run a collection: probe the GPU, time every item, profile the chosen shapes under ncu.

With ``census=True`` it instead asks cuDNN, for every shape, which algorithms it supports
and what workspace each needs (no kernel runs): labels for the models' first stage, cheap
enough to cover tens of thousands of shapes.

The orchestrator never touches CUDA itself. It starts the GPU worker as a child process
(wrapped by ncu when profiling), feeds it a plan file and reads the events it appends to
a results file, writing each finished record to the store at once. When a child dies or
hangs, the item it was on is recorded as an error and a fresh child takes the rest; when
the user presses Ctrl-C, everything finished is already on disk and a rerun resumes.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console

import seer
from seer import ncu as ncu_mod
from seer.collect.plan import (CENSUS_ITEM, CENSUS_KEY, RUN_KEY, ShapeWork, build_plan,
                               fits_in_memory, select_evenly, shard)
from seer.collect.progress import CollectionProgress
from seer.collect.store import RunStore, default_tag, profile_records, recorded_columns
from seer.errors import EnvironmentProblem
from seer.gpu.timing import MAX_SPREAD
from seer.gpus import GPUSpec, get_gpu_spec, match_device
from seer.grids import GridShape
from seer.metrics import (DEFAULT_MATH_ONLY_GROUPS, GROUP_COLUMNS, METRIC_SETS, METRICS,
                          ncu_metric_names)

#: ``--retry`` word that re-times successful runs whose repetitions spread too widely.
RETRY_UNSTABLE = "unstable"


def unstable_keys(timing, max_spread: float = MAX_SPREAD) -> set[tuple]:
    """Keys of successful runs whose interquartile range exceeds ``max_spread`` of the median
    (see :mod:`seer.gpu.timing`): what ``--retry unstable`` measures again."""
    if timing.empty or "time_ms_iqr" not in timing.columns:
        return set()
    ok = timing[timing["status"] == "ok"]
    wide = ok[ok["time_ms_iqr"] > max_spread * ok["time_ms"]]
    return set(wide[list(RUN_KEY)].itertuples(index=False, name=None))


@dataclass
class CollectOptions:
    """Everything ``seer collect`` was asked to do (see ``seer collect --help``)."""

    gpu: str
    shapes: list[GridShape]
    maths: list[str]
    algos: list[str]
    dataset_dir: Path
    shard_index: int = 1
    shard_count: int = 1
    profile_shapes: int | None = None  # None: every shape; 0: no profiling
    workspace_cap_bytes: int = 8 * 2**30
    budget_ms: float = 10.0
    min_reps: int = 5
    max_reps: int = 50
    min_burst_ms: float = 1.0
    item_timeout_s: float = 300.0
    ncu: str | None = None
    profile_chunk_items: int = 150
    max_profile_kernels: int = 256
    ncu_metric_set: str = "core"
    ncu_replay: str = "kernel"
    ncu_cache_control: str = "all"
    retry: tuple[str, ...] = ()
    seed: int = 0
    keep_ncu_csv: bool = False
    stop_after_s: float | None = None  # stop cleanly once this much time has passed
    census: bool = False  # only cuDNN's support and workspace answers; nothing runs
    argv: list[str] = field(default_factory=list)


#: Recorded with every session: rows are comparable only under the same protocol.
#: 1 = one call between two events, host work included (the first H100 collection);
#: 2 = bursts behind a spinning GPU (seer.gpu.timing).
TIMING_PROTOCOL = 2


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def worker_command() -> list[str]:
    """How to start the GPU worker: collectors/cudnn_worker.py in a checkout, else -m."""
    script = Path(seer.__file__).resolve().parents[1] / "collectors" / "cudnn_worker.py"
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "seer.gpu.worker"]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(seer.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- child processes ----------------------------------------------------------------------
@dataclass
class ChildOutcome:
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
              stop_file: Path | None = None, deadline: float | None = None) -> ChildOutcome:
    """Start a child, hand each event it appends to ``results`` to ``on_event``, wait for it.

    The child is killed if it reports nothing for ``item_timeout_s`` seconds
    (``first_timeout_s`` before its first event: start-up, ncu and library loading).
    Once ``deadline`` (a ``time.monotonic()`` value) passes, ``stop_file`` is created,
    which asks the child to finish its current shape and exit normally.
    """
    results.write_text("")
    if stop_file is not None and stop_file.exists():
        stop_file.unlink()
    with open(log, "w") as log_handle:
        proc = subprocess.Popen(list(command), stdout=log_handle, stderr=subprocess.STDOUT,
                                env=_child_env(), start_new_session=False)
    offset, buffer = 0, ""
    finished, current, timed_out = False, None, False
    last_event = time.monotonic()
    seen_any = False
    try:
        while True:
            exited = proc.poll() is not None
            with open(results) as handle:
                handle.seek(offset)
                chunk = handle.read()
                offset = handle.tell()
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                last_event, seen_any = time.monotonic(), True
                kind = event.get("event")
                if kind == "start":
                    current = tuple(event[k] for k in RUN_KEY)
                elif kind == "done":
                    finished = True
                else:
                    current = None
                    on_event(event)
            if exited:
                break
            if deadline is not None and stop_file is not None and time.monotonic() > deadline \
                    and not stop_file.exists():
                stop_file.touch()
            limit = item_timeout_s if seen_any else first_timeout_s
            if time.monotonic() - last_event > limit:
                timed_out = True
                proc.kill()
                proc.wait()
                break
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return ChildOutcome(proc.returncode, finished, current, _tail(log), timed_out)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


# -- probing ------------------------------------------------------------------------------
def probe_device(workdir: Path) -> dict:
    """Device facts from a worker child; EnvironmentProblem in one sentence if none."""
    out, log = workdir / "probe.json", workdir / "probe.log"
    with open(log, "w") as handle:
        try:
            subprocess.run([*worker_command(), "probe", "--out", str(out)], stdout=handle,
                           stderr=subprocess.STDOUT, env=_child_env(), timeout=300)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem("The GPU did not answer within 5 minutes (worker probe timed out).") from None
    if not out.exists():
        raise EnvironmentProblem(f"The GPU worker could not start: {' | '.join(_tail(log, 3).splitlines())}")
    info = json.loads(out.read_text())
    error = info.get("error")
    if error:
        if "No module named 'cupy'" in error:
            raise EnvironmentProblem("CuPy is not installed: collection needs a GPU host with "
                                     "`pip install -e .[gpu]`.")
        if "cuDNN" in error:
            raise EnvironmentProblem(error.split(": ", 1)[-1])
        raise EnvironmentProblem(f"No usable NVIDIA GPU found ({error}).")
    return info


def check_device(spec: GPUSpec, info: dict) -> None:
    """Stop with a clear sentence if the detected device is not the one named by --gpu."""
    name, sms = info["device_name"], info["sm_count"]
    other = match_device(name, sms)
    if other is not None and other.name == spec.name:
        return
    hint = f"; use --gpu {other.name}" if other else "; add a spec for it to seer/data/gpus.toml"
    raise EnvironmentProblem(
        f"--gpu {spec.name} means {spec.display_name} ({spec.sm_count} SMs), but this machine has "
        f"{name} ({sms} SMs){hint}. Nothing was collected.")


# -- timing -------------------------------------------------------------------------------
class Collector:
    """One ``seer collect`` session over a dataset directory."""

    def __init__(self, options: CollectOptions, console: Console | None = None) -> None:
        self.options = options
        self.console = console or Console(stderr=True)
        self.spec = get_gpu_spec(options.gpu)
        self.store = RunStore(options.dataset_dir,
                              tag=default_tag(options.shard_index, options.shard_count))
        self.scratch = Path(tempfile.mkdtemp(prefix="seer-collect-"))
        self.info: dict = {}
        self.counts = {"timing_rows": 0, "profiled_runs": 0, "kernels": 0, "profile_errors": 0,
                       "census_records": 0, "worker_restarts": 0}
        self.timing_seconds = 0.0
        self.census_seconds = 0.0
        self.profiling_seconds = 0.0
        self.group_stats: dict[str, dict] = {}
        self.deadline: float | None = None
        self.stop_file = self.scratch / "stop"

    @property
    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def _row_extras(self) -> dict:
        return {"gpu": self.spec.name, "cudnn_version": self.info.get("cudnn_version"),
                "collected_at": now()}

    def my_shapes(self) -> list[GridShape]:
        o = self.options
        return shard(o.shapes, o.shard_index, o.shard_count)

    def run(self) -> dict:
        """Probe, time, profile; log the session; return the session record."""
        o = self.options
        started = now()
        if o.stop_after_s is not None:
            self.deadline = time.monotonic() + o.stop_after_s
        self.info = probe_device(self.scratch)
        check_device(self.spec, self.info)
        ncu_path = ncu_version = None
        if o.profile_shapes != 0 and not o.census:
            ncu_path = ncu_mod.find_ncu(o.ncu)
            ncu_version = ncu_mod.ncu_version(ncu_path)
        self.console.log(f"{self.info['device_name']} ({self.info['sm_count']} SMs), driver "
                         f"{self.info.get('driver_version')}, CUDA {self.info['cuda_runtime_version']}, "
                         f"cuDNN {self.info['cudnn_version']}" + (f", ncu {ncu_version}" if ncu_version else ""))
        interrupted = False
        try:
            if o.census:
                self.census_all()
            else:
                self.time_all()
            if o.profile_shapes != 0 and not o.census and not self.out_of_time:
                self.profile_all(ncu_path)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self.store.close()
            session = {
                "started_at": started, "finished_at": now(), "command": "seer " + shlex.join(o.argv),
                "gpu": self.spec.name, "probe": self.info, "ncu": ncu_path, "ncu_version": ncu_version,
                "maths": o.maths, "algos": o.algos, "shard": f"{o.shard_index}/{o.shard_count}",
                "shapes_in_grid": len(o.shapes), "shapes_in_shard": len(self.my_shapes()),
                "workspace_cap_bytes": o.workspace_cap_bytes, "budget_ms": o.budget_ms,
                "min_reps": o.min_reps, "max_reps": o.max_reps, "min_burst_ms": o.min_burst_ms,
                "timing_protocol": TIMING_PROTOCOL, "seed": o.seed,
                "counts": self.counts, "timing_seconds": round(self.timing_seconds, 1),
                "profiling_seconds": round(self.profiling_seconds, 1),
                "census": o.census, "census_seconds": round(self.census_seconds, 1),
                "ncu_metric_set": o.ncu_metric_set, "ncu_replay": o.ncu_replay,
                "max_profile_kernels": o.max_profile_kernels,
                "ncu_cache_control": o.ncu_cache_control,
                "ncu_groups": self.group_stats, "interrupted": interrupted,
                "stopped_at_time_limit": self.out_of_time,
                "seer_version": seer.__version__,
            }
            self.store.log_session(session)
        if interrupted:
            raise KeyboardInterrupt
        return session

    def time_all(self) -> None:
        o = self.options
        shapes = self.my_shapes()
        # Every key recorded under this timing protocol is done, except those whose status
        # the user asked to retry; rows of an older protocol are measured again.
        done = self.store.done_keys("timing", RUN_KEY, skip_status=o.retry or None,
                                    require={"timing_protocol": TIMING_PROTOCOL})
        if RETRY_UNSTABLE in o.retry:
            done -= unstable_keys(self.store.read("timing", RUN_KEY))
        memory = self.info.get("memory_bytes") or self.spec.memory_bytes
        plan = build_plan(shapes, o.maths, o.algos, done)
        too_large = [w for w in plan if not fits_in_memory(w.shape, memory)]
        for work in too_large:
            self._record_rows(work, "too_large",
                              f"input, filter and output need {work.shape.tensor_bytes} bytes; "
                              f"the GPU has {memory}")
        plan = [w for w in plan if fits_in_memory(w.shape, memory)]
        total = sum(len(w.items) for w in plan)
        if not total:
            self.console.log("timing: nothing to do (all items already recorded)")
            return
        started = time.monotonic()
        with CollectionProgress("timing", total, self.console) as progress:
            pending = plan
            while pending and not self.out_of_time:
                pending = self._time_once(pending, progress)
        self.timing_seconds += time.monotonic() - started

    def _record_rows(self, work: ShapeWork, status: str, detail: str) -> None:
        rows = [{"shape_id": work.shape_id, "math": m, "algo": a, "grid": work.grid,
                 **work.shape.as_dict(), "status": status, "status_detail": detail,
                 **self._row_extras(), "timing_protocol": TIMING_PROTOCOL} for m, a in work.items]
        self.counts["timing_rows"] += self.store.append("timing", rows)

    def _time_once(self, pending: list[ShapeWork], progress: CollectionProgress) -> list[ShapeWork]:
        o = self.options

        def rows(event: dict) -> list[dict]:
            return [event["row"] | self._row_extras() | {"timing_protocol": TIMING_PROTOCOL}]

        def failed(work: ShapeWork, math_mode: str, algo: str, detail: str) -> None:
            self._record_rows(ShapeWork(work.shape, work.grid, [(math_mode, algo)]), "error", detail)

        return self._run_worker("time", ["--seed", str(o.seed), "--budget-ms", str(o.budget_ms),
                                         "--min-burst-ms", str(o.min_burst_ms), "--min-reps", str(o.min_reps),
                                         "--max-reps", str(o.max_reps)],
                                pending, "timing", "timing_rows", rows, failed, progress)

    def _run_worker(self, command_name: str, arguments: list[str], pending: list[ShapeWork], kind: str,
                    counter: str, records_of: Callable[[dict], list[dict]],
                    record_failure: Callable[[ShapeWork, str, str, str], None],
                    progress: CollectionProgress) -> list[ShapeWork]:
        """One worker child over ``pending``; returns the items still to do.

        Each event's records (``records_of``) go to the store under ``kind`` at once and are
        counted in ``self.counts[counter]``. If the child dies or hangs, the item it was on
        is recorded through ``record_failure`` and skipped, and the caller starts a fresh
        child for the rest.
        """
        o = self.options
        plan_file, results, log = (self.scratch / n for n in ("plan.jsonl", "results.jsonl", "worker.log"))
        plan_file.write_text("".join(json.dumps(w.to_record()) + "\n" for w in pending))
        finished_keys: set[tuple] = set()

        def on_event(event: dict) -> None:
            records = records_of(event)
            self.counts[counter] += self.store.append(kind, records)
            # A census record stands for its (shape, math) item, whose algo is CENSUS_ITEM.
            finished_keys.update((r["shape_id"], r["math"], r.get("algo", CENSUS_ITEM)) for r in records)
            progress.advance(len(records))

        command = [*worker_command(), command_name, "--plan", str(plan_file), "--results", str(results),
                   "--workspace-cap", str(o.workspace_cap_bytes), *arguments, "--stop-file", str(self.stop_file)]
        outcome = run_child(command, results, log, on_event, o.item_timeout_s,
                            stop_file=self.stop_file, deadline=self.deadline)
        remaining = _without(pending, finished_keys)
        if outcome.finished or not remaining:
            return remaining
        self.counts["worker_restarts"] += 1
        if outcome.current is None:
            if not finished_keys:
                raise EnvironmentProblem(f"The GPU worker failed before {progress.description} anything: "
                                         f"{outcome.describe()}")
            return remaining
        # The item the child was on when it died is recorded as an error, then skipped.
        sid, math_mode, algo = outcome.current
        work = next(w for w in remaining if w.shape_id == sid)
        record_failure(work, math_mode, algo, outcome.describe())
        progress.advance()
        self.console.log(f"{command_name}: {sid} {math_mode} {algo}: {outcome.describe()}; continuing")
        return _without(remaining, {outcome.current})

    # -- census -------------------------------------------------------------------------
    def census_all(self) -> None:
        """cuDNN's answers for every (shape, math) of the shard: see ``seer.gpu.worker.census_plan``.

        Unlike timing, shapes too large for the device are asked about too: only
        descriptors are made.
        """
        o = self.options
        done = {(*key, CENSUS_ITEM) for key in self.store.done_keys("census", CENSUS_KEY, skip_status=o.retry or None)}
        plan = build_plan(self.my_shapes(), o.maths, [CENSUS_ITEM], done)
        total = sum(len(w.items) for w in plan)
        if not total:
            self.console.log("census: nothing to do (all shapes already recorded)")
            return

        def records(event: dict) -> list[dict]:
            extras = self._row_extras()
            return [r | extras for r in event["records"]]

        def failed(work: ShapeWork, math_mode: str, algo: str, detail: str) -> None:
            self.counts["census_records"] += self.store.append("census", [
                work.census_head(math_mode) | {"status": "error", "status_detail": detail} | self._row_extras()])

        started = time.monotonic()
        with CollectionProgress("asking cuDNN", total, self.console, unit="shape-math pairs") as progress:
            pending = plan
            while pending and not self.out_of_time:
                pending = self._run_worker("census", [], pending, "census", "census_records", records, failed,
                                           progress)
        self.census_seconds += time.monotonic() - started

    # -- profiling ----------------------------------------------------------------------
    def profile_groups(self) -> tuple[str, ...]:
        return METRIC_SETS[self.options.ncu_metric_set]

    def profiled_keys(self) -> dict[tuple, frozenset[str]]:
        """Metric columns already recorded per run, by any group current or retired.

        A record counts whatever its status: a run that failed under a group is not tried
        again unless ``--retry`` names the status. Records from before groups count for all.
        """
        o = self.options
        frame = profile_records(self.store)
        covered: dict[tuple, frozenset[str]] = {}
        if frame.empty:
            return covered
        if o.retry:
            frame = frame[~frame["profile_status"].isin(o.retry)]
        for key, group in zip(frame[list(RUN_KEY)].itertuples(index=False, name=None), frame["group"]):
            covered[key] = covered.get(key, frozenset()) | recorded_columns(group)
        return covered

    def needs(self, key: tuple, group: str, covered: dict[tuple, frozenset[str]]) -> bool:
        """Whether a run still lacks some of a group's metrics (default-only groups skip fma runs)."""
        if group in DEFAULT_MATH_ONLY_GROUPS and key[1] != "default":
            return False
        return not GROUP_COLUMNS[group] <= covered.get(key, frozenset())

    def profile_items(self) -> list[ShapeWork]:
        """Successful timed runs of the shapes chosen for profiling that some group still lacks."""
        o = self.options
        timing = self.store.read("timing", RUN_KEY)
        if timing.empty:
            return []
        shapes = self.my_shapes()
        chosen = shapes if o.profile_shapes is None else select_evenly(shapes, o.profile_shapes)
        ok = timing[timing["status"] == "ok"]
        ok_keys = set(ok[list(RUN_KEY)].itertuples(index=False, name=None))
        done = self.profiled_keys()
        plan = build_plan(chosen, o.maths, o.algos, set())
        for work in plan:
            work.items = [(m, a) for m, a in work.items
                          if (key := (work.shape_id, m, a)) in ok_keys
                          and any(self.needs(key, g, done) for g in self.profile_groups())]
        return [w for w in plan if w.items]

    def profile_all(self, ncu_path: str) -> None:
        o = self.options
        plan = self.profile_items()
        covered = self.profiled_keys()
        total = sum(self.needs((w.shape_id, m, a), g, covered)
                    for w in plan for m, a in w.items for g in self.profile_groups())
        if not total:
            self.console.log("profiling: nothing to do")
            return
        started = time.monotonic()
        with CollectionProgress("profiling", total, self.console, unit="group runs") as progress:
            pending = plan
            chunk_number = 0
            while pending and not self.out_of_time:
                chunk, pending = _take_items(pending, o.profile_chunk_items)
                chunk_number += 1
                self._profile_chunk(chunk, ncu_path, chunk_number, progress)
        self.profiling_seconds += time.monotonic() - started
        if self.profiling_seconds > 0:
            self.console.log(f"profiling: {self.counts['kernels']} kernel records in "
                             f"{self.profiling_seconds:.0f} s; per group: {self.group_stats}")

    def _run_group(self, chunk: list[ShapeWork], group: str, ncu_path: str, number: int):
        """Profile a chunk with one metric group; returns (events, kernels, outcome)."""
        o = self.options
        plan_file, results, log = (self.scratch / n for n in ("pplan.jsonl", "presults.jsonl", "ncu.log"))
        csv = self.store.raw_dir / f"ncu-{self.store.tag}-{number:04d}-{group}.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        if csv.exists():
            csv.unlink()
        plan_file.write_text("".join(json.dumps(w.to_record()) + "\n" for w in chunk))
        events: list[dict] = []
        app = [*worker_command(), "profile", "--plan", str(plan_file), "--results", str(results),
               "--workspace-cap", str(o.workspace_cap_bytes), "--seed", str(o.seed)]
        # Application replay reruns the worker once per pass, and every pass must launch the
        # same kernels: such a worker is never asked to stop early.
        stoppable = o.ncu_replay == "kernel"
        if stoppable:
            app += ["--stop-file", str(self.stop_file)]
        command = ncu_mod.ncu_command(ncu_path, csv, app, ncu_metric_names(group), o.ncu_replay,
                                      o.ncu_cache_control)
        started = time.monotonic()
        outcome = run_child(command, results, log, events.append, o.item_timeout_s,
                            stop_file=self.stop_file if stoppable else None, deadline=self.deadline)
        ncu_text = csv.read_text(errors="replace") if csv.exists() else ""
        kernels = ncu_mod.kernels_from_ncu(ncu_mod.read_ncu_csv(io.StringIO(ncu_text)))
        stats = self.group_stats.setdefault(group, {"seconds": 0.0, "kernels": 0})
        stats["seconds"] = round(stats["seconds"] + time.monotonic() - started, 1)
        stats["kernels"] += len(kernels)
        if csv.exists():
            if o.keep_ncu_csv:  # evidence for re-parsing; compressed like the store's files
                with open(csv, "rb") as src, gzip.open(f"{csv}.gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)
            csv.unlink()
        if kernels.empty and any(e.get("status") == "ok" for e in events) and outcome.finished:
            raise EnvironmentProblem(
                f"ncu produced no kernel rows for chunk {number} ({group}); it said: "
                f"{' | '.join(ncu_text.strip().splitlines()[-5:]) or _tail(log, 5)}")
        if kernels.empty and events and not outcome.finished:
            events = []  # ncu died before writing its results: nothing of this run counts
        return events, kernels, outcome

    def _skip_long_runs(self, chunk: list[ShapeWork], group: str, done: dict[tuple, frozenset[str]],
                        extras: dict, progress: CollectionProgress) -> dict[tuple, frozenset[str]]:
        """Record ``too_many_kernels`` for this group's runs that launch too many kernels.

        Some calls launch thousands of kernels (cuDNN's FFT turns some layers into one small
        GEMV per image and channel). ncu costs tens of milliseconds per kernel and group, so
        past ``max_profile_kernels`` only the first group (launch statistics and instruction
        counts, the cheapest) profiles the run, and the others record why they did not.
        """
        counts = self.launch_kernel_counts()
        cap = self.options.max_profile_kernels
        records = []
        for work in chunk:
            for m, a in work.items:
                key = (work.shape_id, m, a)
                if counts.get(key, 0) > cap and self.needs(key, group, done):
                    records.append(dict(zip(RUN_KEY, key)) | {"group": group} | extras | {
                        "profile_status": "too_many_kernels",
                        "status_detail": f"{counts[key]} kernels per call, more than "
                                         f"--max-profile-kernels {cap}"})
        if not records:
            return done
        self.store.append("profiles", records)
        progress.advance(len(records))
        return self.profiled_keys()

    def launch_kernel_counts(self) -> dict[tuple, int]:
        """Kernels per call of every run the first metric group profiled."""
        frame = profile_records(self.store)
        if frame.empty or "n_kernels" not in frame.columns:
            return {}
        first = frame[(frame["group"] == self.profile_groups()[0]) & (frame["profile_status"] == "ok")]
        return {tuple(k): int(n) for k, n in zip(first[list(RUN_KEY)].itertuples(index=False, name=None),
                                                 first["n_kernels"])}

    def _profile_chunk(self, chunk: list[ShapeWork], ncu_path: str, number: int,
                       progress: CollectionProgress) -> None:
        """Profile a chunk once per metric group, storing each group's results as it ends.

        Groups are independent records, merged per kernel when the dataset is built, so a
        time limit or a crash loses at most the group run in progress. A worker that dies
        leaves an error record for the item it was on; the rest is retried at once.
        """
        done = self.profiled_keys()
        extras = self._row_extras()
        first_group = self.profile_groups()[0]
        for group in self.profile_groups():
            if self.out_of_time:
                return
            if group != first_group:
                done = self._skip_long_runs(chunk, group, done, extras, progress)
            part = [ShapeWork(w.shape, w.grid, [(m, a) for m, a in w.items
                                                if self.needs((w.shape_id, m, a), group, done)])
                    for w in chunk]
            part = [w for w in part if w.items]
            while part and not self.out_of_time:
                events, kernels, outcome = self._run_group(part, group, ncu_path, number)
                by_key = dict(iter(kernels.groupby(list(RUN_KEY), sort=False))) if not kernels.empty else {}
                columns = [*RUN_KEY, "kernel_idx", "kernel_name", "kernel_family", "kernel_role",
                           "kernel_variant", *[m.column for m in METRICS if m.group == group]]
                finished: set[tuple] = set()
                for event in events:
                    key = tuple(event[k] for k in RUN_KEY)
                    record = dict(zip(RUN_KEY, key)) | {"group": group} | extras
                    rows = by_key.get(key)
                    if event.get("status") != "ok":
                        record |= {"profile_status": "error", "status_detail": event.get("status_detail")}
                    elif rows is None or rows.empty:
                        record |= {"profile_status": "no_kernels",
                                   "status_detail": "ran inside its NVTX range but ncu recorded no kernel"}
                    else:
                        kernel_records = [r | {"group": group} | extras for r in rows[columns].to_dict("records")]
                        self.counts["kernels"] += self.store.append("kernels", kernel_records)
                        record |= {"profile_status": "ok", "n_kernels": len(kernel_records)}
                    if record["profile_status"] != "ok":
                        self.counts["profile_errors"] += 1
                    self.store.append("profiles", [record])
                    finished.add(key)
                    progress.advance()
                progress.note(f"{group}: {self.counts['kernels']} kernel records")
                part = _without(part, finished)
                if outcome.finished or not part:
                    continue
                self.counts["worker_restarts"] += 1
                if outcome.current is None or outcome.current in finished:
                    if not finished:
                        raise EnvironmentProblem(f"ncu failed before profiling anything: {outcome.describe()}")
                    continue
                record = dict(zip(RUN_KEY, outcome.current)) | {"group": group} | extras | {
                    "profile_status": "error", "status_detail": outcome.describe()}
                self.store.append("profiles", [record])
                self.counts["profile_errors"] += 1
                progress.advance()
                self.console.log(f"profiling {group}: {' '.join(outcome.current)}: {outcome.describe()}; continuing")
                part = _without(part, {outcome.current})
        done = self.profiled_keys()
        self.counts["profiled_runs"] += sum(
            1 for w in chunk for m, a in w.items
            if not any(self.needs((w.shape_id, m, a), g, done) for g in self.profile_groups()))


def _without(plan: list[ShapeWork], keys: set[tuple]) -> list[ShapeWork]:
    out = []
    for work in plan:
        items = [(m, a) for m, a in work.items if (work.shape_id, m, a) not in keys]
        if items:
            out.append(ShapeWork(work.shape, work.grid, items))
    return out


def _take_items(plan: list[ShapeWork], limit: int) -> tuple[list[ShapeWork], list[ShapeWork]]:
    """Whole shapes from the front of the plan, up to about ``limit`` items."""
    taken, count = [], 0
    for i, work in enumerate(plan):
        if taken and count + len(work.items) > limit:
            return taken, plan[i:]
        taken.append(work)
        count += len(work.items)
    return taken, []
