"""GPU specs as data: the per-SM limits and chip rates seer needs, loaded from gpus.toml.

This module serves the collection stage (``seer collect --gpu NAME``: is the detected
device the one the user named?), the dataset stage (occupancy, waves and roofline
utilisations need the SM count, per-SM limits and peak rates; see :mod:`seer.hardware.occupancy`
and :mod:`seer.dataset.build`) and, later, cross-GPU prediction, where these numbers become
features. A GPU is described by data, not constants in code: adding one means adding a
table to ``seer/data/gpus.toml``, which :func:`load_gpu_specs` reads and checks.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from seer.errors import EnvironmentProblem

#: Threads per warp on every NVIDIA GPU seer knows.
WARP_SIZE = 32

#: Where the packaged spec table lives, inside the ``seer`` package.
PACKAGED_SPECS = "data/gpus.toml"

_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_CC_PATTERN = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model: its identity, per-SM limits and chip-level rates.

    Units are in the field names; ``seer/data/gpus.toml`` documents the conventions and
    the source of every number (``sources``).

    Attributes
    ----------
    name : str
        Short lowercase key used on the command line (``h100``).
    display_name : str
        Human-readable model name.
    device_name_regex : str
        Regular expression searched in the device name that CUDA/NVML report.
    compute_capability : str
        ``"major.minor"``, e.g. ``"9.0"``.
    architecture : str
        Architecture name, e.g. ``"Hopper"``.
    sm_count : int
        Streaming multiprocessors on this board.
    max_threads_per_sm, max_warps_per_sm, max_blocks_per_sm : int
        Resident-thread, -warp and -block limits of one SM.
    max_threads_per_block : int
        Largest thread block a launch may use.
    registers_per_sm, max_registers_per_thread, max_registers_per_block : int
        Register file size (32-bit registers) and per-thread/per-block limits.
    register_allocation_unit : int
        Registers are allocated per warp in multiples of this many registers.
    warp_allocation_granularity : int
        Register-limited warps per SM are rounded down to a multiple of this (the SM
        sub-partitions); also the unit of the hardware's per-block register check.
    shared_mem_per_sm_bytes : int
        Largest shared-memory carveout of one SM.
    max_shared_mem_per_block_bytes : int
        Opt-in maximum of shared memory for one block (excluding the reserved part).
    shared_mem_allocation_unit_bytes : int
        Shared memory is allocated to a block in multiples of this.
    reserved_shared_mem_per_block_bytes : int
        Shared memory the CUDA runtime reserves in every block (1024 on cc >= 8.0).
    shared_mem_carveouts_kib : tuple of int
        Shared-memory sizes an SM can be configured to, in KiB, ascending.
    l2_cache_bytes, memory_bytes : int
        L2 cache size and device memory size.
    memory_bandwidth_gbs : float
        Peak DRAM bandwidth, 1e9 bytes/s.
    boost_clock_mhz : int
        Boost SM clock.
    peak_fp32_tflops, peak_tf32_tensor_tflops, peak_fp16_tensor_tflops : float
        Dense peak rates, 1e12 FLOP/s; 0 where the GPU has no such units.
    sources : tuple of str
        Where the numbers come from.
    """

    name: str
    display_name: str
    device_name_regex: str
    compute_capability: str
    architecture: str
    sm_count: int
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    registers_per_sm: int
    max_registers_per_thread: int
    max_registers_per_block: int
    register_allocation_unit: int
    warp_allocation_granularity: int
    shared_mem_per_sm_bytes: int
    max_shared_mem_per_block_bytes: int
    shared_mem_allocation_unit_bytes: int
    reserved_shared_mem_per_block_bytes: int
    shared_mem_carveouts_kib: tuple[int, ...]
    l2_cache_bytes: int
    memory_bytes: int
    memory_bandwidth_gbs: float
    boost_clock_mhz: int
    peak_fp32_tflops: float
    peak_tf32_tensor_tflops: float
    peak_fp16_tensor_tflops: float
    sources: tuple[str, ...]

    @property
    def compute_capability_tuple(self) -> tuple[int, int]:
        """Compute capability as ``(major, minor)``, e.g. ``(9, 0)``."""
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def sm_arch(self) -> str:
        """The ``sm_XY`` name of the compute capability, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability_tuple
        return f"sm_{major}{minor}"

    @property
    def shared_mem_carveouts_bytes(self) -> tuple[int, ...]:
        """The possible shared-memory configurations of one SM, in bytes, ascending."""
        return tuple(kib * 1024 for kib in self.shared_mem_carveouts_kib)

    @property
    def peak_fp32_flops_per_s(self) -> float:
        """Dense FP32 (FMA pipe) peak, FLOP/s."""
        return self.peak_fp32_tflops * 1e12

    @property
    def peak_tf32_flops_per_s(self) -> float:
        """Dense TF32 tensor-core peak, FLOP/s (0 without tensor cores for TF32)."""
        return self.peak_tf32_tensor_tflops * 1e12

    @property
    def peak_fp16_tensor_flops_per_s(self) -> float:
        """Dense FP16 tensor-core peak with FP32 accumulation, FLOP/s."""
        return self.peak_fp16_tensor_tflops * 1e12

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """Peak DRAM bandwidth, bytes/s."""
        return self.memory_bandwidth_gbs * 1e9

    @property
    def max_resident_blocks(self) -> int:
        """Blocks the whole GPU can hold at once at the block limit alone."""
        return self.max_blocks_per_sm * self.sm_count

    def matches(self, device_name: str, sm_count: int | None = None) -> bool:
        """Whether a detected device is this GPU.

        Parameters
        ----------
        device_name : str
            Name as CUDA or NVML report it, e.g. ``"NVIDIA H100 80GB HBM3"``.
        sm_count : int, optional
            The device's multiprocessor count; when given it must equal ``sm_count``.

        Returns
        -------
        bool
        """
        if not re.search(self.device_name_regex, device_name.strip()):
            return False
        return sm_count is None or int(sm_count) == self.sm_count


_FIELDS = {f.name: f for f in fields(GPUSpec)}
_EXPECTED = [name for name in _FIELDS if name != "name"]
_TUPLE_ITEM = {"shared_mem_carveouts_kib": int, "sources": str}


def _fail(source: str, gpu: str, message: str) -> ValueError:
    return ValueError(f"{source}: GPU {gpu!r}: {message}")


def _check_value(source: str, gpu: str, key: str, value: Any) -> Any:
    """Type-check one field and convert it to its GPUSpec type."""
    kind = _FIELDS[key].type
    if kind in ("int", int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(source, gpu, f"field {key!r} must be an integer, got {value!r}")
        if value < 0:
            raise _fail(source, gpu, f"field {key!r} must not be negative, got {value!r}")
        return value
    if kind in ("float", float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(source, gpu, f"field {key!r} must be a number, got {value!r}")
        if value < 0:
            raise _fail(source, gpu, f"field {key!r} must not be negative, got {value!r}")
        return float(value)
    if kind in ("str", str):
        if not isinstance(value, str) or not value:
            raise _fail(source, gpu, f"field {key!r} must be a non-empty string, got {value!r}")
        return value
    item = _TUPLE_ITEM[key]
    if not isinstance(value, list) or not value:
        raise _fail(source, gpu, f"field {key!r} must be a non-empty list, got {value!r}")
    for element in value:
        if isinstance(element, bool) or not isinstance(element, item):
            raise _fail(source, gpu, f"field {key!r} must hold only {item.__name__} values, "
                                     f"got {element!r}")
    return tuple(value)


def _check_consistency(source: str, spec: GPUSpec) -> None:
    """Cross-field checks: catch a mistyped number before it skews occupancy."""
    gpu = spec.name

    def bad(key: str, message: str) -> ValueError:
        return _fail(source, gpu, f"field {key!r}: {message}")

    if not _CC_PATTERN.match(spec.compute_capability):
        raise bad("compute_capability", f"expected 'major.minor', got {spec.compute_capability!r}")
    try:
        re.compile(spec.device_name_regex)
    except re.error as exc:
        raise bad("device_name_regex", f"not a valid regular expression ({exc})") from None
    for key in ("sm_count", "max_warps_per_sm", "max_blocks_per_sm", "max_threads_per_block",
                "registers_per_sm", "max_registers_per_thread", "max_registers_per_block",
                "register_allocation_unit", "warp_allocation_granularity",
                "shared_mem_allocation_unit_bytes"):
        if getattr(spec, key) <= 0:
            raise bad(key, "must be positive")
    if spec.max_threads_per_sm != spec.max_warps_per_sm * WARP_SIZE:
        raise bad("max_threads_per_sm", f"must be max_warps_per_sm x {WARP_SIZE} "
                                        f"= {spec.max_warps_per_sm * WARP_SIZE}")
    if spec.max_threads_per_block > spec.max_threads_per_sm:
        raise bad("max_threads_per_block", "exceeds max_threads_per_sm")
    if spec.max_registers_per_block > spec.registers_per_sm:
        raise bad("max_registers_per_block", "exceeds registers_per_sm")
    if spec.registers_per_sm % spec.warp_allocation_granularity:
        raise bad("warp_allocation_granularity", "must divide registers_per_sm")
    carveouts = spec.shared_mem_carveouts_kib
    if list(carveouts) != sorted(set(carveouts)):
        raise bad("shared_mem_carveouts_kib", f"must be strictly ascending, got {list(carveouts)}")
    if carveouts[-1] * 1024 != spec.shared_mem_per_sm_bytes:
        raise bad("shared_mem_carveouts_kib", f"the largest carveout ({carveouts[-1]} KiB) must "
                                              f"equal shared_mem_per_sm_bytes ({spec.shared_mem_per_sm_bytes})")
    if spec.max_shared_mem_per_block_bytes + spec.reserved_shared_mem_per_block_bytes > \
            spec.shared_mem_per_sm_bytes:
        raise bad("max_shared_mem_per_block_bytes",
                  "plus reserved_shared_mem_per_block_bytes exceeds shared_mem_per_sm_bytes")


def _build(name: str, table: Any, source: str) -> GPUSpec:
    """Check one TOML table and turn it into a GPUSpec."""
    if not _NAME_PATTERN.match(name):
        raise ValueError(f"{source}: GPU name {name!r} must be lowercase letters, digits and '-'")
    if not isinstance(table, dict):
        raise ValueError(f"{source}: GPU {name!r} must be a table of fields, got {table!r}")
    unknown = sorted(set(table) - set(_EXPECTED))
    if unknown:
        raise _fail(source, name, f"unknown field {unknown[0]!r}")
    missing = [key for key in _EXPECTED if key not in table]
    if missing:
        raise _fail(source, name, f"missing field {missing[0]!r}")
    values = {key: _check_value(source, name, key, table[key]) for key in _EXPECTED}
    spec = GPUSpec(name=name, **values)
    _check_consistency(source, spec)
    return spec


def parse_gpu_specs(text: str, source: str = "<string>") -> dict[str, GPUSpec]:
    """Parse and check a GPU spec table given as TOML text.

    Parameters
    ----------
    text : str
        TOML with one table per GPU.
    source : str
        Name used in error messages (a path).

    Returns
    -------
    dict of str to GPUSpec
        Specs by name, in file order.

    Raises
    ------
    ValueError
        If the TOML is malformed, or an entry has a missing, unknown or invalid field;
        the message names the GPU and the field.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source}: not valid TOML ({exc})") from None
    if not data:
        raise ValueError(f"{source}: no GPU specs")
    return {name: _build(name, table, source) for name, table in data.items()}


