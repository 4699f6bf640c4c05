"""The ``seer`` command: argument parsing and wiring only.

Each subcommand parses its options, calls one library function and prints the outcome.
Problems the user can fix (:class:`seer.errors.SeerError`) become one sentence on stderr
and an exit code: 2 for bad input, 1 for an unusable environment, 130 for Ctrl-C.

Each subcommand imports what it uses inside its own functions: ``seer predict`` then starts
without loading scikit-learn, matplotlib, the dataset code or PyTorch, and a command whose
optional dependency (torch, onnx, cupy) is missing fails alone, in one sentence.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Sequence

from rich.console import Console

import seer
from seer.errors import EXIT_BROKEN_PIPE, EXIT_INPUT, EXIT_INTERRUPTED, InputError, SeerError
from seer.gc_pause import collector_paused
from seer.progress import CountProgress, StepProgress

err_console = Console(stderr=True, highlight=False, soft_wrap=True, log_path=False,
                      width=None if sys.stderr.isatty() else 200)
# Piped output is not cut at 80 columns: tables stay one line per row for other programs.
out_console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _profile_shapes(text: str) -> int | None:
    if text.lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'all' or a number of shapes, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _datasets_root(text: str) -> Path:
    """``--data-dir``: a datasets root, whose GPU folders (DATA_DIR/GPU/) hold the records. A GPU's
    own folder given instead would make every command read and write DATA_DIR/GPU/GPU/: a
    collection would then time again what its records hold, so it is refused."""
    path = Path(text)
    if (path / "raw").is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} holds raw/, so it is a GPU's folder, not a datasets root: seer reads and writes "
            f"DATA_DIR/GPU/raw/; give its parent ({path.parent})")
    return path


# -- collect ------------------------------------------------------------------------------
def _add_collect(sub) -> None:
    from seer.collect.gpus import MIN_SHAPES_PER_SHARD, SHARDS_PER_GPU
    from seer.collect.slurm import add_slurm_options

    p = sub.add_parser("collect", help="time (and profile) every algorithm over a grid of shapes on this GPU",
                       description="Measure every cuDNN algorithm (forward, or with --algo backward the "
                                   "backward-data and backward-filter passes) over a grid of shapes. "
                                   "Resumable: a rerun skips what is recorded under DATA_DIR/GPU/raw.")
    p.add_argument("--gpu", required=True, help="GPU spec name (see `seer gpus`); names data/<gpu>/")
    p.add_argument("--grid", default="seer,networks",
                   help="comma-separated named grids (seer, networks, general, 3d, ...; an unknown name "
                        "lists them all) or layer files, SEER's format or CSV (default: seer,networks)")
    p.add_argument("--kinds", type=_layer_kinds, default=None,
                   help="only the grid's layers of these kinds, comma-separated, as `seer evaluate` names "
                        "them (square, grouped, depthwise, ...), or general for every kind but square")
    _add_math(p, several=True)
    p.add_argument("--algo", default="all",
                   help="comma-separated algorithm names or groups: cudnn (cuDNN's forward), seer (seer's own "
                        "kernels), pytorch (PyTorch's own choice), all (every forward one but the sparse ones, "
                        "default); sparse (seer's sparse kernels, on sparse inputs only: see --sparsity); bwd_data, "
                        "bwd_filter, backward (both): the backward passes' cuDNN algorithms and PyTorch's choice")
    p.add_argument("--sparsity", default="0", metavar="LEVELS",
                   help="measure each layer on inputs with these shares of zeros, comma-separated: 0 is the dense "
                        "layer (the default), a level in (0, 1) a shape of its own per pattern, on which cuDNN's "
                        "forward algorithms and the sparse ones (--algo sparse) run; 'default' means "
                        "0,0.5,0.7,0.8,0.9,0.95,0.99")
    p.add_argument("--sparsity-pattern", default="relu", metavar="PATTERNS",
                   help="how the zeros of a sparse input lie, comma-separated: relu (in patches, as after a "
                        "ReLU; the default), uniform (independent) and crowded (as relu, with a pixel active in one "
                        "channel active in many, as in a network)")
    p.add_argument("--shard", default="1/1", help="i/n: collect only shard i of n of the grid (default 1/1)")
    p.add_argument("--gpus", metavar="all|0,1,...",
                   help="collect on several GPUs of this host at once: one process per GPU, each taking the next "
                        f"of {SHARDS_PER_GPU} shards per GPU as it frees (fewer on a smaller grid: a shard has at "
                        f"least {MIN_SHAPES_PER_SHARD:,} shapes); all, or device numbers (default: the current GPU only)")
    p.add_argument("--profile-shapes", type=_profile_shapes, default=None, metavar="N|all",
                   help="profile under ncu every successful run of N shapes chosen evenly over the "
                        "grid; 0 for timing only (default: all)")
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"), help="datasets root (default: data)")
    p.add_argument("--limit-shapes", type=_positive_int, help="only the first N shapes of the grid")
    p.add_argument("--workspace-cap-gib", type=float, default=8.0,
                   help="algorithms needing more workspace are recorded as workspace_too_large (default 8)")
    p.add_argument("--budget-ms", type=float, default=10.0,
                   help="target GPU time of one item's timed repetitions (default 10)")
    p.add_argument("--min-burst-ms", type=float, default=1.0,
                   help="GPU time of back-to-back calls in one timed burst (default 1)")
    p.add_argument("--min-reps", type=_positive_int, default=5)
    p.add_argument("--max-reps", type=_positive_int, default=50)
    p.add_argument("--item-timeout", type=float, default=300.0,
                   help="seconds without a result before a worker is declared hung (default 300)")
    p.add_argument("--profile-chunk", type=_positive_int, default=150,
                   help="runs per ncu process (default 150)")
    p.add_argument("--max-profile-kernels", type=_positive_int, default=256,
                   help="runs launching more kernels per call get only the first (cheapest) metric "
                        "group, or none where their CUPTI trace counted the kernels, and the status "
                        "too_many_kernels (default 256)")
    p.add_argument("--ncu", help="path of the ncu executable (default: from PATH)")
    p.add_argument("--ncu-metrics", choices=("core", "full"), default="core",
                   help="metric groups: what the models use (core, default) or also pipe "
                        "utilisations and throughput breakdowns (full; slower); see seer/metrics.py")
    p.add_argument("--ncu-replay", choices=("kernel", "application"), default="kernel",
                   help="ncu replay mode (default kernel)")
    p.add_argument("--ncu-cache-control", choices=("all", "none"), default="all",
                   help="flush caches before each replay pass (all, default) or not (none)")
    p.add_argument("--retry", default="", help="statuses to measure again, e.g. error,oom; 'unstable' re-times successful "
                        "runs whose repetitions spread over 10%% of their median, 'untraced' those without a "
                        "kernel trace, 'trace_mismatch' one-kernel runs timed over twice their traced kernel, 'energy' "
                        "those without an energy reading; "
                        "statuses of timing or profiling (such as too_many_kernels) recorded by earlier sessions")
    p.add_argument("--energy", type=float, default=0.0, metavar="SECONDS",
                   help="also read each successful run's energy per call and average power from NVML's energy "
                        "counter, over about SECONDS of back-to-back calls (1 is about ten counter steps on the "
                        "H100); 0, the default, reads none. With --retry energy, runs timed without it are "
                        "timed again")
    p.add_argument("--seed", type=int, default=0, help="seeds inputs and sampled checks (default 0)")
    p.add_argument("--keep-ncu-csv", action="store_true", help="keep ncu's raw CSV files in raw/")
    p.add_argument("--stop-after", type=float, metavar="MINUTES",
                   help="finish the current shape and stop cleanly after this many minutes "
                        "(for time-limited jobs; rerun to resume)")
    p.add_argument("--census", action="store_true",
                   help="run nothing: only ask cuDNN, per shape and math mode, which algorithms it "
                        "supports, the workspace each needs and its heuristic ranking (host calls only, "
                        "no kernel runs), for every cuDNN algorithm of each pass that --algo names (the "
                        "forward by default; --algo backward: dgrad and wgrad); labels for the models' "
                        "support and workspace stage")
    p.add_argument("--no-parse", action="store_true", help="do not rebuild the tidy tables afterwards")
    add_slurm_options(p)
    p.set_defaults(func=_cmd_collect)


def _layer_kinds(text: str) -> tuple[str, ...]:
    from seer.layers.grids import parse_kinds

    try:
        return parse_kinds(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.args[0]) from None


def _algorithms(text: str) -> list[str]:
    """``--algo``'s algorithm names (:func:`seer.algorithms.select_algorithms`); a mistake is one line."""
    from seer.algorithms import select_algorithms

    try:
        return select_algorithms(text)
    except KeyError as exc:
        raise InputError(exc.args[0], field="algo") from None


def _sparsity(levels_text: str, patterns_text: str, algos: list[str], census: bool
              ) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """``--sparsity``'s levels and ``--sparsity-pattern``'s patterns, checked against each
    other and ``--algo``; a mistake is one InputError."""
    from seer.algorithms import is_sparse
    from seer.layers.sparsity import parse_levels, parse_patterns

    try:
        levels = parse_levels(levels_text)
    except ValueError as exc:
        raise InputError(str(exc), field="sparsity") from None
    try:
        patterns = parse_patterns(patterns_text)
    except ValueError as exc:
        raise InputError(str(exc), field="sparsity-pattern") from None
    sparse = any(levels)
    if census and sparse:
        raise InputError("a census runs nothing, so the input's zeros cannot matter: leave out --sparsity",
                         field="sparsity")
    if any(is_sparse(a) for a in algos) and not sparse:
        raise InputError("the sparse algorithms run on sparse inputs only: give --sparsity levels above 0 "
                         "(e.g. --sparsity default)", field="algo")
    return levels, patterns


#: What ``seer collect`` says of a session that the time limit (``--stop-after``) ended.
TIME_LIMIT_NOTE = "stopped at the time limit (--stop-after); work may be left: run the same command to resume"


def _collect_on_gpus(args, gpu_name: str, shapes: int) -> int:
    """``seer collect --gpus``: the grid's ``shapes`` shapes in shards over this host's GPUs
    (:mod:`seer.collect.gpus`), then the tables."""
    from seer.collect.gpus import shard_command
    from seer.collect.orchestrate import now
    from seer.collect.store import RunStore

    started = now()
    failed = _shards_on_gpus(args.gpus, shard_command(args.argv), args.data_dir / gpu_name / "raw",
                             None if args.stop_after is None else args.stop_after * 60, shapes=shapes)
    if failed is None:
        return EXIT_INTERRUPTED
    # A shard that the time limit ended exits as one that finished: its session says which it was.
    stopped = sorted({s["shard"] for s in RunStore(args.data_dir / gpu_name).sessions()
                      if s.get("started_at", "") >= started and s.get("stopped_at_time_limit")},
                     key=lambda shard: int(shard.split("/")[0]))
    if stopped:
        err_console.log(f"shards {', '.join(stopped)} {TIME_LIMIT_NOTE}")
    code = 0 if args.no_parse else _parse(args.data_dir, gpu_name)
    return 1 if failed else code


def _shards_on_gpus(gpus_text: str, command, saved: Path, stop_after_s: float | None = None,
                    shapes: int | None = None, per_gpu: int | None = None) -> int | None:
    """Run ``command``'s shards over the GPUs ``--gpus`` names, one process per GPU at a time
    (:func:`seer.collect.gpus.collect_on_gpus`; ``per_gpu`` shards per GPU, by default 4, fewer
    for a collection of ``shapes`` shapes where it is small); say what failed. Returns how many
    shards failed, or None after Ctrl-C (having said where everything finished is saved)."""
    from seer.collect.gpus import SHARDS_PER_GPU, collect_on_gpus, parse_gpus, shards_per_gpu
    from seer.collect.scratch import scratch_folder

    gpus = parse_gpus(gpus_text)
    if per_gpu is None:
        per_gpu = SHARDS_PER_GPU if shapes is None else shards_per_gpu(shapes, len(gpus))
    err_console.log(f"running on {len(gpus)} GPUs ({', '.join(gpus)}), one process each, "
                    f"{len(gpus) * per_gpu} shards")
    try:
        with scratch_folder() as folder:
            outcomes = collect_on_gpus(command, gpus, folder, err_console, shards_per_gpu=per_gpu,
                                       stop_after_s=stop_after_s)
    except KeyboardInterrupt:
        err_console.print(f"Interrupted. Everything finished is saved in {saved}; run the same command to resume.")
        return None
    failed = [o for o in outcomes if o.returncode != 0]
    for outcome in failed:
        err_console.print(f"shard {outcome.shard} failed on GPU {outcome.gpu} (exit {outcome.returncode}, "
                          f"{outcome.attempts} attempts):\n{outcome.log_tail}", soft_wrap=True)
    err_console.log(f"{len(outcomes) - len(failed)} of {len(outcomes)} shards done"
                    + ("" if len(outcomes) == len(gpus) * per_gpu else "; the rest were not started (time limit)"))
    return len(failed)


