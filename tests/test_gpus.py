"""The GPU spec table: it loads, its numbers hang together, and devices map to specs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seer.errors import EnvironmentProblem
from seer.hardware.gpus import (WARP_SIZE, GPUSpec, get_gpu_spec, gpu_names, load_gpu_specs, match_device,
                                parse_gpu_specs)

REQUIRED = {"v100", "v100-pcie", "titan-xp", "titan-v", "a100", "l40", "h100", "h100-pcie", "h200", "t4", "p100", "p4", "a10",
            "l4", "l40s", "b200"}

#: Device names as CUDA/NVML report them, and the spec each must map to.
DEVICE_NAMES = {
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H200": "h200",
    "Tesla V100-SXM2-32GB": "v100",
    "Tesla V100-PCIE-32GB": "v100-pcie",
    "NVIDIA A100-SXM4-80GB": "a100",
    "NVIDIA L40": "l40",
    "NVIDIA TITAN Xp": "titan-xp",
    "NVIDIA TITAN V": "titan-v",
    "Tesla T4": "t4",
    "Tesla P100-PCIE-16GB": "p100",
    "Tesla P4": "p4",
    "NVIDIA A10": "a10",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA B200": "b200",
}

#: Sibling boards that must match no spec (or not the look-alike one).
NOT_OURS = ["NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GH200 480GB", "NVIDIA A10G", "Tesla P100-PCIE-12GB",
            "Tesla P40", "NVIDIA GB200",
            "Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB", "NVIDIA A100-SXM4-40GB",
            "NVIDIA A100 80GB PCIe", "NVIDIA TITAN X (Pascal)", "NVIDIA TITAN RTX",
            "NVIDIA GeForce RTX 4090"]


def _toml_table(name: str, spec: GPUSpec, drop: str | None = None, **override) -> str:
    """One spec written back as a TOML table, with a field dropped or changed."""
    lines = [f"[{name}]"]
    for key, value in vars(spec).items():
        if key == "name" or key == drop:
            continue
        value = override.get(key, value)
        if isinstance(value, str):
            text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif isinstance(value, tuple):
            text = "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]"
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = repr(value)
        lines.append(f"{key} = {text}")
    for key, value in override.items():
        if key not in vars(spec):
            lines.append(f"{key} = {value!r}")
    return "\n".join(lines) + "\n"


# -- the packaged table --------------------------------------------------------------------
def test_every_spec_loads_with_the_required_names():
    specs = load_gpu_specs()
    assert REQUIRED <= set(specs)
    assert gpu_names() == sorted(specs)
    for name, spec in specs.items():
        assert spec.name == name == name.lower()
        assert spec.sources and all(spec.sources)


def test_names_and_regexes_are_unique():
    specs = load_gpu_specs()
    assert len({s.name for s in specs.values()}) == len(specs)
    assert len({s.device_name_regex for s in specs.values()}) == len(specs)


def test_load_returns_a_copy_and_reading_a_path_gives_the_same_specs(tmp_path):
    specs = load_gpu_specs()
    specs.pop("h100")
    assert "h100" in load_gpu_specs()
    packaged = Path(__file__).resolve().parents[1] / "seer" / "data" / "gpus.toml"
    assert load_gpu_specs(packaged) == load_gpu_specs()


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_per_sm_limits_hang_together(name):
    spec = get_gpu_spec(name)
    assert spec.max_threads_per_sm == spec.max_warps_per_sm * WARP_SIZE
    assert spec.shared_mem_per_sm_bytes == spec.shared_mem_carveouts_bytes[-1]
    assert list(spec.shared_mem_carveouts_kib) == sorted(set(spec.shared_mem_carveouts_kib))
    major, minor = spec.compute_capability_tuple
    assert spec.sm_arch == f"sm_{major}{minor}"
    # The runtime reserves 1 KiB per block from compute capability 8.0 on.
    assert spec.reserved_shared_mem_per_block_bytes == (1024 if major >= 8 else 0)
    assert spec.shared_mem_allocation_unit_bytes == (128 if major >= 8 else 256)
    # GP100 (cc 6.0) has two processing blocks per SM, every other listed SM four (cuda_occupancy.h).
    assert spec.register_allocation_unit == 256 and spec.warp_allocation_granularity == (2 if (major, minor) == (6, 0)
                                                                                         else 4)
    if major >= 8:
        assert spec.max_shared_mem_per_block_bytes + 1024 == spec.shared_mem_per_sm_bytes
    # Tensor-core rates exist exactly where the architecture has them.
    assert (spec.peak_fp16_tensor_tflops > 0) == (major >= 7)
    assert (spec.peak_tf32_tensor_tflops > 0) == (major >= 8)


def test_carveouts_follow_the_programming_guide():
    assert get_gpu_spec("h100").shared_mem_carveouts_kib == (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
    assert get_gpu_spec("a100").shared_mem_carveouts_kib == (0, 8, 16, 32, 64, 100, 132, 164)
    assert get_gpu_spec("v100").shared_mem_carveouts_kib == (0, 8, 16, 32, 64, 96)
    assert get_gpu_spec("l40").shared_mem_carveouts_kib == (0, 8, 16, 32, 64, 100)


def test_h100_matches_what_was_measured_on_our_machine():
    spec = get_gpu_spec("h100")
    assert spec.compute_capability == "9.0"
    assert spec.sm_count == 132
    assert spec.l2_cache_bytes == 52428800          # 50 MB, as PyTorch reports
    assert spec.memory_bytes == 81559 * 2**20       # nvidia-smi
    # sm_90 limits as ncu's occupancy section reports them.
    assert (spec.max_warps_per_sm, spec.max_blocks_per_sm) == (64, 32)
    assert spec.shared_mem_per_sm_bytes == 233472
    assert spec.registers_per_sm == 65536 and spec.register_allocation_unit == 256


def test_board_specific_numbers():
    assert get_gpu_spec("h100-pcie").sm_count == 114
    h200 = get_gpu_spec("h200")
    assert h200.sm_count == 132 and h200.memory_bytes > 140e9
    assert get_gpu_spec("a100").sm_count == 108
    assert get_gpu_spec("l40").max_warps_per_sm == 48
    assert get_gpu_spec("titan-xp").compute_capability == "6.1"


def test_derived_rates_are_in_si_units():
    spec = get_gpu_spec("h100")
    assert spec.peak_fp32_flops_per_s == pytest.approx(66.9e12)
    assert spec.peak_tf32_flops_per_s == pytest.approx(494.7e12)
    assert spec.peak_fp16_tensor_flops_per_s == pytest.approx(989.4e12)
    assert spec.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert spec.compute_capability_tuple == (9, 0)
    assert spec.shared_mem_carveouts_bytes[5] == 102400
    assert spec.max_resident_blocks == 32 * 132


# -- names and devices ---------------------------------------------------------------------
def test_get_gpu_spec_is_case_insensitive():
    assert get_gpu_spec("H100") is get_gpu_spec("h100")
    assert get_gpu_spec(" H100-PCIe ").name == "h100-pcie"


def test_unknown_gpu_is_an_environment_problem_listing_the_names():
    with pytest.raises(EnvironmentProblem) as info:
        get_gpu_spec("v200")
    message = str(info.value)
    assert message.startswith("Unknown GPU 'v200'; known GPUs: ")
    listed = message.split("known GPUs: ", 1)[1].rstrip(".").split(", ")
    assert listed == sorted(load_gpu_specs())
    assert message.count(".") <= 2  # one sentence (names hold no dots)


@pytest.mark.parametrize("device, expected", sorted(DEVICE_NAMES.items()))
def test_device_names_map_to_exactly_one_spec(device, expected):
    hits = [s.name for s in load_gpu_specs().values() if s.matches(device)]
    assert hits == [expected]
    spec = match_device(device)
    assert spec is not None and spec.name == expected
    assert match_device(device, spec.sm_count).name == expected


def test_regexes_tell_the_hopper_boards_apart():
    assert match_device("NVIDIA H100 80GB HBM3", 132).name == "h100"
    assert match_device("NVIDIA H100 PCIe", 114).name == "h100-pcie"
    assert match_device("NVIDIA H200", 132).name == "h200"
    # A name that matches but an SM count that does not: not this GPU.
    assert match_device("NVIDIA H100 80GB HBM3", 114) is None
    assert match_device("NVIDIA H100 PCIe", 132) is None
    # Names may come without the "NVIDIA " prefix (older drivers) or with padding.
    assert match_device("TITAN Xp").name == "titan-xp"
    assert match_device("  NVIDIA H200 \n").name == "h200"


@pytest.mark.parametrize("device", NOT_OURS)
def test_sibling_boards_match_no_spec(device):
    assert match_device(device) is None


# -- malformed tables ----------------------------------------------------------------------
def test_a_missing_field_names_the_gpu_and_the_field(tmp_path):
    path = tmp_path / "gpus.toml"
    path.write_text(_toml_table("mygpu", get_gpu_spec("h100"), drop="sm_count"))
    with pytest.raises(ValueError, match=r"GPU 'mygpu': missing field 'sm_count'") as info:
        load_gpu_specs(path)
    assert str(path) in str(info.value)


def test_an_unknown_field_names_the_gpu_and_the_field(tmp_path):
    path = tmp_path / "gpus.toml"
    path.write_text(_toml_table("mygpu", get_gpu_spec("h100"), sm_cuont=132))
    with pytest.raises(ValueError, match=r"GPU 'mygpu': unknown field 'sm_cuont'"):
        load_gpu_specs(path)


@pytest.mark.parametrize("field, value, words", [
    ("sm_count", "132", "must be an integer"),
    ("sm_count", 132.0, "must be an integer"),
    ("max_blocks_per_sm", True, "must be an integer"),
    ("memory_bandwidth_gbs", "fast", "must be a number"),
    ("peak_fp32_tflops", -1.0, "must not be negative"),
    ("display_name", 7, "must be a non-empty string"),
    ("shared_mem_carveouts_kib", [0, "8"], "must hold only int values"),
    ("shared_mem_carveouts_kib", [8, 0, 228], "strictly ascending"),
    ("shared_mem_carveouts_kib", [0, 8, 100], "largest carveout"),
    ("sources", [], "non-empty list"),
    ("compute_capability", "9", "expected 'major.minor'"),
    ("device_name_regex", "H100(", "not a valid regular expression"),
    ("max_threads_per_sm", 2000, "max_warps_per_sm x 32"),
    ("max_shared_mem_per_block_bytes", 233472, "exceeds shared_mem_per_sm_bytes"),
])
def test_a_bad_value_names_the_gpu_and_the_field(tmp_path, field, value, words):
    path = tmp_path / "gpus.toml"
    path.write_text(_toml_table("mygpu", get_gpu_spec("h100"), **{field: value}))
    with pytest.raises(ValueError) as info:
        load_gpu_specs(path)
    message = str(info.value)
    assert "GPU 'mygpu'" in message and repr(field) in message and words in message


def test_a_good_table_from_a_file_loads(tmp_path):
    path = tmp_path / "gpus.toml"
    path.write_text(_toml_table("mygpu", get_gpu_spec("h100"), sm_count=100))
    specs = load_gpu_specs(path)
    assert list(specs) == ["mygpu"] and specs["mygpu"].sm_count == 100
    assert specs["mygpu"].memory_bandwidth_gbs == 3350.0


def test_bad_names_and_bad_toml_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="must be lowercase"):
        parse_gpu_specs(_toml_table("H100", get_gpu_spec("h100")))
    with pytest.raises(ValueError, match="not valid TOML"):
        parse_gpu_specs("[h100\nsm_count = 1")
    with pytest.raises(ValueError, match="no GPU specs"):
        parse_gpu_specs("")
    with pytest.raises(ValueError, match="must be a table"):
        parse_gpu_specs("h100 = 3")


def test_toml_helper_round_trips_every_spec():
    for name, spec in load_gpu_specs().items():
        assert parse_gpu_specs(_toml_table(name, spec))[name] == spec


def test_regexes_are_anchored():
    for spec in load_gpu_specs().values():
        assert spec.device_name_regex.startswith("^") and spec.device_name_regex.endswith("$")
        re.compile(spec.device_name_regex)
