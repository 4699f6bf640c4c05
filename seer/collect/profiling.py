"""The profiling phase of a collection: successful timed runs, once under ncu per metric group.

Which runs still need which metric group is read from the store (:func:`profile_items`),
so a rerun profiles only what is missing. Runs go to ncu in chunks of whole shapes, each
chunk once per group; each group's records are stored as soon as its ncu run ends, and
merged per kernel when the dataset is built.
"""

from __future__ import annotations

import gzip
import io
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rich.console import Console

from seer.algorithms import current_revision
from seer.collect import ncu as ncu_mod
from seer.collect import children
from seer.collect.children import ChildOutcome, Deadline, run_child, tail
from seer.collect.plan import (CollectOptions, build_plan, select_evenly, shard, shard_shape_ids, take_items,
                               without)
from seer.collect.protocol import ShapeWork, event_key, write_plan
from seer.collect.records import trace_totals
from seer.collect.store import RunStore, profile_records, recorded_columns
from seer.errors import EnvironmentProblem
from seer.metrics import (DEFAULT_MATH_ONLY_GROUPS, GROUP_COLUMNS, METRIC_SETS, METRICS, ncu_metric_names)
from seer.progress import CollectionProgress
from seer.schema import KERNEL_INFO_COLUMNS, RUN_KEY

if TYPE_CHECKING:
    import pandas as pd



def profile_groups(options: CollectOptions) -> tuple[str, ...]:
    """The metric groups of the chosen ncu metric set, in profiling order."""
    return METRIC_SETS[options.ncu_metric_set]


def profiled_keys(store: RunStore, retry: tuple[str, ...] = ()) -> dict[tuple, frozenset[str]]:
    """Metric columns already recorded per run, by any group current or retired.

    A record counts whatever its status: a run that failed under a group is not tried
    again unless ``retry`` names the status. Records from before groups count for all.
    """
    frame = profile_records(store)
    covered: dict[tuple, frozenset[str]] = {}
    if frame.empty:
        return covered
    if retry:
        frame = frame[~frame["profile_status"].isin(retry)]
    for key, group in zip(frame[list(RUN_KEY)].itertuples(index=False, name=None), frame["group"]):
        covered[key] = covered.get(key, frozenset()) | recorded_columns(group)
    return covered


def needs(key: tuple, group: str, covered: dict[tuple, frozenset[str]]) -> bool:
    """Whether a run still lacks some of a group's metrics (default-only groups skip fma runs)."""
    if group in DEFAULT_MATH_ONLY_GROUPS and key[1] != "default":
        return False
    return not GROUP_COLUMNS[group] <= covered.get(key, frozenset())


def profile_items(options: CollectOptions, store: RunStore,
                  timing: pd.DataFrame | None = None) -> list[ShapeWork]:
    """Successful timed runs of the shard's shapes chosen for profiling that some group
    still lacks. ``timing``: the store's latest timing records, read here unless given."""
    o = options
    timing = store.read("timing", RUN_KEY, shape_ids=shard_shape_ids(o)) if timing is None else timing
    if timing.empty:
        return []
    shapes = shard(o.shapes, o.shard_index, o.shard_count)
    chosen = shapes if o.profile_shapes is None else select_evenly(shapes, o.profile_shapes)
    ok = timing[(timing["status"] == "ok") & current_revision(timing)]
    ok_keys = set(ok[list(RUN_KEY)].itertuples(index=False, name=None))
    done = profiled_keys(store, o.retry)
    groups = profile_groups(o)
    plan = build_plan(chosen, o.maths, o.algos, set())
    for work in plan:
        work.items = [(m, a) for m, a in work.items
                      if (key := (work.shape_id, m, a)) in ok_keys and any(needs(key, g, done) for g in groups)]
    return [w for w in plan if w.items]


def traced_kernel_counts(timing: pd.DataFrame) -> dict[tuple, int]:
    """Kernels per call of every timed run whose CUPTI trace succeeded (see the worker), from
    the latest timing records."""
    if timing.empty or "traced_kernels" not in timing.columns:
        return {}
    traced = timing[timing["trace_status"] == "ok"]
    return {key: trace_totals(kernels)[0]
            for key, kernels in zip(traced[list(RUN_KEY)].itertuples(index=False, name=None),
                                    traced["traced_kernels"])}


