"""The vocabulary of seer's tables: math modes, keys, statuses, splits and columns.

Every stage names these things the same way, so they are defined here once: the
collector writes records with these keys and statuses, the dataset stage writes tables
with these columns, training and evaluation read them, and predictions come out with
:data:`PREDICTION_COLUMNS`. Shape columns are defined with the shape itself
(:mod:`seer.layers.shapes`), ncu metric columns and the run columns derived from them with
their metrics (:mod:`seer.metrics`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seer.errors import InputError
from seer.layers.shapes import LAYER_COLUMNS
from seer.metrics import METRICS, RUN_COLUMNS


# -- math modes ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MathMode:
    """How cuDNN may compute an fp32 convolution, and how closely it must match float64.

    Attributes
    ----------
    name : str
        seer's name, the ``math`` column of every table.
    cudnn_math_type : int
        The ``cudnnMathType_t`` value set on the convolution descriptor.
    cudnn_name : str
        That value's name in cuDNN's headers.
    tolerance : float
        Relative L2 error against the float64 reference above which a run is recorded as
        ``wrong_result``. The bounds reject wrong results (unwritten or misplaced outputs
        give errors near 1), not less accurate algorithms; each run's error is kept in
        ``rel_error``.
    description : str
    tensor_cores : bool
        Whether cuDNN may run the fp32 convolution on TF32 tensor cores (PyTorch's
        ``allow_tf32``).
    guard_level : int
        The one-sided level (%) of the guard's margins (:func:`seer.predict.uncertainty.fit_guard_margins`):
        seer's pick replaces PyTorch's choice where it is faster with at least this chance.
        Under default math PyTorch's choice is within about 1% of the fastest on most layers,
        so the pick must be surely faster (90%); under strict FP32 it is often far from it, and a
        pick more likely faster than not (50%) gains in total (docs/predicting.md, *The guard's
        level per math mode*).
    """

    name: str
    cudnn_math_type: int
    cudnn_name: str
    tolerance: float
    description: str
    tensor_cores: bool
    guard_level: int


MATH_MODES: tuple[MathMode, ...] = (
    MathMode("fma", 3, "CUDNN_FMA_MATH", 5e-3, "strict FP32, no tensor cores", tensor_cores=False, guard_level=50),
    MathMode("default", 0, "CUDNN_DEFAULT_MATH", 1e-2, "cuDNN may use TF32 tensor cores for fp32 data",
             tensor_cores=True, guard_level=90),
)
MATH_MODE_NAMES: tuple[str, ...] = tuple(m.name for m in MATH_MODES)
_MATH_BY_NAME = {m.name: m for m in MATH_MODES}


def get_math_mode(name: str) -> MathMode:
    """The math mode called ``name``; InputError naming the known ones otherwise."""
    try:
        return _MATH_BY_NAME[name]
    except KeyError:
        raise InputError(f"unknown math mode {name!r}; use {' or '.join(MATH_MODE_NAMES)}", field="math") from None


def parse_math_modes(text: str) -> list[str]:
    """Comma-separated math modes, as ``--math`` takes them (``fma``, ``default`` or both)."""
    modes = [m.strip().lower() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in _MATH_BY_NAME]
    if bad or not modes:
        raise InputError(f"unknown math mode {', '.join(bad) or text!r}; use "
                         f"{', '.join(MATH_MODE_NAMES)} or {','.join(MATH_MODE_NAMES)}", field="math")
    return list(dict.fromkeys(modes))


# -- keys ---------------------------------------------------------------------------------
#: One run: a shape, a math mode and an algorithm.
RUN_KEY: tuple[str, ...] = ("shape_id", "math", "algo")
#: One census answer covers every cuDNN algorithm of one pass (:data:`seer.algorithms.PASSES`)
#: of a (shape, math mode). Records written before the backward census have no ``pass``: they
#: answered for the forward (:data:`CENSUS_DEFAULTS`).
CENSUS_KEY: tuple[str, ...] = ("shape_id", "math", "pass")
#: What a census record without a field stands for: records before the backward census asked the forward.
CENSUS_DEFAULTS: dict[str, str] = {"pass": "fwd"}
#: Profiles are recorded per run and metric group (one ncu run per group).
GROUP_KEY: tuple[str, ...] = (*RUN_KEY, "group")
#: One kernel of a profiled run, in launch order.
KERNEL_KEY: tuple[str, ...] = (*RUN_KEY, "kernel_idx")

# -- statuses -----------------------------------------------------------------------------
#: What became of a run (``status``), and of a census answer per algorithm.
STATUSES: dict[str, str] = {
    "ok": "ran, and matched the float64 reference",
    "not_supported": "cuDNN refused the algorithm for this shape",
    "workspace_too_large": "the algorithm asked for more workspace than the collection's cap",
    "oom": "the GPU ran out of memory",
    "wrong_result": "ran, but its output differed from the float64 reference beyond the math mode's tolerance",
    "error": "anything else went wrong (status_detail says what); the worker went on with the next run",
    "too_large": "input, filter and output do not fit the GPU's memory: not attempted",
}
#: What became of a run's profile (``profile_status``).
PROFILE_STATUSES: dict[str, str] = {
    "ok": "every metric the run needs was recorded, and every metric group saw the same kernels",
    "partial": "some metric group has not profiled the run yet",
    "inconsistent": "metric groups saw different kernel sequences",
    "error": "the profiled call failed",
    "no_kernels": "the call ran inside its NVTX range, but ncu recorded no kernel",
    "too_many_kernels": "the call launched more kernels than the cap: only the first metric group profiled it, "
                        "or none where its CUPTI trace had counted them",
}

#: Optimizers a timed training step may end with (``seer profile-network --training --optimizer``):
#: none, or SGD with momentum (:func:`seer.torch.convolution.training_step`).
STEP_OPTIMIZERS = ("none", "sgd")

# -- splits -------------------------------------------------------------------------------
#: The ``split`` column's values and how reports name them.
SPLITS: dict[str, str] = {"train": "training", "test1": "Test-set-I", "test2": "Test-set-II"}
TEST_SPLITS: tuple[str, ...] = ("test1", "test2")

# -- columns ------------------------------------------------------------------------------
#: Columns of the measurements table, one row per run, in order. Units: ``*_ms`` milliseconds,
#: ``*_bytes`` bytes; fractions (achieved_occupancy, sm_util, dram_util, ...) in [0, 1]. The
#: profile columns, their units and sources, are :data:`seer.metrics.RUN_COLUMNS`.
MEASUREMENT_COLUMNS: tuple[str, ...] = (
    "gpu", "cudnn_version", "math", *LAYER_COLUMNS, "shape_id", "grid", "algo", "status",
    "status_detail", "time_ms", "time_ms_iqr", "time_ms_min", "n_reps", "timing_attempts",
    "workspace_bytes",
    "heuristic_rank", "rel_error", "timing_protocol", "burst", "sm_clock_mhz", "profile_status",
    "profile_detail", "n_kernels", "main_kernel", "variant", *(c.column for c in RUN_COLUMNS),
    "trace_status", "trace_n_kernels", "trace_time_ms", "trace_main_kernel", "trace_variant",
    "power_w", "energy_mj", "energy_window_s", "energy_counter_steps",
    "split", "collected_at",
)
#: What a run on a sparse input adds (``seer collect --sparsity``): the asked share of zeros
#: (above 0), the pattern of the zeros (:data:`seer.layers.sparsity.PATTERNS`), the share of
#: zeros of the input made and how crowded its non-zeros are on pixels
#: (:func:`seer.layers.sparsity.pixel_crowding`; empty for records collected before it was
#: measured), both measured, and the id of the layer itself, whose dense runs are in the
#: measurements table under that ``shape_id``.
SPARSE_COLUMNS: tuple[str, ...] = ("dense_shape_id", "sparsity", "sparsity_pattern", "input_zero_fraction",
                                   "input_crowding")
#: Columns of the sparse measurements table (``sparse_measurements/``), one row per run on a
#: sparse input: the measurements table's, with :data:`SPARSE_COLUMNS` after ``shape_id``.
#: Sparse runs have a table of their own so that the measurements table, which every model is
#: trained and evaluated on, holds the dense layers only, as it did before sparse runs existed.
SPARSE_MEASUREMENT_COLUMNS: tuple[str, ...] = (
    *MEASUREMENT_COLUMNS[:MEASUREMENT_COLUMNS.index("shape_id") + 1], *SPARSE_COLUMNS,
    *MEASUREMENT_COLUMNS[MEASUREMENT_COLUMNS.index("shape_id") + 1:])
#: The pass each run computed (:data:`seer.algorithms.PASSES`): a column of the tidy table as
#: :func:`seer.dataset.build.read_measurements` returns it, read from the algorithm registry
#: (the one table that says which pass an algorithm computes), not stored in the files.
PASS_COLUMN = "pass"
#: Columns of the measurements table that hold text; every other column is numeric.
MEASUREMENT_TEXT_COLUMNS: frozenset[str] = frozenset({
    "gpu", "cudnn_version", "math", "shape_id", "grid", "algo", "status", "status_detail", "profile_status",
    "profile_detail", "main_kernel", "variant", "trace_status", "trace_main_kernel", "trace_variant", "split",
    "collected_at"})
#: Columns of the sparse measurements table that hold text.
SPARSE_TEXT_COLUMNS: frozenset[str] = MEASUREMENT_TEXT_COLUMNS | {"dense_shape_id", "sparsity_pattern"}
#: What the kernel rules tell about a kernel (:func:`seer.algorithms.classify_kernel`).
KERNEL_INFO_COLUMNS: tuple[str, ...] = ("kernel_name", "kernel_family", "kernel_role", "kernel_variant")
#: Columns of the kernels table, one row per profiled kernel, in order.
KERNEL_COLUMNS: tuple[str, ...] = (*KERNEL_KEY, *KERNEL_INFO_COLUMNS, *(m.column for m in METRICS),
                                   "gpu", "cudnn_version")
#: What the CUPTI trace of one timed call recorded per kernel name (launches summed).
TRACE_FIELDS: tuple[str, ...] = ("kernel_name", "launches", "duration_ns", "grid_blocks", "block_threads",
                                 "registers", "shared_mem_bytes")
#: Columns of the traced_kernels table, one row per (run, kernel name), in launch order.
TRACED_KERNEL_COLUMNS: tuple[str, ...] = (*RUN_KEY, "kernel_idx", *TRACE_FIELDS, "kernel_family", "kernel_role",
                                          "kernel_variant")
#: Columns of the census table, one row per (census shape, math mode, algorithm), in order, as
#: stored; the pass is the algorithm's (:data:`PASS_COLUMN`, read from the registry as for the
#: measurements), so :func:`seer.dataset.build.read_census` gives it and the files need not hold it.
CENSUS_COLUMNS: tuple[str, ...] = ("math", *LAYER_COLUMNS, "shape_id", "grid", "algo", "status", "workspace_bytes",
                                   "heuristic_rank", "heuristic_math_type")
#: Nominal coverage of the intervals on predicted times, in percent (:mod:`seer.predict.uncertainty`).
INTERVAL_LEVELS: tuple[int, ...] = (80, 95)
#: The interval columns of a prediction: the bounds of ``predicted_ms`` at each level.
INTERVAL_COLUMNS: tuple[str, ...] = tuple(f"predicted_ms_{bound}{level}" for level in INTERVAL_LEVELS
                                          for bound in ("low", "high"))
#: Columns of the time PyTorch's own choice is predicted to take per layer (its default,
#: heuristic mode) with its bounds, and what seer recommends: its pick where that is surely
#: faster, else ``PYTORCH`` (:mod:`seer.predict.guard`). Empty for a model without them.
#: What ``recommended`` says where PyTorch's own choice is kept.
PYTORCH_CHOICE = "PYTORCH"
PYTORCH_COLUMNS: tuple[str, ...] = ("pytorch_ms", *(f"pytorch_{bound}{level}" for level in INTERVAL_LEVELS
                                                   for bound in ("low", "high")), "recommended")
#: Columns of a prediction, one row per (layer, algorithm predicted to run); a layer with
#: no algorithm predicted to run has one row with ``algo``, ``predicted_ms`` and ``rank``
#: empty. The interval columns bound ``predicted_ms``; ``predicted_mj`` is the energy per
#: call, empty for an algorithm without an energy model; ``pick_near_best`` is the layer's: the
#: chance that its pick (rank 1) measures within 1% of the fastest algorithm. Both are empty
#: for a model trained before they were. The PyTorch columns (:data:`PYTORCH_COLUMNS`) are the layer's.
PREDICTION_COLUMNS: tuple[str, ...] = (*LAYER_COLUMNS, "math", "algo", "predicted_ms", *INTERVAL_COLUMNS,
                                       "predicted_mj", "rank", "extrapolated", "pick_near_best", *PYTORCH_COLUMNS)
#: What a pick minimises: the time per call, or the energy per call.
OBJECTIVES: tuple[str, ...] = ("time", "energy")


@dataclass(frozen=True)
class DatasetDir:
    """The files of one GPU's dataset folder (``data/<gpu>/``): their names, in one place.

    The tidy tables (measurements, kernels, traced_kernels, census) are folders of Parquet
    parts, one per grid (:mod:`seer.dataset.tables`)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def measurements(self) -> Path:
        return self.root / "measurements"

    @property
    def sparse_measurements(self) -> Path:
        """Runs on sparse inputs (:data:`SPARSE_MEASUREMENT_COLUMNS`); only where some were collected."""
        return self.root / "sparse_measurements"

    @property
    def kernels(self) -> Path:
        return self.root / "kernels"

    @property
    def traced_kernels(self) -> Path:
        return self.root / "traced_kernels"

    @property
    def census(self) -> Path:
        return self.root / "census"

    @property
    def provenance(self) -> Path:
        return self.root / "provenance.json"

    @property
    def ceilings(self) -> Path:
        """The GPU's measured compute and memory ceilings (``seer ceilings``)."""
        return self.root / "ceilings.json"

    @property
    def train_xlsx(self) -> Path:
        return self.root / "train.xlsx"

    @property
    def test_xlsx(self) -> Path:
        return self.root / "test.xlsx"

    @property
    def test_set_ii(self) -> Path:
        """SEER's held-out layers, in SEER's format."""
        return self.root / "Test-set-II.txt"

    @property
    def test_set_ii_general(self) -> Path:
        """The held-out networks' layers of every kind, as a layer CSV."""
        return self.root / "Test-set-II-general.csv"

    @property
    def test_set_ii_times(self) -> Path:
        return self.root / "Test-set-II-times.csv"
