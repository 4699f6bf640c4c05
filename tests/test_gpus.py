import pytest

from seer.errors import EnvironmentProblem
from seer.gpus import get_gpu_spec, load_gpu_specs, match_device


def test_specs_load_with_the_required_gpus():
    specs = load_gpu_specs()
    assert {"v100", "titan-xp", "titan-v", "a100", "l40", "h100", "h200"} <= set(specs)
    h100 = specs["h100"]
    assert (h100.sm_count, h100.max_warps_per_sm, h100.max_blocks_per_sm) == (132, 64, 32)
    assert h100.shared_mem_per_sm_bytes == 233472 and h100.register_allocation_unit == 256
    assert h100.compute_capability_tuple == (9, 0)
    assert all(spec.sources for spec in specs.values())


@pytest.mark.parametrize("device, sms, name", [
    ("NVIDIA H100 80GB HBM3", 132, "h100"), ("NVIDIA H100 PCIe", 114, "h100-pcie"),
    ("NVIDIA H200", 132, "h200"), ("Tesla V100-SXM2-32GB", 80, "v100"),
    ("NVIDIA A100-SXM4-80GB", 108, "a100"), ("NVIDIA L40", 142, "l40"),
    ("NVIDIA TITAN Xp", 30, "titan-xp"), ("NVIDIA TITAN V", 80, "titan-v"),
])
def test_detected_devices_match_exactly_one_spec(device, sms, name):
    assert match_device(device, sms).name == name
    assert [s.name for s in load_gpu_specs().values() if s.matches(device, sms)] == [name]


def test_a_device_with_other_sm_count_is_not_the_spec():
    assert match_device("NVIDIA H100 80GB HBM3", 114) is None
    assert match_device("NVIDIA L40S", 142) is None


def test_unknown_name_lists_known_ones():
    with pytest.raises(EnvironmentProblem, match="known GPUs: a100, h100"):
        get_gpu_spec("v200")
    assert get_gpu_spec(" H100 ").name == "h100"


def test_malformed_spec_file_names_gpu_and_field(tmp_path):
    from importlib import resources

    packaged = resources.files("seer").joinpath("data/gpus.toml").read_text()
    h100 = packaged[packaged.index("[h100]"):packaged.index("[h100-pcie]")]
    path = tmp_path / "g.toml"
    path.write_text(h100.replace("[h100]", "[x100]").replace("sm_count = 132\n", ""))
    with pytest.raises(ValueError, match="x100.*missing field 'sm_count'"):
        load_gpu_specs(path)
    path.write_text(h100.replace("sm_count = 132", "sm_count = 1.5"))
    with pytest.raises(ValueError, match="sm_count.*integer"):
        load_gpu_specs(path)
    path.write_text(h100 + "colour = 'green'\n")
    with pytest.raises(ValueError, match="unknown field 'colour'"):
        load_gpu_specs(path)
