"""GPU specs as data: the per-SM limits and chip rates seer needs, loaded from gpus.toml.

Used by the collector (is the detected device the one named by ``--gpu``?), by the
occupancy and waves calculations, and later by cross-GPU prediction. Adding a GPU means
adding a table to ``seer/data/gpus.toml``, not code.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path

from seer.errors import EnvironmentProblem


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model. Units are in the field names; see gpus.toml for sources."""

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
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def peak_fp32_flops_per_s(self) -> float:
        return self.peak_fp32_tflops * 1e12

    @property
    def peak_tf32_flops_per_s(self) -> float:
        return self.peak_tf32_tensor_tflops * 1e12

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def matches(self, device_name: str, sm_count: int | None = None) -> bool:
        """Whether a detected device (name, and SM count if known) is this GPU."""
        if not re.search(self.device_name_regex, device_name.strip()):
            return False
        return sm_count is None or int(sm_count) == self.sm_count


_FIELDS = {f.name: f for f in fields(GPUSpec)}


def _build(name: str, table: dict, source: str) -> GPUSpec:
    given = set(table)
    expected = set(_FIELDS) - {"name"}
    if given - expected:
        raise ValueError(f"{source}: GPU {name!r}: unknown field {sorted(given - expected)[0]!r}")
    if expected - given:
        raise ValueError(f"{source}: GPU {name!r}: missing field {sorted(expected - given)[0]!r}")
    values = {"name": name}
    for key, value in table.items():
        kind = _FIELDS[key].type
        if kind in ("int", int) and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{source}: GPU {name!r}: field {key!r} must be an integer, got {value!r}")
        if kind in ("float", float) and not isinstance(value, (int, float)):
            raise ValueError(f"{source}: GPU {name!r}: field {key!r} must be a number, got {value!r}")
        values[key] = tuple(value) if isinstance(value, list) else value
    re.compile(values["device_name_regex"])
    return GPUSpec(**values)


def load_gpu_specs(path: str | Path | None = None) -> dict[str, GPUSpec]:
    """All GPU specs, by name, from ``path`` or the packaged ``seer/data/gpus.toml``."""
    if path is None:
        return dict(_packaged_specs())
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    return {name.lower(): _build(name.lower(), table, str(path)) for name, table in data.items()}


@lru_cache(maxsize=1)
def _packaged_specs() -> dict[str, GPUSpec]:
    text = resources.files("seer").joinpath("data/gpus.toml").read_text()
    return {name.lower(): _build(name.lower(), table, "seer/data/gpus.toml")
            for name, table in tomllib.loads(text).items()}


def get_gpu_spec(name: str) -> GPUSpec:
    """The spec called ``name`` (case-insensitive), or one sentence listing known names."""
    specs = load_gpu_specs()
    try:
        return specs[name.strip().lower()]
    except KeyError:
        raise EnvironmentProblem(
            f"Unknown GPU {name!r}; known GPUs: {', '.join(sorted(specs))}.") from None


def match_device(device_name: str, sm_count: int | None = None) -> GPUSpec | None:
    """The spec that a detected device corresponds to, or None."""
    for spec in load_gpu_specs().values():
        if spec.matches(device_name, sm_count):
            return spec
    return None
