import importlib.metadata

import pytest

from tools.remote_exec import pool_properties


def _installed(tmp_path, records: dict[str, tuple[str, str]]):
    """A distribution lookup over real .dist-info directories: name -> (version, RECORD text)."""
    dists = {}
    for name, (version, record) in records.items():
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(record)
        dists[name] = importlib.metadata.PathDistribution(info)

    def distribution(name):
        if name not in dists:
            raise importlib.metadata.PackageNotFoundError(name)
        return dists[name]

    return distribution


def test_vllm_build_names_the_version_and_changes_with_a_rebuilt_torch(tmp_path):
    before = pool_properties.vllm_build(
        _installed(
            tmp_path / "a",
            {"vllm": ("0.26.0", "vllm/__init__.py,sha256=aaa,10\n"), "torch": ("2.9.0", "torch/x.so,sha256=bbb,20\n")},
        )
    )
    after = pool_properties.vllm_build(
        _installed(
            tmp_path / "b",
            {"vllm": ("0.26.0", "vllm/__init__.py,sha256=aaa,10\n"), "torch": ("2.9.0", "torch/x.so,sha256=ccc,20\n")},
        )
    )
    assert before.startswith("0.26.0+") and after.startswith("0.26.0+")
    assert before != after


def test_vllm_build_is_stable_for_the_same_install(tmp_path):
    records = {"vllm": ("0.26.0", "v\n"), "torch": ("2.9.0", "t\n")}
    assert pool_properties.vllm_build(_installed(tmp_path / "a", records)) == pool_properties.vllm_build(
        _installed(tmp_path / "b", records)
    )


def test_a_worker_without_vllm_is_reported(tmp_path):
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        pool_properties.vllm_build(_installed(tmp_path, {"torch": ("2.9.0", "t\n")}))


def test_parse_gpus_reads_one_model_and_driver_from_several_gpus():
    smi = "NVIDIA H200, 570.133.20\nNVIDIA H200, 570.133.20\n"
    assert pool_properties.parse_gpus(smi) == ("NVIDIA H200", "570.133.20")


def test_parse_gpus_rejects_a_worker_with_two_gpu_models():
    with pytest.raises(ValueError, match="one GPU model"):
        pool_properties.parse_gpus("NVIDIA H200, 570.133.20\nNVIDIA A100-SXM4-80GB, 570.133.20\n")


def test_format_properties_refuses_values_the_list_syntax_cannot_carry():
    properties = {"gpu": "nvidia", "vllm_build": "0.26.0+ab"}
    assert pool_properties.format_properties(properties) == "gpu=nvidia,vllm_build=0.26.0+ab"
    with pytest.raises(ValueError, match="cannot be written"):
        pool_properties.format_properties({"gpu_model": "a,b"})