def spec_from_fields(values: Mapping[str, Any], source: str = "<fields>") -> GPUSpec:
    """A GPUSpec from its fields, as ``dataclasses.asdict`` gives them (and JSON returns
    them), checked field by field like the packaged table; ValueError names the field."""
    if not isinstance(values, Mapping) or not isinstance(values.get("name"), str):
        raise ValueError(f"{source}: a GPU spec needs a name")
    table = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items() if k != "name"}
    return _build(values["name"], table, source)


def load_gpu_specs(path: str | Path | None = None) -> dict[str, GPUSpec]:
    """All GPU specs, by name, from ``path`` or the packaged ``seer/data/gpus.toml``.

    Parameters
    ----------
    path : str or Path, optional
        A TOML file with the same layout; the packaged table when omitted.

    Returns
    -------
    dict of str to GPUSpec
        Specs by name, in file order. A new dict each call; the specs are frozen.

    Raises
    ------
    ValueError
        If an entry has a missing, unknown or invalid field (the message names the GPU
        and the field), or the file is not valid TOML.
    """
    if path is None:
        return dict(_packaged_specs())
    return parse_gpu_specs(Path(path).read_text(encoding="utf-8"), str(path))


@lru_cache(maxsize=1)
def _packaged_specs() -> dict[str, GPUSpec]:
    text = resources.files("seer").joinpath(PACKAGED_SPECS).read_text(encoding="utf-8")
    return parse_gpu_specs(text, f"seer/{PACKAGED_SPECS}")