def _cmd_collect(args) -> int:
    from seer.collect.orchestrate import CollectOptions, Collector, census_passes
    from seer.collect.plan import parse_shard
    from seer.hardware.gpus import get_gpu_spec
    from seer.layers.grids import of_kinds, resolve_grids
    from seer.schema import parse_math_modes

    spec = get_gpu_spec(args.gpu)  # an unknown GPU fails before anything else happens
    maths = parse_math_modes(args.math)
    algos = _algorithms(args.algo)
    if not algos:
        raise InputError("no algorithm named", field="algo")
    sparsity, patterns = _sparsity(args.sparsity, args.sparsity_pattern, algos, args.census)
    shard_index, shard_count = parse_shard(args.shard)
    if args.gpus and args.slurm:
        raise InputError("--gpus collects here on this host's GPUs, --slurm writes a job array: give one", field="gpus")
    shapes = resolve_grids(args.grid)
    if args.kinds:
        shapes = of_kinds(shapes, args.kinds)
    if args.limit_shapes:
        shapes = shapes[: args.limit_shapes]
    if args.slurm:  # the options are checked above, here rather than in every task
        from seer.collect.slurm import write_slurm_script

        # Tasks sharing a data folder must not all rebuild its tables at once: that is done once, after.
        write_slurm_script(args, err_console, job_name=f"seer-collect-{spec.name}", work=len(shapes), unit="shapes",
                           extra=() if args.no_parse else ("--no-parse",))
        err_console.log(f"when every task is done: `seer parse --gpu {spec.name} --data-dir {args.data_dir}` "
                        "(`seer merge` instead, for shards written to separate folders)")
        return 0
    if args.gpus:
        if (shard_index, shard_count) != (1, 1):
            raise InputError("--gpus cuts the grid into shards itself: leave out --shard", field="shard")
        return _collect_on_gpus(args, spec.name, len(shapes))
    retry = tuple(s.strip() for s in args.retry.split(",") if s.strip())
    options = CollectOptions(
        gpu=spec, shapes=shapes, maths=maths, algos=algos,
        dataset_dir=args.data_dir / spec.name, shard_index=shard_index, shard_count=shard_count,
        profile_shapes=args.profile_shapes, workspace_cap_bytes=int(args.workspace_cap_gib * 2**30),
        budget_ms=args.budget_ms, min_reps=args.min_reps, max_reps=args.max_reps,
        min_burst_ms=args.min_burst_ms, energy_s=args.energy,
        item_timeout_s=args.item_timeout, ncu=args.ncu, profile_chunk_items=args.profile_chunk,
        max_profile_kernels=args.max_profile_kernels,
        ncu_metric_set=args.ncu_metrics, ncu_replay=args.ncu_replay,
        ncu_cache_control=args.ncu_cache_control,
        retry=retry, seed=args.seed, keep_ncu_csv=args.keep_ncu_csv,
        stop_after_s=None if args.stop_after is None else args.stop_after * 60, argv=list(args.argv),
        census=args.census, sparsity=sparsity, sparsity_patterns=patterns,
    )
    sparse_levels = [level for level in sparsity if level]
    err_console.log(f"{len(shapes)} shapes from grid {args.grid}; this shard has "
                    f"{len(shapes[shard_index - 1::shard_count])}; math {','.join(maths)}; "
                    + (f"census of every cuDNN algorithm of {', '.join(census_passes(algos))}" if args.census
                       else f"{len(algos)} algorithms")
                    + (f"; sparse inputs at {','.join(f'{v:g}' for v in sparse_levels)} ({','.join(patterns)})"
                       + ("" if 0 in sparsity else ", no dense run") if sparse_levels else ""))
    try:
        session = Collector(options, err_console).run()
    except KeyboardInterrupt:
        err_console.print(f"Interrupted. Everything finished is saved in {options.dataset_dir / 'raw'}; "
                          "run the same command to resume.")
        return EXIT_INTERRUPTED
    counts = session["counts"]
    if args.census:
        err_console.log(f"recorded {counts['census_records']} census records in {session['census_seconds']} s")
    else:
        err_console.log(f"recorded {counts['timing_rows']} timings in {session['timing_seconds']} s, "
                        f"{counts['profiled_runs']} profiled runs ({counts['kernels']} kernels) in "
                        f"{session['profiling_seconds']} s")
    if session.get("stopped_at_time_limit"):
        err_console.log(TIME_LIMIT_NOTE)
    if not args.no_parse:
        return _parse(args.data_dir, spec.name)
    return 0


# -- parse --------------------------------------------------------------------------------
def _add_parse(sub) -> None:
    p = sub.add_parser("parse", help="rebuild the tidy tables, Excel files and provenance from raw records")
    p.add_argument("--gpu", required=True)
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"))
    p.add_argument("--pack", action="store_true",
                   help="merge the loose raw records into one new compressed pack per kind, leaving earlier "
                        "packs as they are (only when no collection runs)")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/Test-set-I split (default 0)")
    p.set_defaults(func=lambda args: _parse(args.data_dir, args.gpu, args.pack, args.seed))


def _parse(data_dir: Path, gpu: str, pack: bool = False, seed: int = 0) -> int:
    from seer.dataset.build import build_dataset
    from seer.hardware.gpus import get_gpu_spec

    spec = get_gpu_spec(gpu)
    dataset_dir = data_dir / spec.name
    if not (dataset_dir / "raw").exists():
        raise InputError(f"no raw records; run `seer collect --gpu {spec.name}` first", path=dataset_dir / "raw")
    files = build_dataset(dataset_dir, spec, seed=seed, pack=pack)
    err_console.log(f"wrote {files.measurements}/ ({files.rows} runs), {files.kernels}/, "
                    f"{files.train_xlsx.name}, {files.test_xlsx.name}, {files.provenance.name}"
                    + (f", {files.test_set_ii.name}" if files.test_set_ii else "")
                    + (f", {files.census.name}/" if files.census else ""))
    return 0


# -- merge --------------------------------------------------------------------------------
def _add_merge(sub) -> None:
    p = sub.add_parser("merge", help="merge the raw records of shards run apart, and rebuild the tables",
                       description="Copy the raw record files of each SOURCE's raw/ into the target's raw/ "
                                   "(identical files once; of a file that a shard went on writing, the longer; "
                                   "different files of one name are refused), then rebuild the tables. "
                                   "Run it only when no collection writes to the target.")
    p.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                   help="folders holding raw/: datasets of `seer collect` (.../<gpu>) or output folders "
                        "of `seer profile-network`")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--gpu", help="merge `seer collect` datasets into DATA_DIR/GPU and run `seer parse`")
    target.add_argument("--into", type=Path, metavar="OUT",
                        help="merge `seer profile-network` output folders into OUT and rebuild its tables")
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"),
                   help="datasets root, with --gpu (default: data)")
    p.add_argument("--no-parse", action="store_true", help="do not rebuild the tables afterwards")
    p.set_defaults(func=_cmd_merge)


def _cmd_merge(args) -> int:
    from seer.collect.merge import merge_raw
    from seer.collect.store import KINDS
    from seer.hardware.gpus import get_gpu_spec

    if args.gpu:
        gpu = get_gpu_spec(args.gpu).name
        target = args.data_dir / gpu
        result = merge_raw(args.sources, target, kinds=KINDS)
    else:
        from seer.networks.profile_network import KINDS as PROFILE_KINDS

        target = args.into
        result = merge_raw(args.sources, target, kinds=PROFILE_KINDS)
    err_console.log(f"merged {len(args.sources)} folders into {target / 'raw'}: {len(result.written)} files "
                    f"written ({result.records} records), {result.skipped} already there, "
                    f"{result.sessions} session lines added"
                    + (f"; {len(result.ignored)} other files left out" if result.ignored else "")
                    + (f"; {len(result.shared_tag)} files of writers that shared a tag with another kept beside it "
                       f"(*-merged-*)" if result.shared_tag else ""))
    if args.no_parse:
        return 0
    if args.gpu:
        return _parse(args.data_dir, gpu)
    from seer.networks.profile_network import write_tables

    tables = write_tables(target)
    _log_tables(tables)
    return 0


# -- train, predict, evaluate -------------------------------------------------------------
MODELS_DIR_HELP = "models directory (default: $SEER_MODELS_DIR, else the models shipped in the package)"


#: ``seer train --trees`` choices: the names of :data:`seer.training.estimators.CANDIDATE_SETS`
#: (a test keeps them in step), named here so that the CLI starts without scikit-learn.
TREE_SETS = ("compact", "accurate")


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="fit the per-algorithm models of a GPU from its dataset",
                       description="Fit one model per math mode on the train split of DATA_DIR/GPU/ "
                                   "and save it in the models directory, under GPU/.")
    p.add_argument("--gpu", required=True)
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"))
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    p.add_argument("--trees", choices=TREE_SETS, default="compact",
                   help="time regressors' boosted trees: compact (default; faster to predict) or "
                        "accurate (four times the trees, slightly lower error)")
    p.add_argument("--kernel-paths", type=int, default=None, metavar="N",
                   help="per algorithm, learn which of its N most frequent traced kernel paths a layer takes, "
                        "as input to its time regressors where cross-validation says it helps (default: 3 for "
                        "bwd_filter, 0 (off) for the others)")
    p.add_argument("--answers-only", action="store_true",
                   help="fit only the times from cuDNN's own answers (what --cudnn-answers uses on a GPU host) "
                        "beside the trained model in the models directory; the other models stay as they are")
    p.add_argument("--policies-only", action="store_true",
                   help="refit only the models of PyTorch's own choice (after new runs of it) on the trained "
                        "model in the models directory, and recalibrate; the algorithms' models stay as they are")
    _add_pass(p, "the convolution pass whose algorithms to model: fwd (the forward, default), bwd_data or "
                 "bwd_filter (the backward passes; saved under GPU/PASS/)")
    p.add_argument("--first-stage", choices=("auto", "census", "runs"), default="auto",
                   help="what the first stage (support and workspace) learns from: cuDNN's census answers, or "
                        "the training runs' own; auto (default): the census for the forward, the runs for a "
                        "backward pass (docs/backward.md says why)")
    p.add_argument("--transfer-from", metavar="SOURCE_GPU",
                   help="carry SOURCE_GPU's trained forward model over to GPU instead of fitting trees: keep its "
                        "trees, and fit on GPU's own runs a time scale per algorithm, PyTorch's own choice and the "
                        "intervals (for a GPU with few measured layers; see docs/evaluation.md)")
    p.add_argument("--sparse", action="store_true",
                   help="fit only the model of seer's sparse kernels' times from DATA_DIR/GPU/sparse_measurements "
                        "(docs/sparse.md) and save it as GPU/sparse.json; the other models stay as they are")
    p.set_defaults(func=_cmd_train)


#: ``--pass``'s value for every pass at once: the training step.
ALL_PASSES = "all"


def _add_pass(p, text: str, with_all: bool = False) -> None:
    from seer.algorithms import PASSES

    p.add_argument("--pass", dest="pass_", choices=[*PASSES, *((ALL_PASSES,) if with_all else ())], default="fwd",
                   help=text)


def _cmd_train(args) -> int:
    from seer.hardware.gpus import get_gpu_spec
    from seer.predict import persist
    from seer.training import train as training

    spec = get_gpu_spec(args.gpu)
    root = persist.models_root(args.models_dir)
    if args.sparse:
        if args.pass_ != "fwd":
            raise InputError("--sparse fits the forward's sparse kernels", field="pass")
        return _train_sparse(spec, args.data_dir, root)
    if args.policies_only:
        if args.pass_ != "fwd":
            raise InputError("--policies-only refits the forward model's policies; train a backward pass whole",
                             field="pass")
        return _train_policies(spec, args.data_dir, root)
    if args.answers_only:
        if args.pass_ != "fwd":
            raise InputError("--answers-only fits the forward's times from cuDNN's answers", field="pass")
        return _train_answers(spec, args.data_dir, root)
    if args.transfer_from:
        return _train_transfer(spec, args, root)
    with StepProgress("training", err_console) as progress:
        use_census = {"auto": None, "census": True, "runs": False}[args.first_stage]
        model = training.train(args.data_dir / spec.name, spec, progress=progress.update, trees=args.trees,
                               kernel_paths=args.kernel_paths, pass_=args.pass_, use_census=use_census)
    destination = persist.model_dir(root, spec.name, args.pass_)
    paths = persist.save(model, destination)
    for math, info in model.card["maths"].items():
        chosen = ", ".join(f"{a}: {'/'.join(f'{p} {r}' if p != 'all' else r for p, r in paths_.items())}"
                           for a, paths_ in info["regressor"].items())
        first_stage = (info["first_stage"] + (f" ({info['census_shapes']} shapes)" if info.get("census_shapes") else "")
                       + (f": {info['first_stage_note']}" if info.get("first_stage_note") else ""))
        err_console.log(f"{math}: {info['shapes']} training shapes; first stage from {first_stage}; "
                        f"regressors chosen by CV: {chosen}")
    err_console.log(f"wrote {', '.join(p.name for p in paths)} and {persist.CARD_FILE} in {destination}")
    return 0