def launch_kernel_counts(store: RunStore, first_group: str) -> dict[tuple, int]:
    """Kernels per call of every run that ``first_group`` profiled successfully."""
    frame = profile_records(store)
    if frame.empty or "n_kernels" not in frame.columns:
        return {}
    first = frame[(frame["group"] == first_group) & (frame["profile_status"] == "ok")]
    return {tuple(k): int(n) for k, n in zip(first[list(RUN_KEY)].itertuples(index=False, name=None),
                                             first["n_kernels"])}


class Profiler:
    """Runs the profiling phase of one collection session.

    It adds to the session's ``counts`` (kernels, profiled_runs, profile_errors,
    worker_restarts) as it goes, and keeps the time it took (``seconds``) and each group's
    time and kernels (``group_stats``), so that an interrupted session still reports them.
    ``row_extras`` gives the fields every record carries (GPU, cuDNN version, time).
    """

    def __init__(self, options: CollectOptions, store: RunStore, *, workdir: Path, deadline: Deadline,
                 row_extras: Callable[[], dict], counts: dict[str, int], console: Console) -> None:
        self.options = options
        self.store = store
        self.workdir = workdir
        self.stop_file = workdir / "stop"
        self.deadline = deadline
        self.row_extras = row_extras
        self.counts = counts
        self.console = console
        self.groups = profile_groups(options)
        self.seconds = 0.0
        self.group_stats: dict[str, dict] = {}
        self._traced_counts: dict[tuple, int] = {}  # set by run(): timing does not change while profiling
        # Metric columns this session recorded per run, whatever the status: ``--retry``
        # retries what earlier sessions left, never a record just written.
        self._recorded: dict[tuple, frozenset[str]] = {}

    def covered(self) -> dict[tuple, frozenset[str]]:
        covered = profiled_keys(self.store, self.options.retry)
        for key, columns in self._recorded.items():
            covered[key] = covered.get(key, frozenset()) | columns
        return covered

    def _store_records(self, records: list[dict]) -> None:
        """Append profile records, and remember them as this session's."""
        self.store.append("profiles", records)
        for record in records:
            key = tuple(record[k] for k in RUN_KEY)
            self._recorded[key] = self._recorded.get(key, frozenset()) | recorded_columns(record["group"])

    def run(self, ncu_path: str) -> None:
        """Profile every run that some metric group still lacks, until done or out of time."""
        o = self.options
        timing = self.store.read("timing", RUN_KEY, shape_ids=shard_shape_ids(o))  # read once: the largest kind
        plan = profile_items(o, self.store, timing)
        covered = self.covered()
        total = sum(needs((w.shape_id, m, a), g, covered) for w in plan for m, a in w.items for g in self.groups)
        if not total:
            self.console.log("profiling: nothing to do")
            return
        self._traced_counts = traced_kernel_counts(timing)
        started = time.monotonic()
        try:  # an interrupted session still reports the time it spent
            with CollectionProgress("profiling", total, self.console, unit="group runs") as progress:
                pending = plan
                chunk_number = 0
                while pending and not self.deadline.passed:
                    chunk, pending = take_items(pending, o.profile_chunk_items)
                    chunk_number += 1
                    self._profile_chunk(chunk, ncu_path, chunk_number, progress)
        finally:
            self.seconds += time.monotonic() - started
        if self.seconds > 0:
            self.console.log(f"profiling: {self.counts['kernels']} kernel records in "
                             f"{self.seconds:.0f} s; per group: {self.group_stats}")

    def _run_group(self, chunk: list[ShapeWork], group: str, ncu_path: str,
                   number: int) -> tuple[list[dict], pd.DataFrame, ChildOutcome]:
        """Profile a chunk with one metric group; returns (events, kernels, outcome)."""
        o = self.options
        plan_file, results, log = (self.workdir / n for n in ("pplan.jsonl", "presults.jsonl", "ncu.log"))
        csv = self.store.raw_dir / f"ncu-{self.store.tag}-{number:04d}-{group}.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        if csv.exists():
            csv.unlink()
        write_plan(plan_file, chunk)
        events: list[dict] = []
        app = [*children.worker_command(), "profile", "--plan", str(plan_file), "--results", str(results),
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
                f"{' | '.join(ncu_text.strip().splitlines()[-5:]) or tail(log, 5)}")
        if kernels.empty and events and not outcome.finished:
            events = []  # ncu died before writing its results: nothing of this run counts
        return events, kernels, outcome

    def _skip_long_runs(self, chunk: list[ShapeWork], group: str, done: dict[tuple, frozenset[str]],
                        extras: dict, progress: CollectionProgress) -> dict[tuple, frozenset[str]]:
        """Record ``too_many_kernels`` for this group's runs that launch too many kernels.

        Some calls launch very many kernels (cuDNN's FFT turns some layers into one small
        GEMV per image and channel, grouped layers one per group), and ncu's cost grows with
        every kernel and group. Past ``max_profile_kernels`` a run whose CUPTI trace already
        counted (and named and timed) its kernels is not profiled at all; an untraced one is
        profiled by the first group only (launch statistics and instruction counts, the
        cheapest), and the other groups record why they did not.
        """
        counts = {key: (n, "by its CUPTI trace") for key, n in self._traced_counts.items()}
        if group != self.groups[0]:
            counts |= {key: (n, "under ncu") for key, n in launch_kernel_counts(self.store, self.groups[0]).items()}
        cap = self.options.max_profile_kernels
        records = []
        for work in chunk:
            for m, a in work.items:
                key = (work.shape_id, m, a)
                n, source = counts.get(key, (0, ""))
                if n > cap and needs(key, group, done):
                    records.append(dict(zip(RUN_KEY, key)) | {"group": group} | extras | {
                        "profile_status": "too_many_kernels",
                        "status_detail": f"{n} kernels per call {source}, more than --max-profile-kernels {cap}"})
        if not records:
            return done
        self._store_records(records)
        progress.advance(len(records))
        return self.covered()

    def _profile_chunk(self, chunk: list[ShapeWork], ncu_path: str, number: int,
                       progress: CollectionProgress) -> None:
        """Profile a chunk once per metric group, storing each group's results as it ends.

        Groups are independent records, so a time limit or a crash loses at most the group
        run in progress. A worker that dies leaves an error record for the item it was on;
        the rest is retried at once.
        """
        done = self.covered()
        extras = self.row_extras()
        for group in self.groups:
            if self.deadline.passed:
                return
            done = self._skip_long_runs(chunk, group, done, extras, progress)
            part = [w.with_items([(m, a) for m, a in w.items if needs((w.shape_id, m, a), group, done)])
                    for w in chunk]
            part = [w for w in part if w.items]
            while part and not self.deadline.passed:
                events, kernels, outcome = self._run_group(part, group, ncu_path, number)
                by_key = dict(iter(kernels.groupby(list(RUN_KEY), sort=False))) if not kernels.empty else {}
                columns = [*RUN_KEY, "kernel_idx", *KERNEL_INFO_COLUMNS,
                           *[m.column for m in METRICS if m.group == group]]
                finished: set[tuple] = set()
                for event in events:
                    key = event_key(event)
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
                    self._store_records([record])
                    finished.add(key)
                    progress.advance()
                progress.note(f"{group}: {self.counts['kernels']} kernel records")
                part = without(part, finished)
                if outcome.finished or not part:
                    continue
                self.counts["worker_restarts"] += 1
                if outcome.current is None or outcome.current in finished:
                    if not finished:
                        raise EnvironmentProblem(f"ncu failed before profiling anything: {outcome.describe()}")
                    continue
                record = dict(zip(RUN_KEY, outcome.current)) | {"group": group} | extras | {
                    "profile_status": "error", "status_detail": outcome.describe()}
                self._store_records([record])
                self.counts["profile_errors"] += 1
                progress.advance()
                self.console.log(f"profiling {group}: {' '.join(outcome.current)}: {outcome.describe()}; continuing")
                part = without(part, {outcome.current})
        done = self.covered()
        self.counts["profiled_runs"] += sum(
            1 for w in chunk for m, a in w.items
            if not any(needs((w.shape_id, m, a), g, done) for g in self.groups))