def gpu_names() -> list[str]:
    """The names of the packaged GPU specs, sorted."""
    return sorted(_packaged_specs())


def get_gpu_spec(name: str) -> GPUSpec:
    """The packaged spec called ``name``, case-insensitively.

    Parameters
    ----------
    name : str
        A GPU name such as ``"h100"`` or ``"H100"``.

    Returns
    -------
    GPUSpec

    Raises
    ------
    EnvironmentProblem
        If no spec has that name; the message lists the known names.
    """
    specs = _packaged_specs()
    key = name.strip().lower()
    if key in specs:
        return specs[key]
    raise EnvironmentProblem(f"Unknown GPU {name!r}; known GPUs: {', '.join(sorted(specs))}.")


def match_device(name: str, sm_count: int | None = None) -> GPUSpec | None:
    """The packaged spec that a detected device corresponds to.

    Parameters
    ----------
    name : str
        Device name as CUDA or NVML report it, e.g. ``"NVIDIA H100 PCIe"``.
    sm_count : int, optional
        The device's multiprocessor count; when given, a spec must have the same count.

    Returns
    -------
    GPUSpec or None
        The first spec (in file order) whose ``device_name_regex`` matches and whose SM
        count agrees, or None when no spec describes the device.
    """
    for spec in _packaged_specs().values():
        if spec.matches(name, sm_count):
            return spec
    return None