def _train_sparse(spec, data_dir: Path, root: Path) -> int:
    from seer.dataset.build import read_sparse_measurements
    from seer.predict import persist
    from seer.predict.sparse import fit_sparse_model, save_sparse_model

    source = data_dir / spec.name / "sparse_measurements"
    if not source.is_dir():
        raise InputError("no sparse measurements here; collect them with `seer collect --algo cudnn,sparse "
                         "--sparsity default` and `seer parse`", path=source)
    model = fit_sparse_model(read_sparse_measurements(source), spec.name, source)
    path = save_sparse_model(model, persist.model_dir(root, spec.name))
    for algo, info in model.card["leave_one_layer_out"].items():
        err_console.log(f"{algo}: {info['runs']} runs on {info['layers']} layers, leave-one-layer-out MAPE "
                        f"{info['loo_mape_percent']:.1f}%")
    err_console.log(f"wrote {path}")
    return 0


def _train_transfer(spec, args, root: Path) -> int:
    from seer.predict import persist
    from seer.training.transfer import transfer

    if args.pass_ != "fwd":
        raise InputError("--transfer-from carries a forward model over", field="pass")
    source = persist.load_model(args.transfer_from, models_dir=root)
    model = transfer(source, args.data_dir / spec.name, spec)
    paths = persist.save(model, persist.model_dir(root, spec.name))
    for math, info in model.card["maths"].items():
        scales = ", ".join(f"{a} {v['scale']:.3f}" for a, v in info["time_scale"].items())
        err_console.log(f"{math}: {source.gpu}'s trees, time scales on {info['scale_shapes']} {spec.name} training "
                        f"shapes: {scales}")
    err_console.log(f"wrote {', '.join(p.name for p in paths)} and {persist.CARD_FILE} in "
                    f"{persist.model_dir(root, spec.name)}")
    return 0


def _saved_model_and_table(gpu: str, data_dir: Path, root: Path, pass_: str = "fwd"):
    """The trained model of ``gpu`` and ``pass_`` in the models directory ``root``, and its
    dataset's measurements of that pass as training reads them: what refitting a part of a
    model starts from."""
    from seer.dataset.build import parsed_measurements
    from seer.predict import persist
    from seer.schema import DatasetDir
    from seer.training.train import TRAINING_COLUMNS

    model = persist.load(persist.model_dir(root, gpu, pass_))
    return model, parsed_measurements(DatasetDir(data_dir / model.gpu), model.gpu, TRAINING_COLUMNS, passes=(pass_,))


def _train_answers(spec, data_dir: Path, root: Path) -> int:
    from seer.predict import persist
    from seer.training.train import train_answer_times

    model, table = _saved_model_and_table(spec.name, data_dir, root)
    model = train_answer_times(model, table, data_dir / model.gpu)
    paths = persist.save(model, root / spec.name)
    for math, info in model.card["cudnn_answers"]["maths"].items():
        err_console.log(f"{math}: times from cuDNN's answers for {', '.join(info['regressor'])} "
                        f"on {info['shapes']} training shapes")
    err_console.log(f"wrote {', '.join(p.name for p in paths)} and {persist.CARD_FILE} in {root / spec.name}")
    return 0


def _train_policies(spec, data_dir: Path, root: Path) -> int:
    from seer.predict import persist
    from seer.training.calibrate import calibrate
    from seer.training.train import train_policies

    model, table = _saved_model_and_table(spec.name, data_dir, root)
    model = calibrate(train_policies(model, table), table)
    paths = persist.save(model, root / spec.name)
    for math, info in model.card["maths"].items():
        fitted = info.get("policies") or {}
        said = "; ".join(f"{p}: {i['layers']} layers, CV MAPE {i['cv_mape_percent']:.1f}%" for p, i in fitted.items())
        err_console.log(f"{math}: PyTorch's policies: {said or 'too few training runs to model'}")
    err_console.log(f"wrote {', '.join(p.name for p in paths)} and {persist.CARD_FILE} in {root / spec.name}")
    return 0


def _add_train_cross_gpu(sub) -> None:
    p = sub.add_parser("train-cross-gpu", help="fit the model that predicts GPUs seer has not measured",
                       description="Fit the cross-GPU model: the time of PyTorch's cudnn.benchmark choice under "
                                   "strict FP32 on any GPU of `seer gpus`, learnt from every dataset under DATA_DIR "
                                   "(PYTORCH_BENCHMARK runs under fma) and NeuSight's public timings; written to "
                                   "the models directory as cross-gpu.json and cross-gpu.zip, with each GPU's error "
                                   "when it is left out of the fit.")
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"))
    p.add_argument("--public", type=Path, default=Path("data/external/neusight-conv"),
                   help="NeuSight's public timings (default: data/external/neusight-conv)")
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    p.set_defaults(func=_cmd_train_cross_gpu)


def _cmd_train_cross_gpu(args) -> int:
    import json

    from seer.predict import persist
    from seer.training.cross_gpu import train_cross_gpu

    with StepProgress("training", err_console) as progress:
        progress.update(0, 1, "the cross-GPU model, each GPU left out in turn, then all")
        card_path = train_cross_gpu(args.data_dir, args.public, persist.models_root(args.models_dir))
        progress.update(1, 1, "done")
    for gpu, info in json.loads(card_path.read_text())["gpus"].items():
        err_console.log(f"{gpu}: {info['rows']} rows ({info['source']}, {info['timing']} timing); left out of the "
                        f"fit, MAPE {info['left_out_mape_percent']:.1f}%"
                        + (f"; likely family right on {info['left_out_family_agreement_percent']:.1f}% (the commonest: "
                           f"{info['commonest_family_agreement_percent']:.1f}%)"
                           if "left_out_family_agreement_percent" in info else ""))
    err_console.log(f"wrote {card_path} and {persist.CROSS_GPU_FILE}")
    return 0


def _add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a trained model's intervals and near-best chance on held-out layers",
                       description="Measure the GPU's trained models' errors on the calibration half of Test-set-I "
                                   "of DATA_DIR/GPU/ and store, per math mode, the intervals on predicted times and "
                                   "the curve of the pick's near-best chance (seer train does this too). The times "
                                   "and the picks do not change.")
    p.add_argument("--gpu", required=True)
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"))
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    _add_pass(p, "the convolution pass whose models to calibrate: fwd (default), bwd_data or bwd_filter")
    p.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args) -> int:
    from seer.predict import persist
    from seer.training.calibrate import calibrate

    root = persist.models_root(args.models_dir)
    model = calibrate(*_saved_model_and_table(args.gpu, args.data_dir, root, args.pass_))
    destination = persist.model_dir(root, model.gpu, args.pass_)
    paths = persist.save(model, destination)
    shapes = model.card["calibration"]["shapes"]
    err_console.log(f"calibrated on {', '.join(f'{n} {m}-math shapes' for m, n in shapes.items())}; "
                    f"wrote {', '.join(p.name for p in paths)} and {persist.CARD_FILE} in {destination}")
    return 0


#: The parser's choices, named here so that building it loads neither numpy nor pandas (which
#: seer.schema and seer.output bring): ``seer predict`` on a missing file, or ``--help``, answers
#: at once. tests/test_predict_cli.py keeps each in step with the constant in brackets.
MATH_MODE_CHOICES = ("fma", "default")  # seer.schema.MATH_MODE_NAMES
OBJECTIVE_CHOICES = ("time", "energy")  # seer.schema.OBJECTIVES
STEP_OPTIMIZER_CHOICES = ("none", "sgd")  # seer.schema.STEP_OPTIMIZERS
# seer.networks.profile_network.COMPILE_MODES
COMPILE_MODE_CHOICES = ("reduce-overhead", "default", "max-autotune-no-cudagraphs")
FORMAT_CHOICES = ("csv", "json")  # seer.output.FORMATS
ROWS_CHOICES = ("algorithm", "layer")  # seer.output.ROWS


def _add_math(p, several: bool) -> None:
    """The one ``--math`` option. Commands that measure take several modes, both by default;
    commands that predict take one, ``default`` (what PyTorch runs unless told otherwise)."""
    modes = "fma: strict FP32; default: cuDNN may use TF32"
    if several:
        p.add_argument("--math", default=",".join(MATH_MODE_CHOICES),
                       help=f"math modes, comma-separated ({modes}; default: both)")
    else:
        p.add_argument("--math", choices=list(MATH_MODE_CHOICES), default="default", help=f"{modes} (default: default)")


def _add_model_options(p) -> None:
    """--gpu and --math: which trained model predicts."""
    p.add_argument("--gpu", default=None, help="model to use (default: the only trained one)")
    _add_math(p, several=False)
    p.add_argument("--algo", default="all",
                   help="algorithms to rank, comma-separated names or groups: cudnn (cuDNN's, what PyTorch "
                        "runs), seer (seer's own kernels), all (default)")
    p.add_argument("--objective", choices=list(OBJECTIVE_CHOICES), default="time",
                   help="what the pick minimises: time per call (default) or energy per call (among the "
                        "algorithms with an energy model)")


def _add_predict(sub) -> None:
    p = sub.add_parser(
        "predict", help="predict every algorithm's time for the layers of a file (no GPU needed)",
        description="FILE (- for standard input) is a layer CSV with a header line naming its columns "
                    "(batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w and optional groups, stride_h, pad_h, "
                    "dilation_h, ..., in_d, kernel_d, ... for 3D), or SEER's Test-set-II format: the number of "
                    "layers, then one line per layer: batch in_ch in_width out_ch out_width kernel_width stride "
                    f"padding. Up to {TABLE_LAYERS} layers are shown as a table; more, or with --out, as a summary.")
    p.add_argument("file", help="layer file, or - to read standard input")
    _add_model_options(p)
    p.add_argument("-o", "--out", help="write every prediction here (- for standard output): one CSV row per "
                                       "(layer, algorithm predicted to run), or with --format json one object per layer")
    p.add_argument("--format", choices=list(FORMAT_CHOICES), default=None,
                   help="format of --out (default: json for a .json file, else csv)")
    p.add_argument("--rows", choices=list(ROWS_CHOICES), default="algorithm",
                   help="what one CSV row (JSON object) of --out holds: a (layer, algorithm predicted to run), "
                        "ranked, every algorithm's time (algorithm, the default; JSON nests a layer's algorithms "
                        "in its object); or one layer: its pick with the pick's predicted time (and energy), "
                        "the runner-up with its own, and the extrapolation mark (layer: about 5 times smaller and "
                        "faster to write, for big inputs)")
    p.add_argument("--table", choices=("auto", "all", "summary"), default="auto",
                   help=f"what the terminal shows: a table of every layer (all), counts (summary), or the "
                        f"table up to {TABLE_LAYERS} layers without --out (auto, the default)")
    p.add_argument("--cudnn-answers", action="store_true",
                   help="ask this machine's GPU (cuDNN, from descriptors: nothing runs) whether each of cuDNN's "
                        "algorithms of --pass takes each layer, and for a backward pass the workspace it asks for "
                        "(its kernel path), instead of predicting them (needs a GPU and cuDNN; not with --pass all)")
    p.add_argument("--cudnn", type=int, default=None, metavar="MAJOR",
                   help="for a GPU without per-algorithm models (the cross-GPU model): the cuDNN major version "
                        f"whose likely algorithm family to predict (default {DEFAULT_CUDNN_MAJOR}; the public "
                        "GPUs' timings are cuDNN 8's)")
    _add_pass(p, "the convolution pass to predict: fwd (the forward, default), bwd_data (the input's "
                 "gradient, dgrad) or bwd_filter (the filter's gradient, wgrad), each with its own algorithms; "
                 "all: the training step, one row per layer with each pass's algorithm to use and its time, "
                 "their sum and PyTorch's", with_all=True)
    p.add_argument("--deterministic", action="store_true",
                   help="rank only algorithms whose repeated calls give the same bits (cuDNN's BWD_DATA_ALGO_0, "
                        "BWD_FILTER_ALGO_0 and BWD_FILTER_ALGO_3 sum with atomic adds and are left out)")
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    p.set_defaults(func=_cmd_predict)


#: Layers a terminal table shows before ``seer predict`` switches to a summary.
TABLE_LAYERS = 50
#: The cuDNN major version whose algorithm family ``seer predict --gpu NAME`` gives for a GPU never
#: measured, unless ``--cudnn`` says otherwise: PyTorch 2's wheels bring cuDNN 9.
DEFAULT_CUDNN_MAJOR = 9
#: Layers predicted at a time: enough to amortise the per-call work, few enough that a
#: chunk's predictions stay small in memory.
PREDICT_CHUNK = 1 << 15


