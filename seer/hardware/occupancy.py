"""Theoretical occupancy and waves: the CUDA occupancy calculator's arithmetic, in Python.

This module serves the dataset and feature stages. Nsight Compute reports, for the main
kernel of every measured run, how many blocks of it one SM can hold under each resource
(``launch__occupancy_limit_blocks`` / ``_warps`` / ``_registers`` / ``_shared_mem``);
SEER's waves feature divides the grid by the blocks the whole GPU can hold. The functions
here compute the same numbers from a kernel's launch configuration and a
:class:`~seer.hardware.gpus.GPUSpec`, so that they can be predicted for a GPU the kernel never ran
on, and checked against what ncu measured. The dataset stage derives its
``blocks_per_sm``, ``waves`` and SEER's ``B_max`` and whole waves with
:func:`blocks_per_sm`, :func:`b_max`, :func:`waves` and :func:`whole_waves`, so that each
formula is written once.

The rules follow NVIDIA's CUDA Occupancy Calculator and the driver's occupancy API:

* warps per block: ``ceil(threads / 32)``;
* warps limit: ``floor(max_warps_per_sm / warps_per_block)``;
* blocks limit: ``max_blocks_per_sm``;
* registers limit: registers are allocated per warp, ``ceil(regs * 32 / unit) * unit``;
  the SM holds ``floor(registers_per_sm / regs_per_warp)`` such warps, rounded down to
  the warp allocation granularity (one warp scheduler's register file each), and whole
  blocks of them: ``floor(warps / warps_per_block)``;
* shared memory limit: a block takes its static + dynamic shared memory plus the
  runtime's reserved 1 KiB (cc >= 8.0), rounded up to the allocation unit; the SM holds
  ``floor(carveout / that)`` blocks. Because of the reserve, a kernel without shared
  memory is still limited on cc >= 8.0 (ncu reports 8 blocks for an 8 KiB carveout);
  only where a block takes no shared memory at all (cc < 8.0) is the limit
  ``max_blocks_per_sm``. Without a given carveout, the driver's default is assumed: the
  smallest configuration in ``shared_mem_carveouts_kib`` that lets the most blocks be
  resident.

With the carveout ncu reports (``launch__shared_mem_config_size``), these rules give
ncu's four limits for every kernel profiled on seer's H100 (tests/test_occupancy.py).
cuDNN's kernels often run with a larger carveout than the default assumed here, which
changes the shared-memory limit but never the resident blocks per SM.

Like ncu, each limit is reported on its own (a warps limit of 64 for one-warp blocks is
not capped at the blocks limit of 32); :func:`blocks_per_sm` (and
:attr:`OccupancyLimits.blocks_per_sm`) is their minimum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from seer.hardware.gpus import WARP_SIZE, GPUSpec

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: The four limits, in the order of :class:`OccupancyLimits`' fields, and the ncu metrics
#: and seer dataset columns that hold them.
LIMIT_NAMES = ("blocks", "warps", "registers", "shared_mem")
NCU_METRICS = {name: f"launch__occupancy_limit_{name}" for name in LIMIT_NAMES}
COLUMNS = {name: f"occupancy_limit_{name}" for name in LIMIT_NAMES}


@dataclass(frozen=True)
class OccupancyLimits:
    """Blocks of one kernel an SM can hold under each resource, as Nsight Compute reports.

    Attributes
    ----------
    blocks : int
        Limit from the SM's maximum resident blocks (``launch__occupancy_limit_blocks``).
    warps : int
        Limit from the SM's maximum resident warps (``..._warps``).
    registers : int
        Limit from the register file (``..._registers``).
    shared_mem : int
        Limit from the shared-memory carveout (``..._shared_mem``).
    """

    blocks: int
    warps: int
    registers: int
    shared_mem: int

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks per SM: the smallest of the four limits (:func:`blocks_per_sm`)."""
        return int(blocks_per_sm(self.as_dict()))

    @property
    def limiter(self) -> str:
        """Name of the binding limit (``"blocks"``, ``"warps"``, ``"registers"`` or
        ``"shared_mem"``); on a tie, the first of those in that order."""
        return self.limiters[0]

    @property
    def limiters(self) -> tuple[str, ...]:
        """Names of every limit equal to :attr:`blocks_per_sm`, in field order."""
        least = self.blocks_per_sm
        return tuple(name for name in LIMIT_NAMES if getattr(self, name) == least)

    def as_dict(self) -> dict[str, int]:
        """The four limits by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_ncu(cls, record: Mapping[str, Any]) -> OccupancyLimits:
        """The limits in an ncu record or a seer kernel row.

        Parameters
        ----------
        record : mapping
            Holds either the ncu metric names (``launch__occupancy_limit_blocks``, ...)
            or seer's column names (``occupancy_limit_blocks``, ...), e.g. a row of
            ``data/<gpu>/kernels/``.

        Returns
        -------
        OccupancyLimits
        """
        values = {}
        for name in LIMIT_NAMES:
            for key in (NCU_METRICS[name], COLUMNS[name]):
                if key in record:
                    values[name] = int(record[key])
                    break
            else:
                raise KeyError(f"no {NCU_METRICS[name]} or {COLUMNS[name]} in the record")
        return cls(**values)


# -- the arithmetic, on numpy integer arrays (scalars are 0-d arrays) ----------------------
def _ceil_to(value: np.ndarray, unit: int) -> np.ndarray:
    return -(-value // unit) * unit


def _first(array: np.ndarray, mask: np.ndarray) -> Any:
    """The first value of ``array`` where ``mask`` holds, for error messages."""
    return np.asarray(array)[np.asarray(mask)].ravel()[0].item()


def _int_array(value: Any, argument: str) -> np.ndarray:
    """``value`` as an int64 array; whole floats are accepted, anything else refused."""
    array = np.asarray(value)
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer)
                                   or np.issubdtype(array.dtype, np.floating)):
        raise ValueError(f"{argument} must be integers, got {value!r}")
    if np.issubdtype(array.dtype, np.floating):
        finite = np.isfinite(array)
        safe = np.where(finite, array, 0.0)
        bad = ~finite | (safe != np.floor(safe))
        if np.any(bad):
            raise ValueError(f"{argument} must be whole numbers, got {_first(array, bad)}")
    return array.astype(np.int64)


def _validate(spec: GPUSpec, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray,
              names: tuple[str, str, str]) -> None:
    """Raise ValueError for launches the GPU would refuse, naming the argument."""
    t_name, r_name, s_name = names
    checks = (
        (threads < 1, t_name, "must be at least 1"),
        (threads > spec.max_threads_per_block, t_name,
         f"exceeds max_threads_per_block ({spec.max_threads_per_block}) of {spec.name}"),
        (regs < 0, r_name, "must not be negative"),
        (regs > spec.max_registers_per_thread, r_name,
         f"exceeds max_registers_per_thread ({spec.max_registers_per_thread}) of {spec.name}"),
        (smem < 0, s_name, "must not be negative"),
        (smem > spec.max_shared_mem_per_block_bytes, s_name,
         f"exceeds max_shared_mem_per_block_bytes ({spec.max_shared_mem_per_block_bytes}) "
         f"of {spec.name}"),
    )
    for mask, name, message in checks:
        if np.any(mask):
            source = {t_name: threads, r_name: regs, s_name: smem}[name]
            raise ValueError(f"{name} = {_first(source, mask)} {message}")
    # The hardware refuses a block whose registers, with its warps rounded up to the
    # warp allocation granularity, exceed the per-block register limit.
    warps = -(-threads // WARP_SIZE)
    regs_per_warp = _ceil_to(regs * WARP_SIZE, spec.register_allocation_unit)
    per_block = regs_per_warp * _ceil_to(warps, spec.warp_allocation_granularity)
    too_many = per_block > spec.max_registers_per_block
    if np.any(too_many):
        raise ValueError(
            f"{r_name} = {_first(regs, too_many)} is too many for a block of "
            f"{_first(threads, too_many)} threads on {spec.name}: the block would need "
            f"{_first(per_block, too_many)} registers, more than max_registers_per_block "
            f"({spec.max_registers_per_block})")


def _limits_arrays(spec: GPUSpec, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray,
                   config: np.ndarray | None) -> dict[str, np.ndarray]:
    """The four limits (and the carveout used) for validated integer arrays."""
    threads, regs, smem = np.broadcast_arrays(threads, regs, smem)
    if config is not None:
        config = np.broadcast_to(config, threads.shape)
    warps_per_block = -(-threads // WARP_SIZE)

    blocks = np.full(threads.shape, spec.max_blocks_per_sm, dtype=np.int64)
    warps = spec.max_warps_per_sm // warps_per_block

    # Registers: per warp, in allocation units; warps per SM by registers, rounded down to
    # the warp allocation granularity; whole blocks of those. No registers: no limit
    # beyond the block limit.
    regs_per_warp = _ceil_to(regs * WARP_SIZE, spec.register_allocation_unit)
    granularity = spec.warp_allocation_granularity
    reg_warps = (spec.registers_per_sm // np.maximum(regs_per_warp, 1)) // granularity * granularity
    registers = np.where(regs_per_warp > 0, reg_warps // warps_per_block, spec.max_blocks_per_sm)

    # Shared memory: the block's bytes plus the runtime's reserve, in allocation units.
    smem_per_block = _ceil_to(smem + spec.reserved_shared_mem_per_block_bytes,
                              spec.shared_mem_allocation_unit_bytes)
    has_smem = smem_per_block > 0
    safe = np.maximum(smem_per_block, 1)
    if config is None:
        carveouts = np.asarray(spec.shared_mem_carveouts_bytes, dtype=np.int64)
        others = np.minimum(np.minimum(blocks, warps), registers)
        # The most blocks any carveout allows, then the smallest carveout that allows it.
        target = np.minimum(carveouts[-1] // safe, others)
        fits = (carveouts[None, :] // safe.reshape(-1, 1)) >= target.reshape(-1, 1)
        config = carveouts[np.argmax(fits, axis=1)].reshape(threads.shape)
        config = np.where(has_smem, config, carveouts[0])
    shared_mem = np.where(has_smem, config // safe, spec.max_blocks_per_sm)

    return {"blocks": blocks, "warps": warps, "registers": registers,
            "shared_mem": shared_mem, "shared_mem_config_bytes": np.array(config, dtype=np.int64)}


_ARGUMENTS = ("threads_per_block", "registers_per_thread", "shared_mem_per_block_bytes",
              "shared_mem_config_bytes")


# -- public API ----------------------------------------------------------------------------
def occupancy_limits_array(spec: GPUSpec, threads_per_block: Any, registers_per_thread: Any,
                           shared_mem_per_block_bytes: Any, shared_mem_config_bytes: Any = None,
                           *, names: tuple[str, str, str, str] = _ARGUMENTS) -> dict[str, np.ndarray]:
    """Vectorised :func:`occupancy_limits`: the four limits for arrays of launches.

    Parameters
    ----------
    spec : GPUSpec
        The GPU.
    threads_per_block, registers_per_thread, shared_mem_per_block_bytes : array-like
        Launch configurations, broadcast against each other (lists, NumPy arrays or
        pandas Series of whole numbers).
    shared_mem_config_bytes : array-like, optional
        Carveouts in bytes, as ncu's ``launch__shared_mem_config_size``; where omitted
        or NaN, the driver's default (see :func:`occupancy_limits`).
    names : tuple of str
        How error messages call the four inputs (column names, for a table).

    Returns
    -------
    dict of str to numpy.ndarray
        Int64 arrays ``blocks``, ``warps``, ``registers`` and ``shared_mem`` (the four
        limits) and ``shared_mem_config_bytes`` (the carveout they assume).

    Raises
    ------
    ValueError
        If any launch is one the GPU would refuse; the message names the input.
    """
    arrays = [_int_array(value, name) for value, name in
              zip((threads_per_block, registers_per_thread, shared_mem_per_block_bytes), names)]
    given = None if shared_mem_config_bytes is None else np.asarray(shared_mem_config_bytes, dtype=float)
    shapes = [a.shape for a in arrays] + ([] if given is None else [given.shape])
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"{', '.join(names)} have shapes {shapes} that do not broadcast") from None
    arrays = [np.broadcast_to(a, shape) for a in arrays]
    _validate(spec, *arrays, names=names[:3])
    limits = _limits_arrays(spec, *arrays, config=None)
    if given is None:
        return limits
    known = ~np.isnan(given)
    if not known.any():
        return limits
    config = _int_array(np.where(known, given, limits["shared_mem_config_bytes"]), names[3])
    if np.any(config < 0):
        raise ValueError(f"{names[3]} = {_first(config, config < 0)} must not be negative")
    return _limits_arrays(spec, *arrays, config=config)


def occupancy_limits(spec: GPUSpec, threads_per_block: int, registers_per_thread: int,
                     shared_mem_per_block_bytes: int,
                     shared_mem_config_bytes: int | None = None) -> OccupancyLimits:
    """The four per-SM block limits of one kernel launch, as Nsight Compute reports them.

    Parameters
    ----------
    spec : GPUSpec
        The GPU.
    threads_per_block : int
        Threads in one block (the product of the block dimensions).
    registers_per_thread : int
        Registers the kernel uses per thread (ncu ``launch__registers_per_thread``).
    shared_mem_per_block_bytes : int
        Static plus dynamic shared memory of one block, without the runtime's reserve.
    shared_mem_config_bytes : int, optional
        The SM's shared-memory carveout during the launch (ncu
        ``launch__shared_mem_config_size``). When omitted, the smallest carveout in
        ``spec.shared_mem_carveouts_kib`` that maximises the resident blocks, as the
        driver picks by default.

    Returns
    -------
    OccupancyLimits

    Raises
    ------
    ValueError
        For a launch the GPU would refuse (too many threads, registers or shared memory
        for one block), naming the argument.

    Examples
    --------
    >>> from seer.hardware.gpus import get_gpu_spec
    >>> occupancy_limits(get_gpu_spec("h100"), 256, 128, 48 * 1024)
    OccupancyLimits(blocks=32, warps=8, registers=2, shared_mem=2)
    """
    limits = _scalar_limits(spec, threads_per_block, registers_per_thread,
                            shared_mem_per_block_bytes, shared_mem_config_bytes)
    return OccupancyLimits(**{name: int(limits[name]) for name in LIMIT_NAMES})


def _scalar_limits(spec: GPUSpec, threads: Any, regs: Any, smem: Any,
                   config: Any) -> dict[str, np.ndarray]:
    for value, name in zip((threads, regs, smem, config), _ARGUMENTS):
        if np.ndim(value):
            raise ValueError(f"{name} must be a single number; use occupancy_limits_array "
                             f"or occupancy_limits_frame for many launches")
    return occupancy_limits_array(spec, threads, regs, smem, config)


def default_shared_mem_config(spec: GPUSpec, threads_per_block: int, registers_per_thread: int,
                              shared_mem_per_block_bytes: int) -> int:
    """The carveout the driver picks by default for a launch, in bytes.

    The smallest of ``spec.shared_mem_carveouts_kib`` that lets the most blocks be
    resident. (cuDNN's kernels often get a larger one; ncu's
    ``launch__shared_mem_config_size`` tells what a launch really got. The resident
    blocks per SM are the same either way.)

    Parameters
    ----------
    spec : GPUSpec
        The GPU.
    threads_per_block, registers_per_thread, shared_mem_per_block_bytes : int
        As for :func:`occupancy_limits`.

    Returns
    -------
    int
        Carveout in bytes.
    """
    limits = _scalar_limits(spec, threads_per_block, registers_per_thread,
                            shared_mem_per_block_bytes, None)
    return int(limits["shared_mem_config_bytes"])


def theoretical_occupancy(spec: GPUSpec, threads_per_block: int, registers_per_thread: int,
                          shared_mem_per_block_bytes: int,
                          shared_mem_config_bytes: int | None = None) -> float:
    """Theoretical occupancy: resident warps over the SM's maximum warps.

    Parameters
    ----------
    spec, threads_per_block, registers_per_thread, shared_mem_per_block_bytes, shared_mem_config_bytes
        As for :func:`occupancy_limits`.

    Returns
    -------
    float
        ``blocks_per_sm * ceil(threads_per_block / 32) / max_warps_per_sm``, in [0, 1].
    """
    limits = occupancy_limits(spec, threads_per_block, registers_per_thread,
                              shared_mem_per_block_bytes, shared_mem_config_bytes)
    warps_per_block = -(-int(threads_per_block) // WARP_SIZE)
    return limits.blocks_per_sm * warps_per_block / spec.max_warps_per_sm


def occupancy_limits_frame(spec: GPUSpec, frame: pd.DataFrame, *,
                           threads_column: str = "block_threads",
                           registers_column: str = "registers",
                           shared_mem_column: str = "shared_mem_bytes",
                           config_column: str | None = "shared_mem_config_bytes") -> pd.DataFrame:
    """Vectorised :func:`occupancy_limits` over the kernels of a table.

    Parameters
    ----------
    spec : GPUSpec
        The GPU.
    frame : pandas.DataFrame
        One launch per row, with integer columns for threads per block, registers per
        thread and shared memory per block (static plus dynamic, bytes).
    threads_column, registers_column, shared_mem_column : str
        Names of those columns (seer's dataset names by default).
    config_column : str or None
        Column with the launch's shared-memory carveout in bytes (ncu's
        ``launch__shared_mem_config_size``). Used when present in ``frame``; rows where
        it is missing, and all rows when the column is absent or None, get the driver's
        default carveout.

    Returns
    -------
    pandas.DataFrame
        Same index as ``frame``; int64 columns ``occupancy_limit_blocks``,
        ``occupancy_limit_warps``, ``occupancy_limit_registers`` and
        ``occupancy_limit_shared_mem`` (the names of seer's kernel table).

    Raises
    ------
    ValueError
        If a column is missing or holds a launch the GPU would refuse; the message names
        the column.
    """
    import pandas as pd

    names = (threads_column, registers_column, shared_mem_column)
    for name in names:
        if name not in frame.columns:
            raise ValueError(f"column {name!r} is missing (columns: {list(frame.columns)})")
        if frame[name].isna().any():
            raise ValueError(f"column {name!r} has missing values")
    config = None
    if config_column is not None and config_column in frame.columns:
        config = frame[config_column].to_numpy(dtype=float)
    labels = tuple(f"column {name!r}" for name in (*names, config_column))
    limits = occupancy_limits_array(spec, *(frame[name].to_numpy() for name in names), config,
                                    names=labels)
    return pd.DataFrame({COLUMNS[name]: limits[name] for name in LIMIT_NAMES}, index=frame.index)


def blocks_per_sm(limits: Mapping[str, Any]) -> np.ndarray:
    """Resident blocks per SM of each launch: the smallest of its four limits.

    Parameters
    ----------
    limits : mapping
        The four limits by seer's column names (``occupancy_limit_blocks``, ..., e.g. a
        kernels or measurements frame), or else by limit name (``blocks``, ..., as
        :func:`occupancy_limits_array` returns them); scalars or arrays.

    Returns
    -------
    numpy.ndarray
        The minimum per launch, of the inputs' dtype. A missing (NaN) limit is skipped,
        so a run that was not profiled, with all four missing, gets NaN.
    """
    # All four by column name, or all four by limit name: a kernels frame also holds
    # "registers" (per thread), which is no limit.
    for keys in ([COLUMNS[name] for name in LIMIT_NAMES], list(LIMIT_NAMES)):
        if all(key in limits for key in keys):
            break
    else:
        raise KeyError(f"the four limits are missing: give {', '.join(COLUMNS.values())} "
                       f"or {', '.join(LIMIT_NAMES)}")
    values = [_as_array(limits[key]) for key in keys]
    # fmin, unlike minimum, skips NaN where another limit is known.
    return np.fmin.reduce(np.broadcast_arrays(*values))


def b_max(blocks_per_sm: Any, sm_count: int) -> Any:
    """SEER's ``B_max``: the blocks of one kernel the whole GPU holds at once.

    ``blocks_per_sm * sm_count``; NaN where ``blocks_per_sm`` is missing (NaN), of the
    inputs' dtype otherwise (an int for scalar inputs).

    Raises
    ------
    ValueError
        If ``blocks_per_sm`` or ``sm_count`` is not a positive whole number.
    """
    per_sm = _count_array(blocks_per_sm, "blocks_per_sm")
    sms = _count_array(sm_count, "sm_count")
    if np.any(per_sm < 1):
        raise ValueError(f"blocks_per_sm = {_first(per_sm, per_sm < 1)} must be positive "
                         f"(the kernel cannot launch)")
    if np.any(sms < 1) or np.any(np.isnan(sms)):
        raise ValueError(f"sm_count = {sm_count} must be positive")
    return _scalar_or_array(per_sm * sms)


def waves(grid_blocks: Any, blocks_per_sm: Any, sm_count: int) -> Any:
    """SEER's waves: the grid over the blocks the whole GPU holds at once.

    ``grid_blocks / B_max`` (:func:`b_max`). A value below 1 means part of the GPU idles.

    Parameters
    ----------
    grid_blocks : int or array-like
        Blocks in the grid; NaN where unknown (a run that was not profiled).
    blocks_per_sm : int or array-like
        Resident blocks per SM (:func:`blocks_per_sm`); positive, or NaN where unknown.
    sm_count : int
        SMs on the GPU (:attr:`GPUSpec.sm_count`).

    Returns
    -------
    float or numpy.ndarray
        A float for scalar inputs, else an array of floats, NaN where an input is NaN.

    Raises
    ------
    ValueError
        If ``blocks_per_sm`` or ``sm_count`` is not positive, ``grid_blocks`` negative,
        or a known value is not a whole number.
    """
    grid, capacity = _wave_inputs(grid_blocks, blocks_per_sm, sm_count)
    return _scalar_or_array(grid / capacity)


def whole_waves(grid_blocks: Any, blocks_per_sm: Any, sm_count: int) -> Any:
    """Whole waves: ``ceil(grid_blocks / B_max)``.

    Parameters
    ----------
    grid_blocks, blocks_per_sm, sm_count
        As for :func:`waves`.

    Returns
    -------
    int, float or numpy.ndarray
        Exact integers for integer inputs (an int for scalars); for float inputs, floats
        holding whole numbers, NaN where an input is NaN.
    """
    grid, capacity = _wave_inputs(grid_blocks, blocks_per_sm, sm_count)
    if np.issubdtype(grid.dtype, np.floating) or np.issubdtype(capacity.dtype, np.floating):
        # Float quotients of integers below 2**53 are never rounded across a whole number.
        return _scalar_or_array(np.ceil(grid / capacity))
    return _scalar_or_array(-(-grid // capacity))


def _as_array(value: Any) -> np.ndarray:
    """``value`` as a NumPy array; pandas' nullable integers become float64, NA as NaN."""
    array = np.asarray(value)
    if array.dtype == object and hasattr(value, "to_numpy"):
        array = value.to_numpy(dtype=float, na_value=np.nan)
    return array


def _count_array(value: Any, argument: str) -> np.ndarray:
    """``value`` as int64, or as float64 where it is float, NaN kept (unknown: a run that
    was not profiled); a known value that is not a whole number is refused."""
    array = _as_array(value)
    if not np.issubdtype(array.dtype, np.floating):
        return _int_array(array, argument)
    finite = np.isfinite(array)
    safe = np.where(finite, array, 0.0)
    bad = np.isinf(array) | (safe != np.floor(safe))
    if np.any(bad):
        raise ValueError(f"{argument} must be whole numbers, got {_first(array, bad)}")
    return array.astype(np.float64)


def _scalar_or_array(result: np.ndarray) -> Any:
    return result.item() if np.ndim(result) == 0 else result


def _wave_inputs(grid_blocks: Any, blocks_per_sm: Any, sm_count: int) -> tuple[np.ndarray, np.ndarray]:
    grid = _count_array(grid_blocks, "grid_blocks")
    if np.any(grid < 0):
        raise ValueError(f"grid_blocks = {_first(grid, grid < 0)} must not be negative")
    return grid, np.asarray(b_max(blocks_per_sm, sm_count))