def _cmd_predict(args) -> int:
    if args.rows != "algorithm" and not args.out:
        raise InputError("--rows says what --out holds: give --out too", field="rows")
    _check_input(args.file)  # before the libraries and the models load, which takes a second
    _single_threaded_blas()
    _keep_freed_memory()
    freeze = getattr(args, "program", False)  # the seer program, which ends after this command
    with collector_paused(freeze):
        # No pandas: the layers, the predictions and their writing are tables of numpy arrays,
        # and importing pandas would take a quarter of the command's second (the terminal's
        # table of picks imports it, below).
        from contextlib import nullcontext

        from seer.layers.files import iter_layer_tables
        from seer.layers.shapes import table_rows
        from seer.output import (STDOUT, PickSummary, PredictionWriter, checked_layers, format_for,
                                 is_stream, with_labels)
        from seer.predict.model import PredictionMemo
        from seer.predict.persist import load_model

        from seer.predict import persist

    root = persist.models_root(args.models_dir)
    cross_gpu = (args.gpu and args.pass_ == "fwd" and args.gpu.strip().lower() not in persist.available(root)
                 and persist.has_cross_gpu(root))
    if args.cudnn is not None and not cross_gpu:
        raise InputError("--cudnn names the cuDNN version for a GPU without per-algorithm models (the cross-GPU "
                         "model, forward pass only); seer's models of a GPU learnt its own cuDNN's algorithms",
                         field="cudnn")
    if args.pass_ == ALL_PASSES:
        return _predict_training_step(args)
    if cross_gpu:
        return _predict_unmeasured_gpu(args)
    # "all" ranks every algorithm of the model, whatever its pass.
    algorithms = None if args.algo.strip().lower() == "all" else _algorithms(args.algo)
    with collector_paused(freeze):
        model = load_model(args.gpu, math=args.math, models_dir=args.models_dir, pass_=args.pass_,
                           cudnn_answers=args.cudnn_answers)
    if args.deterministic:
        from seer.algorithms import get_algorithm

        algorithms = [a for a in (algorithms or model.predictor(args.math).algorithms)
                      if get_algorithm(a).deterministic]
    if args.cudnn_answers:
        from seer.gpu.answers import cudnn_workspaces
    to_stdout = args.out == STDOUT
    # A stream cannot take back what it was given: check the whole input before writing to one.
    source = checked_layers(args.file) if is_stream(args.out) else nullcontext(args.file)
    shown = []  # per-layer picks to show as a table
    show_all = args.table == "all"
    summary = PickSummary(model.predictor(args.math).spec.memory_bytes)
    with _destination(args.out) as handle, source as layers, CountProgress("predicting", err_console, "layers") as progress:
        writer = PredictionWriter(handle, format_for(args.out, args.format), args.rows) if handle is not None else None
        offset = 0
        memo = PredictionMemo()  # a later chunk's layers met before are not predicted again
        unranked_sparsity = model.sparse is None or model.pass_ != "fwd" or (
            args.objective != "time" and not model.sparse.power)
        for chunk in iter_layer_tables(layers, PREDICT_CHUNK, name=_source_name(args.file)):
            if unranked_sparsity and _has_sparse_layers(chunk):
                unranked_sparsity = False  # said once
                err_console.print(f"seer: note: the sparsity column ranks seer's sparse kernels only in the forward "
                                  f"pass, with models that include theirs (seer train --sparse; by energy where they "
                                  f"have their power); here ({_model_label(model)}, {args.objective}) it changes no "
                                  f"prediction", soft_wrap=True)
            answers = cudnn_workspaces(chunk, args.math, pass_=args.pass_) if args.cudnn_answers else None
            predictions = with_labels(model.predict_table(chunk, args.math, algorithms, args.objective, answers,
                                                          memo), chunk, offset)
            if writer is not None:
                writer.write(predictions)
            summary.add(predictions)
            if show_all or (summary.layers <= TABLE_LAYERS and not args.out and args.table == "auto"):
                shown.append(_shown_picks(chunk, predictions))
            rows = table_rows(chunk)
            offset += rows
            progress.advance(rows)
        if writer is not None:
            writer.close()
    console = err_console if to_stdout else out_console
    if args.table != "summary" and (show_all or (not args.out and summary.layers <= TABLE_LAYERS)):
        import pandas as pd

        _print_table(console, model.gpu, args.math, pd.concat(shown) if shown else pd.DataFrame(), args.objective,
                     label=_model_label(model), max_crowding=None if model.sparse is None else model.sparse.max_crowding,
                     ratio_guard=bool(model.predictor(args.math).guard_margins))
    else:
        _print_summary(console, _model_label(model), args.math, summary, args.out)
    return 0


def _shown_picks(chunk, predictions):
    """The terminal table's rows of a chunk of layers (a layer table) and its predictions (a
    prediction table): each layer's columns and its picks (:func:`seer.predict.model.best_per_layer`)."""
    import pandas as pd

    from seer.predict.model import best_per_layer, prediction_frame

    predictions = prediction_frame(predictions)
    best = best_per_layer(predictions)
    if "break_even_sparsity" in predictions:  # per layer, beside the pick
        best = best.join(predictions.groupby("layer")["break_even_sparsity"].first())
    return pd.DataFrame(chunk).set_index(best.index).join(best)


def _has_sparse_layers(chunk) -> bool:
    """Whether a chunk of layers gives some layer a sparsity above 0."""
    from seer.predict.model import layer_sparsity

    sparsity = layer_sparsity(chunk)
    return sparsity is not None and bool((sparsity > 0).any())


def _model_label(model) -> str:
    """The model's GPU, and its pass where that is not the forward: the terminal's heading."""
    from seer.algorithms import PASS_TITLES

    return " ".join(filter(None, (model.gpu, PASS_TITLES[model.pass_])))


def _step_algorithms(models: dict, args) -> dict:
    """Per pass, the algorithms ``--algo`` and ``--deterministic`` leave it (None: all): ``--algo``
    limits the passes whose algorithms it names, and the others rank all of theirs."""
    from seer.algorithms import get_algorithm

    algorithms = {}
    for pass_, model in models.items():
        named = [] if args.algo.strip().lower() == "all" else [
            a for a in _algorithms(args.algo) if a in model.predictor(args.math).algorithms]
        chosen = named or None
        if getattr(args, "deterministic", False):
            chosen = [a for a in (chosen or model.predictor(args.math).algorithms) if get_algorithm(a).deterministic]
        algorithms[pass_] = chosen
    return algorithms


def _predict_training_step(args) -> int:
    """``seer predict --pass all``: per layer, the algorithm to use in each pass of a training
    step and its predicted time, the step's sum, and PyTorch's (:func:`seer.predict.step.training_step`)."""
    from contextlib import nullcontext

    import numpy as np
    import pandas as pd

    from seer.algorithms import PASSES
    from seer.layers.files import iter_layer_chunks, label_columns
    from seer.layers.shapes import LAYER_COLUMNS
    from seer.output import STDOUT, checked_layers, format_for, is_stream
    from seer.predict.persist import load_passes
    from seer.predict.step import STEP_COLUMNS, training_step

    for given, option in ((args.objective != "time", "objective"), (args.cudnn_answers, "cudnn-answers"),
                          (args.rows != "algorithm", "rows")):
        if given:
            raise InputError(f"--{option} is for one pass; --pass all predicts the training step, one row per layer",
                             field=option)
    models = load_passes(args.gpu, math=args.math, models_dir=args.models_dir)
    gpu = models["fwd"].gpu
    algorithms = _step_algorithms(models, args)
    to_stdout = args.out == STDOUT
    source = checked_layers(args.file) if is_stream(args.out) else nullcontext(args.file)
    fmt = format_for(args.out, args.format) if args.out else None
    frames, shown, offset = [], [], 0
    totals = {p: np.zeros(2) for p in PASSES}  # per pass: seer's and PyTorch's time summed over the layers
    extrapolated = 0
    with _destination(args.out) as handle, source as layers, \
            CountProgress("predicting", err_console, "layers") as progress:
        for chunk in iter_layer_chunks(layers, PREDICT_CHUNK, name=_source_name(args.file)):
            step = training_step(models, chunk, args.math, algorithms).reset_index(drop=True)
            frame = pd.concat([chunk[label_columns(chunk) + list(LAYER_COLUMNS)].reset_index(drop=True), step],
                              axis=1)
            frame.insert(0, "layer", range(offset, offset + len(chunk)))
            if handle is not None and fmt == "csv":
                frame.to_csv(handle, index=False, header=offset == 0, float_format="%.6g")
            elif handle is not None:
                frames.append(frame)
            if args.table == "all" or (args.table == "auto" and not args.out and offset + len(chunk) <= TABLE_LAYERS):
                shown.append(frame)
            for p in PASSES:
                totals[p] += frame[[f"{p}_ms", f"{p}_pytorch_ms"]].sum().to_numpy()
            extrapolated += int(frame["extrapolated"].sum())
            offset += len(chunk)
            progress.advance(len(chunk))
        if handle is not None and fmt == "csv" and offset == 0:  # no layers: the header alone, as for one pass
            pd.DataFrame(columns=["layer", *LAYER_COLUMNS, *STEP_COLUMNS]).to_csv(handle, index=False)
        if handle is not None and fmt == "json":
            out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["layer", *STEP_COLUMNS])
            handle.write(out.to_json(orient="records", indent=1) + "\n")
    console = err_console if to_stdout else out_console
    rows = pd.concat(shown, ignore_index=True) if shown else pd.DataFrame(columns=["layer", *STEP_COLUMNS])
    table = args.table == "all" or (args.table == "auto" and not args.out and offset <= TABLE_LAYERS)
    _print_step(console, gpu, args.math, rows if table else None, offset, args.out, totals, extrapolated)
    return 0


def _print_step(console, gpu: str, math: str, rows, layers: int, out, totals: dict, extrapolated: int) -> None:
    """The training step's table (or, for many layers, its totals) and what its columns mean."""
    import pandas as pd
    from rich import box
    from rich.table import Table

    from seer.algorithms import PASS_NAMES, PASSES
    from seer.layers.shapes import describe

    def cell(value) -> str:
        return "" if pd.isna(value) else f"{value:.3g}"

    if rows is not None:
        table = Table("layer", "shape", *(h for p in PASSES for h in (PASS_NAMES[p], "ms")), "step ms",
                      f"\\[low, high] {TABLE_LEVEL}%", "PyTorch step ms", box=box.SIMPLE_HEAD, pad_edge=False,
                      title=f"{gpu}, {math} math: one training step per layer (forward + dgrad + wgrad), predicted")
        for row in rows.to_dict("records"):
            table.add_row(str(row["layer"]), describe(row) + (" *" if row["extrapolated"] else ""),
                          *(c for p in PASSES for c in (_choice_cell(row[f"{p}_algo"]), cell(row[f"{p}_ms"]))),
                          cell(row["step_ms"]), f"\\[{cell(row[f'step_ms_low{TABLE_LEVEL}'])}, "
                          f"{cell(row[f'step_ms_high{TABLE_LEVEL}'])}]", cell(row["pytorch_step_ms"]))
        console.print(table, crop=False)
    else:
        console.print(f"{gpu}, {math} math: the training step of {layers} layers predicted{_written_to(out)}",
                      soft_wrap=True)
    if layers:
        seer_total, pytorch_total = sum(totals.values())
        parts = ", ".join(f"{PASS_NAMES[p]} {cell(totals[p][0])} ms (PyTorch {cell(totals[p][1])})" for p in PASSES)
        console.print(f"Summed over the layers: {cell(seer_total)} ms per step with seer's choices, "
                      f"{cell(pytorch_total)} ms with PyTorch's own ({parts}).", soft_wrap=True)
    console.print("Each pass uses seer's pick where it is surely faster than PyTorch's own choice, else PyTorch's "
                  f"(the rule of --pass fwd, bwd_data, bwd_filter; their tables show the picks). The step's "
                  f"{TABLE_LEVEL}% interval sums the passes' bounds.", soft_wrap=True)
    if rows is not None:
        _note_extrapolated(console, extrapolated)
    elif extrapolated:
        console.print(f"{_layers(extrapolated)} outside the shapes a pass's model was trained on: treat their "
                      "predictions with care.")


def _predict_unmeasured_gpu(args) -> int:
    """``seer predict --gpu NAME`` for a GPU without per-algorithm models: the cross-GPU model's
    time of PyTorch's cudnn.benchmark choice per layer, its interval, and whether the GPU was measured."""

    import numpy as np
    import pandas as pd
    from rich import box
    from rich.table import Table

    from seer.hardware.gpus import load_gpu_specs
    from seer.layers.files import iter_layer_chunks, label_columns
    from seer.layers.shapes import LAYER_COLUMNS, describe
    from seer.output import STDOUT, format_for
    from seer.predict.persist import load_cross_gpu
    from seer.schema import INTERVAL_LEVELS

    specs = load_gpu_specs()
    spec = specs.get(args.gpu.strip().lower())
    if spec is None:  # the user's mistake (exit 2), not the machine's
        raise InputError(f"unknown GPU {args.gpu!r}; known GPUs: {', '.join(sorted(specs))} (`seer gpus`)",
                         field="gpu")
    if args.math != "fma":
        raise InputError(f"seer has no per-algorithm models of {spec.name}; its cross-GPU model predicts the time of "
                         f"PyTorch's cudnn.benchmark choice under strict FP32 only: use --math fma", field="math")
    for given, option in ((args.objective != "time", "objective"), (args.deterministic, "deterministic"),
                          (args.cudnn_answers, "cudnn-answers"), (args.algo.strip().lower() != "all", "algo"),
                          (args.rows != "algorithm", "rows")):
        if given:
            raise InputError(f"--{option} ranks algorithms; for {spec.name} seer predicts one time per layer "
                             f"(the cross-GPU model)", field=option)
    model, card = load_cross_gpu(args.models_dir)
    measured = spec.name in model.gpus
    cudnn = DEFAULT_CUDNN_MAJOR if args.cudnn is None else args.cudnn
    majors = card["family"]["cudnn_majors"]
    if cudnn not in majors:
        raise InputError(f"the cross-GPU model learnt the algorithm families of cuDNN {' and '.join(map(str, majors))} "
                         f"only, not {cudnn}", field="cudnn")
    frames, offset = [], 0
    for chunk in iter_layer_chunks(args.file, name=_source_name(args.file)):
        ms, bounds, family, family_p = model.predict_with_family(chunk[list(LAYER_COLUMNS)], spec, cudnn)
        frame = pd.DataFrame({"layer": np.arange(offset, offset + len(chunk))})
        for column in label_columns(chunk):
            frame[column] = chunk[column].to_numpy()
        for column in LAYER_COLUMNS:
            frame[column] = chunk[column].to_numpy()
        frame["math"], frame["gpu"], frame["gpu_measured"] = "fma", spec.name, measured
        frame["policy"], frame["predicted_ms"] = "PYTORCH_BENCHMARK", ms
        for level in INTERVAL_LEVELS:
            frame[f"predicted_ms_low{level}"], frame[f"predicted_ms_high{level}"] = bounds[level].T
        frame["cudnn_major"], frame["likely_family"], frame["likely_family_probability"] = cudnn, family, family_p
        frames.append(frame)
        offset += len(chunk)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if args.out:
        with _destination(args.out) as handle:
            if format_for(args.out, args.format) == "json":
                handle.write(out.to_json(orient="records", indent=1) + "\n")
            else:
                out.to_csv(handle, index=False, float_format="%.6g")
    console = err_console if args.out == STDOUT else out_console
    seen = ", ".join(f"{g} ({i['source']})" for g, i in card["gpus"].items())
    where = ("measured, PyTorch's choice only" if measured else "never measured")
    if len(out) <= TABLE_LAYERS and args.out is None:
        table = Table("layer", "shape", "ms", f"[low, high] {TABLE_LEVEL}%", f"likely family (cuDNN {cudnn})",
                      box=box.SIMPLE_HEAD, pad_edge=False,
                      title=f"{spec.name} ({where}), fma math: time of PyTorch's cudnn.benchmark choice, predicted")
        for row in out.itertuples():
            table.add_row(str(row.layer), describe(row._asdict()), f"{row.predicted_ms:.3g}",
                          f"[{getattr(row, f'predicted_ms_low{TABLE_LEVEL}'):.3g}, "
                          f"{getattr(row, f'predicted_ms_high{TABLE_LEVEL}'):.3g}]",
                          f"{row.likely_family} ({row.likely_family_probability:.0%})")
        console.print(table, crop=False)
    else:
        console.print(f"{spec.name} ({where}), fma math: {len(out)} layers predicted by the cross-GPU model"
                      f"{_written_to(args.out)}", soft_wrap=True)
    console.print(f"seer has no per-algorithm models of {spec.name}: the cross-GPU model predicts the time of the "
                  f"algorithm PyTorch's cudnn.benchmark picks, from the GPU's spec; it learnt from {seen}. Left out "
                  f"of its fit, a GPU's times were off by {_cross_gpu_errors(card)} on average (MAPE), and the "
                  f"likely family matched the measured one on {_cross_gpu_family_agreement(card)} of its layers; "
                  f"cuDNN {cudnn}'s families come from {', '.join(_gpus_of_cudnn(card, cudnn))} alone.",
                  soft_wrap=True)
    return 0


def _cross_gpu_errors(card: dict) -> str:
    errors = [info["left_out_mape_percent"] for info in card["gpus"].values()]
    return f"{min(errors):.0f}-{max(errors):.0f}%"


def _cross_gpu_family_agreement(card: dict) -> str:
    shares = [info["left_out_family_agreement_percent"] for info in card["gpus"].values()
              if "left_out_family_agreement_percent" in info]
    return f"{min(shares):.1f}-{max(shares):.1f}%"


def _gpus_of_cudnn(card: dict, major: int) -> list[str]:
    """The GPUs of the cross-GPU model's card measured under cuDNN ``major``."""
    return [gpu for gpu, info in card["gpus"].items() if any(v.split(".")[0] == str(major) for v in info["cudnn"])]


#: The environment variable that sets how many threads numpy's OpenBLAS starts.
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"


def _single_threaded_blas() -> None:
    """Let numpy's OpenBLAS start no threads of its own, unless the user chose a number: the
    shipped models multiply no matrices (prediction's threads walk trees: seer.predict.trees),
    and starting OpenBLAS's threads took 0.04-0.06 s of ``import numpy`` on the 2-core machine.
    It works only before numpy loads: OpenBLAS reads the variable once."""
    if "numpy" not in sys.modules:
        os.environ.setdefault(BLAS_THREADS_ENV, "1")


#: glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD and M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks below this come from malloc's heap, which keeps what is freed for the next block;
#: and the heap gives memory back to the system only beyond this much free at its top.
KEEP_FREED_BYTES = 64 << 20


def _keep_freed_memory() -> bool:
    """Let glibc's malloc reuse freed blocks of up to :data:`KEEP_FREED_BYTES` instead of
    returning each to the system: prediction makes and drops many arrays of megabytes, and each
    fresh one faulted its pages in anew (the 10,000-layer benchmark: 48,000 page faults and 0.3
    s of system time, against 36,000 and 0.2 s; the same peak memory). Whether it was set:
    not on a C library without mallopt (musl, macOS), where nothing changes."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, KEEP_FREED_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES))


def _check_input(file: str) -> None:
    """Refuse a layer file that is missing, or a folder, at once, in the reader's words
    (:func:`seer.layers.files.iter_layer_chunks`); the reader says what else is wrong."""
    if file == "-":
        return
    try:
        folder = stat.S_ISDIR(os.stat(file).st_mode)
    except FileNotFoundError:
        raise InputError("no such file", path=file) from None
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return
    if folder:
        raise InputError("is a directory, not a layer file", path=file)


def _destination(out: str | None):
    """Where predictions go: standard output (``-``), a file written whole or not at all (opened
    first, so that an unusable path fails before any work), or nowhere (``None``)."""
    from contextlib import nullcontext

    from seer.output import STDOUT, AtomicOutput

    return nullcontext(sys.stdout) if out == STDOUT else AtomicOutput(out) if out else nullcontext(None)


def _written_to(out: str | None) -> str:
    """What the terminal adds to a summary line about where the predictions went."""
    from seer.output import STDOUT

    return "" if not out else " (written to standard output)" if out == STDOUT else f" (written to {out})"


def _choice_cell(value) -> str:
    """An algorithm to use as a table cell: its name, "PyTorch's" for PyTorch's own choice."""
    import pandas as pd

    from seer.schema import PYTORCH_CHOICE

    return "" if pd.isna(value) else "PyTorch's" if value == PYTORCH_CHOICE else str(value)


def _source_name(file: str) -> str | None:
    """The name errors give a layer file: its own, also when it is read again from a copy."""
    from seer.layers.files import STDIN, STDIN_NAME

    return STDIN_NAME if file == STDIN else file


def _print_table(console, gpu: str, math: str, rows, objective: str = "time", label: str | None = None,
                 max_crowding: float | None = None, ratio_guard: bool = False) -> None:
    from rich import box
    from rich.table import Table

    import pandas as pd

    from seer.predict.guard import GUARD_LEVEL, PYTORCH_CHOICE
    from seer.schema import get_math_mode

    from seer.hardware.gpus import get_gpu_spec
    from seer.layers.shapes import frame_tensor_bytes

    energy = objective == "energy"
    title = f"{label or gpu}, {math} math: predicted times" + (" and energies per call" if energy else "")
    named = "name" in rows.columns
    table = Table("layer", title=title, box=box.SIMPLE_HEAD, padding=(0, 1),
                  collapse_padding=True, pad_edge=False,
                  caption="layer: its number in the output files (from 0); shape = batch x in_ch x input size -> "
                          "out_ch, kernel, stride s, padding p, dilation d, groups g")
    if named:
        table.add_column("name", overflow="fold")
    table.add_column("shape", min_width=12)
    # Layers on sparse inputs: their share of zeros, and where a sparse kernel would start to win.
    sparse = "sparsity" in rows and "break_even_sparsity" in rows and bool((rows["sparsity"] > 0).any())
    if sparse:
        table.add_column("zeros", no_wrap=True)
        table.add_column("break-even", no_wrap=True)
    sure = not energy and "pick_near_best" in rows and rows["pick_near_best"].notna().any()
    headers = ("least energy", "ms", "mJ", "runner-up", "ms", "mJ") if energy else (
        "fastest", "ms", *(("near best",) if sure else ()), "runner-up", "ms")
    guarded = not energy and "pytorch_ms" in rows and rows["pytorch_ms"].notna().any()
    if guarded:
        headers = (*headers, "PyTorch ms", "use")
    for header in headers:
        # Names and numbers are never cut short: a narrow terminal wraps the layer instead.
        number = header in ("ms", "mJ")
        table.add_column(header, no_wrap=not number, overflow="fold", min_width=6 if number else None)
    too_big = frame_tensor_bytes(rows) > get_gpu_spec(gpu).memory_bytes if len(rows) else []
    for (i, row), big in zip(rows.iterrows(), too_big):
        name = [_one_line_cell(row["name"])] if named else []
        cells = _pick_cells(row, energy, big)
        if sure:
            cells.insert(3, "" if pd.isna(row["pick_near_best"]) else f"{row['pick_near_best']:.0%}")
        if guarded:
            cells += _guard_cells(row)
        if sparse:
            even = row["break_even_sparsity"]
            cells[1:1] = [f"{row['sparsity']:.0%}" if row["sparsity"] > 0 else "",
                          "none" if pd.isna(even) else f"{even:.1%}"]
        table.add_row(str(i), *name, *cells)
    console.print(table, crop=False)  # never cut a number off at the edge
    if f"best_low{TABLE_LEVEL}" in rows and rows[f"best_low{TABLE_LEVEL}"].notna().any():
        console.print(f"ms \\[low, high]: the time's {TABLE_LEVEL}% interval" + (
            "; near best: the chance that the pick measures within 1% of the fastest" if sure else "") + ".")
    crowded_rows = None
    if sparse:
        console.print("zeros: the share of the layer's input that is zero (the sparsity column); break-even: the "
                      "least share at which one of seer's sparse kernels is predicted faster than cuDNN's best.")
        crowded_rows = (pd.to_numeric(rows["crowding"], errors="coerce") > max_crowding) \
            if "crowding" in rows and max_crowding is not None else None
        crowded = 0 if crowded_rows is None else int(crowded_rows.sum())
        if crowded:
            console.print(f"crowding: on {crowded} of {len(rows)} layers the input's non-zeros crowd on pixels more "
                          f"than in any input the sparse model learnt from (above {max_crowding:.3g}), so no sparse "
                          "kernel is recommended there, whatever its predicted time.")
    if guarded:
        # Layers left to PyTorch because their sparse kernel's input is crowded are said above.
        to_pytorch = (rows["recommended"] == PYTORCH_CHOICE).fillna(False).to_numpy(dtype=bool)
        if crowded_rows is not None:
            to_pytorch &= ~crowded_rows.to_numpy(dtype=bool)
        kept = int(to_pytorch.sum())
        level = get_math_mode(math).guard_level
        rule = (f"predicted ratio to PyTorch's time stays below 1 with its calibrated {level}% margin"
                if ratio_guard else f"{GUARD_LEVEL}% interval lies below PyTorch's")
        console.print(f"PyTorch ms: PyTorch's own choice (default mode), predicted. use: the pick where its "
                      f"{rule}, else PyTorch's own choice (on {kept} of "
                      f"{len(rows)} layers here, the gain is within the models' error)"
                      + ("; a name: the dense pick, where a sparse kernel's gain over it is within the models' "
                         "error" if (rows["recommended"].notna() & (rows["recommended"] != PYTORCH_CHOICE)
                                     & (rows["recommended"] != rows["best_algo"])).any() else "") + ".")
    _note_extrapolated(console, int(rows["extrapolated"].sum()) if len(rows) else 0)
    if len(rows) and not energy and (rows["best_ms"] > rows["runner_up_ms"]).any():
        console.print(f"{ABOVE_RUNNER_UP} the pick's time is above the runner-up's: the pick also weighs how likely "
                      "each algorithm is to be the fastest, and both kernel paths where cuDNN may take either.")
    _note_own_kernels(console, rows["best_algo"].dropna().tolist() if len(rows) else [])


def _pick_cells(row, energy: bool = False, too_big: bool = False) -> list[str]:
    """A row of :func:`seer.predict.model.best_per_layer` joined to its layer, as table cells: the layer
    (* where extrapolated), the pick and its time (and energy), the runner-up and its time
    (and energy)."""
    import pandas as pd

    from seer.layers.shapes import describe

    def number(column: str) -> str:
        return "" if pd.isna(row[column]) else f"{row[column]:.3g}"

    def time(who: str) -> str:  # the time and, where the model has one, its interval
        low, high = (row.get(f"{who}_{end}{TABLE_LEVEL}", float("nan")) for end in ("low", "high"))
        return number(f"{who}_ms") + ("" if pd.isna(low) else f" \\[{low:.3g}, {high:.3g}]")  # [ is rich markup

    above = not energy and row["best_ms"] > row["runner_up_ms"]  # False where either is missing
    none = "does not fit in the GPU's memory" if too_big else "no algorithm predicted to run"
    pick = [none if pd.isna(row["best_algo"]) else str(row["best_algo"]),
            time("best") + (f" {ABOVE_RUNNER_UP}" if above else "")]
    runner_up = ["" if pd.isna(row["runner_up"]) else str(row["runner_up"]), time("runner_up")]
    if energy:
        pick.append(number("best_mj"))
        runner_up.append(number("runner_up_mj"))
    return [describe(row) + (" *" if row["extrapolated"] else ""), *pick, *runner_up]


def _guard_cells(row) -> list[str]:
    """PyTorch's predicted time (and its interval) and what seer recommends running."""
    import pandas as pd

    from seer.predict.guard import PYTORCH_CHOICE

    low, high = (row.get(f"pytorch_{end}{TABLE_LEVEL}", float("nan")) for end in ("low", "high"))
    ms = "" if pd.isna(row["pytorch_ms"]) else f"{row['pytorch_ms']:.3g}" + (
        "" if pd.isna(low) else f" \\[{low:.3g}, {high:.3g}]")
    choice = row["recommended"]
    # Where a sparse kernel comes first without a sure gain, the dense pick behind it is named.
    return [ms, "" if pd.isna(choice) else "PyTorch's" if choice == PYTORCH_CHOICE else
            "pick" if choice == row["best_algo"] else str(choice)]


def _one_line_cell(value) -> str:
    """A label as a table cell: empty where missing, control characters escaped, no markup."""
    import pandas as pd
    from rich.markup import escape

    if pd.isna(value):
        return ""
    text = str(value)
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return escape(text)  # a name such as "[b]" is text, not rich markup


#: The level of the intervals the tables show (the files hold every level).
TABLE_LEVEL = 80


#: Marks a pick whose own predicted time is above the runner-up's (see _print_table's note).
ABOVE_RUNNER_UP = "+"


def _note_own_kernels(console, picks: list[str]) -> None:
    """Say which picks stock PyTorch cannot run: seer's own kernels run through seer.torch."""
    from seer.algorithms import algorithm_names

    own_kernels = set(algorithm_names(source="cupy"))
    own = [p for p in picks if p in own_kernels]
    if own:
        console.print(f"{len(own)} of {len(picks)} picks are seer's own kernels, which stock PyTorch cannot run: "
                      "run them with seer.torch.apply, or rank cuDNN's algorithms only with --algo cudnn.")


def _note_extrapolated(console, extrapolated: int) -> None:
    if extrapolated:
        console.print(f"* {_layers(extrapolated)} outside the shapes the model was trained on: treat "
                      f"{'its prediction' if extrapolated == 1 else 'their predictions'} with care.")


def _note_channels_last(console, found) -> None:
    """Where the forward pass handed convolutions channels-last inputs: the models' times are NC[D]HW's."""
    if found.channels_last is None or not found.channels_last.any():
        return
    names = found.layers.loc[found.channels_last, "name"].drop_duplicates().tolist()
    which = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    count = int(found.channels_last.sum())
    console.print(f"{count} layer{'' if count == 1 else 's'} ({which}) got {'its' if count == 1 else 'their'} input "
                  "packed channels-last, which PyTorch runs in NHWC, where the models predict NC[D]HW times: such "
                  "runs can differ from them by several times (docs/networks.md).", soft_wrap=True)


def _print_summary(console, gpu: str, math: str, summary, out) -> None:
    from rich import box
    from rich.table import Table

    console.print(f"{gpu}, {math} math: {summary.layers} layers predicted{_written_to(out)}", soft_wrap=True)
    table = Table("pick", "layers", box=box.SIMPLE_HEAD, pad_edge=False)
    for algo, count in summary.picks.most_common():
        table.add_row(algo, str(count))
    if summary.none - summary.too_big:
        table.add_row("no algorithm predicted to run", str(summary.none - summary.too_big))
    if summary.too_big:
        table.add_row("does not fit in the GPU's memory", str(summary.too_big))
    console.print(table, crop=False)
    console.print(f"{summary.extrapolated} of {_layers(summary.layers)} outside the shapes the model was trained "
                  "on" + (": treat their predictions with care." if summary.extrapolated else "."))
    if summary.guarded:
        console.print(f"seer recommends its pick over PyTorch's own choice on {summary.guarded - summary.kept} of "
                      f"{summary.guarded} layers, where the pick is surely faster (the recommended column); on the "
                      "others the gain is within the models' error.")
    _note_own_kernels(console, list(summary.picks.elements()))


def _layers(count: int) -> str:
    """``count`` layers and the verb that follows, in agreement: '1 layer lies', '3 layers lie'."""
    return f"{count} layer lies" if count == 1 else f"{count} layers lie"


def _add_network(sub) -> None:
    p = sub.add_parser(
        "network", help="predict every convolution of a PyTorch or ONNX model, layer by layer (no GPU needed; "
                        "needs torch, or onnx for an .onnx file)",
        description="MODEL is a torchvision model name (built with weights=None), module:function, a function "
                    "that takes no arguments and returns a torch.nn.Module, or an ONNX file (a name ending in "
                    ".onnx). For a PyTorch model one forward pass on PyTorch's meta device finds every convolution "
                    "it runs; for an ONNX file, ONNX shape inference finds every Conv node's layer (nothing in the "
                    "file runs, and external weight files are not read). seer predicts each algorithm's time for "
                    "each, and totals the network's convolution time under seer's picks and under each algorithm "
                    "fixed on every layer. Convolutions seer does not model are listed with the reason.")
    p.add_argument("model", help="torchvision model name (resnet152, ...), module:function, or FILE.onnx")
    p.add_argument("--input", help="input shape NxCxHxW or NxCxDxHxW, e.g. 1x3x224x224; required for a PyTorch "
                                   "model; for an ONNX file, the shape of its first input (every size), needed "
                                   "where the file leaves a size open (a batch size N)")
    _add_model_options(p)
    p.add_argument("-o", "--out", help="write every prediction here (- for standard output): CSV rows as "
                                       "`seer predict` writes them, with name and calls first; or JSON (.json "
                                       "or --format json) with the layers, the totals and the skipped calls")
    p.add_argument("--format", choices=list(FORMAT_CHOICES), default=None,
                   help="format of --out (default: json for a .json file, else csv)")
    p.add_argument("--layers-out", help="also write the convolutions found as a layer CSV (one row per call, "
                                        "in forward order; `seer predict` reads it)")
    p.add_argument("--table", choices=("slowest", "all"), default="slowest",
                   help=f"layers the terminal shows: the {NETWORK_TABLE_LAYERS} slowest (default) or all")
    p.add_argument("--device", choices=("auto", "meta", "cpu"), default="auto",
                   help="where a PyTorch model's forward pass runs: meta (shapes only), cpu (zeros), or auto: "
                        "meta, and the CPU if that fails (default); an ONNX file has no forward pass, and "
                        "refuses meta and cpu")
    which = p.add_mutually_exclusive_group()
    _add_pass(which, with_all=True,
              text="the convolution pass whose time to total: fwd (the forward, default), bwd_data (dgrad) or "
                   "bwd_filter (wgrad) of every convolution found, or all: the training step, each layer's three "
                   "passes (a training step runs no dgrad for a convolution whose input needs no gradient, such "
                   "as the first, which the totals still count)")
    which.add_argument("--training", dest="pass_", action="store_const", const=ALL_PASSES,
                       help=f"the training step: --pass {ALL_PASSES}, as profile-network --training times it")
    p.add_argument("--sparsity", metavar="S|FILE",
                   help="the share of zeros in each convolution's input, so that seer's sparse kernels are ranked "
                        "too (a GPU with their model: h200): one value in [0, 1) for every layer, or a CSV file "
                        "with name and sparsity per module, as seer.torch.input_sparsity measures them on real "
                        "data (modules not in it: dense); the forward pass, alone or in --pass all's training "
                        "step (docs/sparse.md)")
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    p.set_defaults(func=_cmd_network)


#: Layers of a network the terminal shows by default, slowest first.
NETWORK_TABLE_LAYERS = 10


def _cmd_network(args) -> int:
    from contextlib import ExitStack

    from seer.layers.calls import parse_input_shape
    from seer.layers.files import write_layers
    from seer.networks.network_time import predict_network
    from seer.output import STDOUT, AtomicOutput, NetworkWriter, format_for, write_network_step
    from seer.predict.persist import load_model

    if args.out == STDOUT and args.layers_out == STDOUT:
        raise InputError("only one of --out and --layers-out can be standard output", field="layers-out")
    onnx_file = args.model.lower().endswith(".onnx")  # a torchvision name or module:function never does
    if args.input is None and not onnx_file:
        raise InputError("a PyTorch model needs --input, e.g. --input 1x3x224x224", field="input")
    if onnx_file and args.device != "auto":
        raise InputError(f"--device {args.device} is for PyTorch models: an ONNX file has no forward pass",
                         field="device")
    shape = None if args.input is None else parse_input_shape(args.input, any_rank=onnx_file)
    step = args.pass_ == ALL_PASSES
    if step:
        from seer.predict.persist import load_passes

        if args.objective != "time":
            raise InputError("--objective is for one pass; --pass all totals the training step's time",
                             field="objective")
        models = load_passes(args.gpu, math=args.math, models_dir=args.models_dir)
        model, algorithms = models["fwd"], _step_algorithms(models, args)
    else:
        # "all" ranks every algorithm of the model, whatever its pass.
        algorithms = None if args.pass_ != "fwd" and args.algo.strip().lower() == "all" else _algorithms(args.algo)
        model = load_model(args.gpu, math=args.math, models_dir=args.models_dir, pass_=args.pass_)
    if args.sparsity is not None:
        if args.pass_ not in ("fwd", ALL_PASSES):
            raise InputError("--sparsity ranks seer's sparse kernels in the forward pass: leave out --pass, or "
                             "give --pass all for the training step", field="sparsity")
        if model.sparse is None:
            raise InputError(f"{model.gpu} has no model of seer's sparse kernels (seer train --gpu GPU --sparse "
                             f"fits one; docs/sparse.md)", field="sparsity")
        if args.objective != "time" and not model.sparse.power:
            raise InputError(f"{model.gpu}'s model of seer's sparse kernels has no power model: leave out --objective",
                             field="sparsity")
        if args.algo.strip().lower() == "all" and not step:  # every algorithm, and the sparse kernels beside them
            from seer.algorithms import algorithm_names

            algorithms = [*algorithms, *algorithm_names("sparse")]
    with ExitStack() as files:
        # Opened first, so that an unusable path fails before any work; renamed into place at the end.
        handles = {key: sys.stdout if path == STDOUT else files.enter_context(AtomicOutput(path))
                   for key, path in (("out", args.out), ("layers", args.layers_out)) if path}
        with StepProgress("network", err_console) as progress:
            if onnx_file:
                from seer.networks.onnx_layers import onnx_conv_calls

                progress.update(0, 1, f"reading {args.model} and inferring its shapes")
                found = onnx_conv_calls(args.model, shape)
                progress.update(1, 1, "done")
            else:
                from seer.torch import build_model, conv_calls

                progress.update(0, 2, f"building {args.model}")
                network = build_model(args.model)
                progress.update(1, 2, f"one forward pass of {'x'.join(map(str, shape))}")
                found = conv_calls(network, shape, device=args.device)
                progress.update(2, 2, "done")
        layers = found.layers
        if args.sparsity is not None:
            from seer.networks.network_time import with_sparsity

            layers = with_sparsity(layers, args.sparsity)
        if step:
            from seer.networks.network_time import predict_network_step

            result = predict_network_step(models, layers, args.math, algorithms)
            if "out" in handles:
                write_network_step(handles["out"], format_for(args.out, args.format), result, found.skipped, {
                    "model": args.model, "input": list(found.input_shape), "gpu": model.gpu, "pass": ALL_PASSES,
                    "device": found.device})
            if "layers" in handles:
                write_layers(handles["layers"], found.per_call(), fmt="csv")
            console = err_console if STDOUT in (args.out, args.layers_out) else out_console
            _print_network_step(console, args, found, model.gpu, result)
            return 0
        result = predict_network(model, layers, args.math, algorithms, args.objective)
        if "out" in handles:
            NetworkWriter(handles["out"], format_for(args.out, args.format)).write(
                result, found.skipped, {"model": args.model, "input": list(found.input_shape), "gpu": model.gpu,
                                        "pass": model.pass_, "device": found.device})
        if "layers" in handles:
            write_layers(handles["layers"], found.per_call(), fmt="csv")
    console = err_console if STDOUT in (args.out, args.layers_out) else out_console
    _print_network(console, args, found.input_shape, _model_label(model), found, result)
    return 0


def _print_network_step(console, args, found, gpu: str, result) -> None:
    import pandas as pd
    from rich import box
    from rich.table import Table

    from seer.algorithms import PASS_NAMES, PASSES
    from seer.layers.shapes import describe

    console.print(f"{args.model}, input {'x'.join(map(str, found.input_shape))}: {found.total_calls} convolution "
                  f"calls, {len(result.layers)} distinct (module, layer), {int(found.skipped['calls'].sum())} calls "
                  f"skipped; {gpu}, {result.math} math, one training step", soft_wrap=True)
    names = PASS_NAMES | {"step": "training step"}
    totals = Table("pass", "seer, recommended ms", "PyTorch's own ms", "change", box=box.SIMPLE_HEAD, pad_edge=False,
                   title="network convolution time per training step, predicted")
    for row in result.totals.to_dict("records"):
        totals.add_row(names[row["pass"]], f"{row['seer_ms']:.4g}", f"{row['pytorch_ms']:.4g}",
                       "" if pd.isna(row["change_pct"]) else f"{row['change_pct']:+.1f}%")
    console.print(totals, crop=False)
    layers = result.layers.assign(total=result.layers["calls"] * result.layers["step_ms"])
    shown = layers if args.table == "all" else layers.sort_values("total", ascending=False, kind="stable").head(
        NETWORK_TABLE_LAYERS)
    table = Table("module", "layer", "calls", *(PASS_NAMES[p] for p in PASSES), "step ms", "PyTorch ms",
                  box=box.SIMPLE_HEAD, pad_edge=False,
                  title="every layer" if args.table == "all" else
                  f"the {len(shown)} slowest of {len(layers)} layers (--table all shows every layer)",
                  caption="per pass, what to use: seer's pick where surely faster than PyTorch's own choice, else "
                          "PyTorch's; ms per call")
    for row in shown.to_dict("records"):
        table.add_row(row["name"], describe(row) + (" *" if row["extrapolated"] else ""), str(row["calls"]),
                      *(_choice_cell(row[f"{p}_algo"]) for p in PASSES),
                      f"{row['step_ms']:.3g}", f"{row['pytorch_step_ms']:.3g}")
    console.print(table, crop=False)
    _note_extrapolated(console, int(layers["extrapolated"].sum()))
    _note_channels_last(console, found)


def _print_network(console, args, shape, gpu: str, found, result) -> None:
    from rich import box
    from rich.table import Table

    from seer.networks.network_time import SEER_GUARDED, SEER_PICKS
    from seer.schema import PYTORCH_CHOICE

    layers = found.layers
    console.print(f"{args.model}, input {'x'.join(map(str, shape))}: {found.total_calls} convolution calls, "
                  f"{len(layers)} distinct (module, layer), {int(found.skipped['calls'].sum())} calls skipped; "
                  f"{gpu}, {result.math} math", soft_wrap=True)
    totals = Table("policy", "predicted ms", "layers it runs on", "vs seer's picks", box=box.SIMPLE_HEAD,
                   pad_edge=False, title="network convolution time, predicted")
    for row in result.totals.itertuples():
        name = {SEER_PICKS: "seer's picks", SEER_GUARDED: "seer's picks, guarded (recommended)",
                PYTORCH_CHOICE: "PyTorch's own choice"}.get(row.policy, f"{row.policy} everywhere")
        runs = f"{row.layers_run} of {len(layers)}"
        versus = "" if row.policy == SEER_PICKS else f"{row.slower_than_seer_pct:+.1f}%" + (
            " (where it runs)" if row.layers_not_run else "")
        totals.add_row(name, f"{row.predicted_ms:.4g}", runs, versus)
    console.print(totals, crop=False)
    picks = result.picks
    shown = picks if args.table == "all" else picks.sort_values("total_ms", ascending=False, kind="stable").head(
        NETWORK_TABLE_LAYERS)
    title = "every layer" if args.table == "all" else (
        f"the {len(shown)} slowest of {len(picks)} layers (--table all shows every layer)")
    guarded = args.objective == "time" and picks["pytorch_ms"].notna().any()
    table = Table("module", "layer", "calls", "pick", "ms", "runner-up", "ms",
                  *(("PyTorch ms", "use") if guarded else ()), box=box.SIMPLE_HEAD, pad_edge=False,
                  title=title, caption="layer = batch x in_ch x input size -> out_ch, kernel, stride s, padding p, "
                                       "dilation d, groups g; ms per call"
                                       + ("; use: the pick where surely faster than PyTorch's own choice" if guarded
                                          else ""))
    for _, row in shown.iterrows():
        layer, *pick = _pick_cells(row)
        table.add_row(row["name"], layer, str(row["calls"]), *pick, *(_guard_cells(row) if guarded else ()))
    console.print(table, crop=False)
    _note_extrapolated(console, int(picks["extrapolated"].sum()))
    _note_channels_last(console, found)
    if len(found.skipped):
        skipped = Table("module", "call", "calls", "not predicted because", box=box.SIMPLE_HEAD, pad_edge=False,
                        title="convolutions seer does not predict")
        for row in found.skipped.itertuples():
            skipped.add_row(row.name, row.call, str(row.calls), row.reason)
        console.print(skipped, crop=False)


def _add_profile_network(sub) -> None:
    p = sub.add_parser(
        "profile-network", help="time every convolution and the forward pass of PyTorch models on this GPU, "
                                "per input size and policy, with the algorithm that ran verified",
        description="For each MODEL (torchvision name or module:function), input size, math mode and policy: "
                    "the forward pass as a user runs it (plain wall time of back-to-back passes, eager and "
                    "captured in a CUDA graph), then the pass and each distinct convolution timed in bursts "
                    "behind a spinning kernel (GPU time, host cost hidden; median of repetitions), and each "
                    "convolution's kernels traced and checked against the algorithm that was to run. Policies: "
                    "seer (seer's predicted fastest), seer-graph (the same, guarded for a model run in CUDA "
                    "graphs), seer-all (seer among seer's own kernels too), heuristic (PyTorch's default), benchmark (cudnn.benchmark=True), a cuDNN "
                    "algorithm forced everywhere, or all. "
                    "Resumable: records go to OUT/raw as each policy finishes, and a rerun skips them. Writes "
                    "OUT/overall.csv, OUT/layers.csv and plots.")
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="torchvision model name or module:function (none with --tables-only)")
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument("--sizes", help="square input sizes: START:STOP:COUNT (e.g. 224:512:100) or a list (224,320)")
    sizes.add_argument("--input", help="one input shape NxCxHxW (or NxCxDxHxW)")
    p.add_argument("--batch", type=_positive_int, default=1, help="batch of --sizes inputs (default 1)")
    p.add_argument("--channels", type=_positive_int, default=3, help="channels of --sizes inputs (default 3)")
    p.add_argument("--algo", default="seer,heuristic",
                   help="policies, comma-separated: seer, seer-graph, seer-all, heuristic, benchmark, a cuDNN algorithm, "
                        "or all "
                        "(default: seer,heuristic)")
    _add_math(p, several=True)
    p.add_argument("--gpu", default="h100", help="GPU whose models predict seer's picks (default h100)")
    p.add_argument("--out", type=Path, required=True, help="output folder (records, tables, plots)")
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"),
                   help="datasets root: DATA_DIR/GPU/traced_kernels/ tells which kernels each algorithm "
                        "launches (default: data)")
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    p.add_argument("--shard", default="1/1", help="i/n: only every n-th (model, input, math), from the i-th")
    p.add_argument("--gpus", metavar="all|0,1,...",
                   help="profile on several GPUs of this host at once: one process per GPU, each taking the next "
                        "(model, input, math) of the list that no other has taken; all, or device numbers "
                        "(default: the current GPU only); the tables are built once, at the end")
    p.add_argument("--claims", type=Path, metavar="DIR",
                   help="share the (model, input, math) list with the other processes of this host given DIR: "
                        "each runs the next one none has taken (what --gpus gives each GPU's process)")
    p.add_argument("--worker", metavar="I/N",
                   help="with --claims: this process is the I-th of N sharing the list (it names its files)")
    p.add_argument("--budget-ms", type=float, default=5.0, help="GPU time of one layer's timed bursts (default 5)")
    p.add_argument("--retrace", action="store_true",
                   help="measure again the passes recorded without a kernel tracer (their layers 'untraced')")
    p.add_argument("--passes-only", action="store_true",
                   help="time whole passes only (eager, CUDA graph, bursts), not each convolution")
    p.add_argument("--training", action="store_true",
                   help="time training steps instead (train mode: forward, mean of the output, backward, and "
                        "--optimizer's step): eager and CUDA-graph wall time per step, policies in turns, then each "
                        "convolution's forward, dgrad and wgrad in bursts, traced (not with --passes-only); seer's "
                        "policies run its forward, dgrad and wgrad picks (the GPU's backward models, e.g. --gpu "
                        "h200). Writes OUT/steps.csv and OUT/step_layers.csv")
    p.add_argument("--compiled", nargs="?", const=COMPILE_MODE_CHOICES[0], choices=COMPILE_MODE_CHOICES,
                   metavar="MODE",
                   help="also time each forward pass under torch.compile(mode=MODE): reduce-overhead (the default: "
                        "inductor, replayed from CUDA graphs), default or max-autotune-no-cudagraphs (kernels "
                        "launched from the host); each policy compiled alone: compiled_ms, compiled_spread, "
                        "compile_s, compile_mode and layout_optimization in OUT/overall.csv (minutes of compilation "
                        "per network and policy). seer's policies compile as seer.torch.compile does (inductor's "
                        "layout optimisation off), PyTorch's as torch.compile does")
    p.add_argument("--no-layout-optimization", action="store_true",
                   help="with --compiled, compile PyTorch's policies with inductor's layout optimisation off too")
    p.add_argument("--optimizer", choices=STEP_OPTIMIZER_CHOICES, default="none",
                   help="with --training, end each step with an optimizer step: none (default) or sgd (with "
                        "momentum); every policy pays the same for it. Give each its own --out")
    p.add_argument("--tables-only", action="store_true", help="measure nothing: rebuild the tables and plots")
    p.add_argument("--no-tables", action="store_true",
                   help="only record: leave the tables and plots to `--tables-only` or `seer merge` (as shards do)")
    from seer.collect.slurm import add_slurm_options

    add_slurm_options(p)
    p.set_defaults(func=_cmd_profile_network)


def _cmd_profile_network(args) -> int:
    import time

    from seer.collect.claims import JobClaims
    from seer.collect.plan import parse_shard
    from seer.collect.store import default_tag
    from seer.hardware.gpus import get_gpu_spec
    from seer.networks.profile_network import (NetworkProfiler, ProfileOptions, log_session, mape_over_sizes,
                                               parse_policies, parse_sizes, plan_jobs, write_tables)
    from seer.schema import parse_math_modes

    spec = get_gpu_spec(args.gpu)
    if args.optimizer != "none" and not args.training:
        raise InputError("--optimizer ends a training step: give --training too", field="optimizer")
    if args.compiled and args.training:
        raise InputError("--compiled times forward passes: leave out --training", field="compiled")
    if args.no_layout_optimization and not args.compiled:
        raise InputError("--no-layout-optimization changes how --compiled compiles: give --compiled too",
                         field="no-layout-optimization")
    policies = parse_policies(args.algo)
    maths = parse_math_modes(args.math)
    shard_index, shard_count = parse_shard(args.shard)
    if not args.tables_only and not args.models:
        raise InputError("give at least one MODEL to profile (or --tables-only to rebuild the tables)", field="MODEL")
    if not args.tables_only and not (args.sizes or args.input):
        raise InputError("give the inputs to profile: --sizes or --input", field="sizes")
    if args.tables_only:
        shapes = []
    elif args.sizes:
        shapes = [(args.batch, args.channels, s, s) for s in parse_sizes(args.sizes)]
    else:
        from seer.torch import parse_input_shape

        shapes = [parse_input_shape(args.input)]
    if args.gpus and args.slurm:
        raise InputError("--gpus profiles here on this host's GPUs, --slurm writes a job array: give one", field="gpus")
    if args.slurm:
        from seer.collect.slurm import write_slurm_script

        write_slurm_script(args, err_console, job_name="seer-profile-network",
                           work=len(args.models) * len(shapes) * len(maths), unit="(model, input, math)",
                           extra=() if args.no_tables else ("--no-tables",))
        err_console.log(f"when every task is done: `seer merge --into {args.out} ...` for shards written to separate "
                        f"folders, or the same command with --tables-only")
        return 0
    if bool(args.claims) != bool(args.worker):
        raise InputError("--claims and --worker go together: the folder the processes share, and which of them "
                         "this one is", field="claims" if args.worker else "worker")
    worker = parse_shard(args.worker, "--worker") if args.worker else None
    if args.gpus:
        from seer.collect.gpus import shard_command
        from seer.collect.scratch import scratch_folder

        given = [o for o, v in (("--shard", args.shard != "1/1"), ("--tables-only", args.tables_only),
                                ("--claims", args.claims)) if v]
        if given:
            raise InputError("--gpus shares the work out itself and then builds the tables: leave out "
                             + given[0], field="gpus")
        # One process per GPU, each taking the next job none has taken: a process's start (PyTorch,
        # the models, the tracer) costs about half a minute, so shards of the list would pay it again
        # and again, and fixed shards finish unevenly (a network's strict-FP32 job takes longer).
        worker_command = shard_command(args.argv, finish=("--no-tables",), stop_option=None, shard_option="--worker")
        with scratch_folder() as claims:
            failed = _shards_on_gpus(args.gpus, lambda i, n, minutes: [*worker_command(i, n, minutes),
                                                                       "--claims", str(claims)],
                                     args.out / "raw", per_gpu=1)
        if failed is None:
            return EXIT_INTERRUPTED
        if failed:
            return 1
        if args.no_tables:
            return 0
    elif not args.tables_only:
        jobs = plan_jobs(args.models, shapes, maths, policies, shard_index, shard_count,
                         step="training" if args.training else "forward")
        options = ProfileOptions(out_dir=args.out, gpu=spec.name, models_dir=args.models_dir,
                                 dataset_dir=args.data_dir / spec.name, budget_ms=args.budget_ms,
                                 retrace=args.retrace, layer_times=not args.passes_only, optimizer=args.optimizer,
                                 compiled=args.compiled, layout_optimization=not args.no_layout_optimization,
                                 tag=default_tag(shard_index, shard_count) if worker is None
                                 else default_tag(*worker, job="worker"),
                                 argv=list(args.argv))
        claims = None if worker is None else JobClaims(args.claims)  # before the GPU: a folder's problem first
        started = time.perf_counter()
        profiler = NetworkProfiler(options, progress=err_console.log)
        if profiler.tracer is None:
            err_console.log(f"kernels are not traced, so nothing is verified: {profiler.trace_problem}")
        err_console.log(f"{len(jobs)} (model, input, math) "
                        + ("in this shard" if worker is None else f"in the list shared by {worker[1]} processes")
                        + f", policies {', '.join(policies)}")
        try:
            profiler.run(jobs, claims=claims)
        except KeyboardInterrupt:
            err_console.print(f"Interrupted. Everything finished is saved in {args.out / 'raw'}; "
                              "run the same command to resume.")
            return EXIT_INTERRUPTED
        finally:
            log_session(args.out, options, jobs, started, profiler.measured)
        if args.no_tables:
            return 0
    tables = write_tables(args.out)
    _log_tables(tables)
    errors = mape_over_sizes(tables.passes)
    if len(errors):
        out_console.print(errors.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


def _log_tables(tables) -> None:
    written = [str(p) for p in (tables.overall, tables.layers, tables.steps, tables.step_layers) if p is not None]
    err_console.log(f"wrote {', '.join(written)} and {len(tables.plots)} plots")


def _add_ceilings(sub) -> None:
    p = sub.add_parser("ceilings", help="measure this GPU's compute and memory ceilings for the roofline",
                       description="FP32 and TF32 GEMM FLOP/s (cuBLAS), and DRAM, L2 and L1 bandwidth (copy and "
                                   "re-read kernels), timed in bursts; written to DATA_DIR/GPU/ceilings.json beside "
                                   "the datasheet's figures, with the machine and command.")
    p.add_argument("--gpu", required=True, help="GPU spec name; the detected device must be this one")
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"), help="datasets root (default: data)")
    p.set_defaults(func=_cmd_ceilings)


def _cmd_ceilings(args) -> int:
    from seer.collect.orchestrate import check_device
    from seer.errors import EnvironmentProblem
    from seer.hardware.gpus import get_gpu_spec
    from seer.reporting.roofline import write_ceilings

    spec = get_gpu_spec(args.gpu)
    try:
        from seer.gpu.ceilings import measure_ceilings
        from seer.gpu.worker import probe

        machine = probe()
    except ImportError as exc:
        raise EnvironmentProblem(f"seer ceilings needs a GPU host with CuPy: {exc}") from None
    check_device(spec, machine)
    measured = measure_ceilings(progress=err_console.log)
    path = write_ceilings(args.data_dir / spec.name, spec, measured, machine, list(args.argv))
    err_console.log(f"wrote {path}")
    return 0


def _add_roofline(sub) -> None:
    p = sub.add_parser("roofline", help="draw the hierarchical roofline (DRAM, L2, L1) of the profiled runs",
                       description="Each profiled run of the GPU's dataset placed by its arithmetic intensity at "
                                   "DRAM, L2 and L1 and its achieved FLOP/s (ncu's counters), under the ceilings "
                                   "that `seer ceilings` measured (or the datasheet's peaks). Writes OUT/roofline.csv "
                                   "and one plot per pass and math mode.")
    p.add_argument("--gpu", required=True)
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"), help="datasets root (default: data)")
    p.add_argument("--algo", default="all",
                   help="algorithms or groups: cudnn, seer, all (the forward's; the default), bwd_data, bwd_filter, "
                        "backward")
    p.add_argument("--ceilings", choices=("measured", "datasheet"), default="measured",
                   help="ceilings drawn: measured by `seer ceilings` (default), or the datasheet's FP32, TF32 and DRAM "
                        "peaks, for a GPU not measured yet (no L2 or L1 line)")
    _add_math(p, several=True)
    p.add_argument("--layers", help="only these layers: a grid name or a shapes/layer file")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.set_defaults(func=_cmd_roofline)


def _cmd_roofline(args) -> int:
    from seer.hardware.gpus import get_gpu_spec
    from seer.layers.grids import resolve_grids
    from seer.reporting.roofline import write_roofline
    from seer.schema import parse_math_modes

    spec = get_gpu_spec(args.gpu)
    algos, maths = _algorithms(args.algo), parse_math_modes(args.math)
    shape_ids = {s.shape.shape_id for s in resolve_grids(args.layers)} if args.layers else None
    written = write_roofline(args.data_dir / spec.name, spec, args.out, algos, maths, shape_ids, args.ceilings)
    err_console.log(f"wrote {', '.join(str(p) for p in written)}")
    return 0


def _add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="report accuracy on Test-set-I and Test-set-II against cuDNN's heuristic")
    p.add_argument("--gpu", required=True)
    p.add_argument("--data-dir", type=_datasets_root, default=Path("data"))
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    p.add_argument("--out", type=Path, default=None,
                   help="report path (default: reports/GPU-evaluation.md, reports/GPU-PASS-evaluation.md for a "
                        "backward pass)")
    _add_pass(p, "the convolution pass whose models to evaluate: fwd (default), bwd_data or bwd_filter")
    p.set_defaults(func=_cmd_evaluate)


def _cmd_evaluate(args) -> int:
    from seer.dataset.build import parsed_measurements
    from seer.predict.persist import load_model
    from seer.predict.uncertainty import NEAR_BEST
    from seer.reporting.report import label, write_report
    from seer.reporting.scoring import EVALUATION_COLUMNS, evaluate
    from seer.schema import DatasetDir

    model = load_model(args.gpu, models_dir=args.models_dir, baselines=True, pass_=args.pass_)
    table = parsed_measurements(DatasetDir(args.data_dir / model.gpu), model.gpu, EVALUATION_COLUMNS,
                                passes=(model.pass_,))
    with StepProgress("evaluating", err_console) as progress:
        results = evaluate(model, table, progress=progress.update)
    name = model.gpu if model.pass_ == "fwd" else f"{model.gpu}-{model.pass_}"
    out = args.out or Path("reports") / f"{name}-evaluation.md"
    files = write_report(results, model, out)
    sel = results["selection"]
    for row in sel[sel["policy"].isin(["ours", "seer", "cudnn heuristic"])].itertuples():
        out_console.print(f"{row.split} {row.math:7s} {label(row.policy):16s} top-1 {row.top1_pct:5.1f}%  "
                          f"within {NEAR_BEST:.0%} {row.near_best_pct:5.1f}%  "
                          f"mean regret {row.mean_regret_pct:6.2f}%  max {row.max_regret_pct:7.1f}%")
    err_console.log("wrote " + ", ".join(str(f) for f in files))
    return 0


# -- small utilities ----------------------------------------------------------------------
def _add_grid(sub) -> None:
    p = sub.add_parser("grid", help="print or write a grid of shapes in SEER's format")
    p.add_argument("name", help="seer, networks, test-set-ii, quick, or a shape file to check")
    p.add_argument("--out", type=Path, help="write here instead of printing")
    p.set_defaults(func=_cmd_grid)


def _cmd_grid(args) -> int:
    from seer.layers.files import format_layers
    from seer.layers.grids import resolve_grids
    from seer.output import AtomicOutput

    shapes = [gs.shape for gs in resolve_grids(args.name)]
    text = format_layers(shapes)
    if args.out:
        with AtomicOutput(args.out) as handle:
            handle.write(text)
        err_console.log(f"wrote {len(shapes)} shapes to {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def _add_gpus(sub) -> None:
    p = sub.add_parser("gpus", help="list the GPU specs seer knows, and what it predicts for each")
    p.add_argument("--models-dir", type=Path, default=None, help=MODELS_DIR_HELP)
    p.set_defaults(func=_cmd_gpus)


def _cmd_gpus(args) -> int:
    from rich.table import Table

    from seer.algorithms import PASS_NAMES, PASSES
    from seer.hardware.gpus import load_gpu_specs
    from seer.predict import persist

    root = persist.models_root(args.models_dir)
    trained = {pass_: set(persist.available(root, pass_)) for pass_ in PASSES}
    cross_gpu = persist.has_cross_gpu(root)
    table = Table("name", "GPU", "cc", "SMs", "memory GiB", "GB/s", "fp32 TFLOP/s", "seer predicts")
    def forward(name: str) -> str:
        source = persist.read_card(persist.model_dir(root, name)).get("transferred_from")
        return "forward: every algorithm" + (f" ({source['gpu']}'s model, carried over)" if source else "")

    for spec in load_gpu_specs().values():
        parts = [forward(spec.name) if spec.name in trained["fwd"] else
                 "forward: PyTorch's cudnn.benchmark choice and its likely family (cross-GPU model)" if cross_gpu else ""]
        backward = [PASS_NAMES[p] for p in PASSES[1:] if spec.name in trained[p]]
        parts.append(f"{', '.join(backward)}: every algorithm" if backward else "")
        what = "; ".join(p for p in parts if p)
        table.add_row(spec.name, spec.display_name, spec.compute_capability, str(spec.sm_count),
                      f"{spec.memory_bytes / 2**30:.0f}", f"{spec.memory_bandwidth_gbs:.0f}",
                      f"{spec.peak_fp32_tflops:.1f}", what or "nothing (no model)")
    out_console.print(table, crop=False)  # never cut a number off at the edge
    return 0


# -- entry point --------------------------------------------------------------------------
def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line and the hint to ``--help``, not the usage text."""

    def error(self, message: str):
        print(f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)", file=sys.stderr, flush=True)
        sys.exit(EXIT_INPUT)


def _one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped: an error stays one line
    even when it quotes a file name that holds a newline."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="seer", description="Predict how fast each GPU convolution algorithm runs on a layer.")
    parser.add_argument("--version", action="version", version=f"seer {seer.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_collect(sub)
    _add_parse(sub)
    _add_merge(sub)
    _add_train(sub)
    _add_train_cross_gpu(sub)
    _add_calibrate(sub)
    _add_predict(sub)
    _add_network(sub)
    _add_profile_network(sub)
    _add_evaluate(sub)
    _add_ceilings(sub)
    _add_roofline(sub)
    _add_grid(sub)
    _add_gpus(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``seer`` command; returns the exit code."""
    program = argv is None  # the seer program itself, not a call from Python
    argv = list(sys.argv[1:] if argv is None else argv)
    # A batch system's SIGTERM (time limit, scancel) stops a collection like Ctrl-C does:
    # finished work is already saved, and the worker child is shut down with it.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    args.program = program
    code = _run(args)
    if program and args.command == "predict":
        _exit_at_once(code)
    return code


def _exit_at_once(code: int) -> None:
    """End the process now, its output flushed. ``seer predict`` leaves nothing to clean up when
    it returns (its output file is renamed into place, its temporary copy closed), and Python's
    own teardown of the modules it loaded (numba's compiled code, pandas, the model) took 0.2 to
    0.35 s more on the 2-core machine."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # the reader left after the last write: as _run says it
            code = EXIT_BROKEN_PIPE if stream is sys.stdout else code
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run(args) -> int:
    """The parsed command's exit code, every problem it raises turned into one line."""
    try:
        return int(args.func(args) or 0)
    except SeerError as exc:
        # One line, never wrapped: other programs read it from a pipe.
        print(f"seer: error: {_one_line(str(exc))}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("Interrupted.")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`seer predict big.txt -o - | head`): stop quietly, as Unix
        # tools do, and keep Python from complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
