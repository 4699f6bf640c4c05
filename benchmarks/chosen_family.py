"""Which algorithm family PyTorch's ``cudnn.benchmark`` picks, per GPU and cuDNN version.

    python benchmarks/chosen_family.py --out benchmarks/results/chosen-family

Strict FP32, fp32 NCHW. seer's H100 and H200 (cuDNN 9.19, every layer kind; the family read from
the kernels CUPTI traced for ``PYTORCH_BENCHMARK`` under ``fma``) and NeuSight's public V100 PCIe,
T4, P100 and P4 (cuDNN 8.9.2, 3x3 stride-1 layers; the family read from the kernels its rows
list). Also seer's GPUs on the public data's kind of layer alone. The family of a call: Winograd
where a kernel's name says so, else FFT, else GEMM (im2col or an explicit GEMM), else direct, else
implicit GEMM. Writes ``chosen-family.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from seer.algorithms import kernels_family
from seer.dataset.build import read_measurements
from seer.dataset.tables import read_parts
from seer.schema import DatasetDir
from seer.training.cross_gpu import PUBLIC_FILES


def seer_families(dataset: Path) -> pd.DataFrame:
    traced = read_parts(DatasetDir(dataset).traced_kernels, columns=["shape_id", "math", "algo", "kernel_name"])
    traced = traced[(traced["algo"] == "PYTORCH_BENCHMARK") & (traced["math"] == "fma")]
    families = traced.groupby("shape_id")["kernel_name"].agg(list).map(kernels_family).rename("family")
    layers = read_measurements(DatasetDir(dataset).measurements, ["shape_id", "kernel_h", "stride_h", "pad_h", "groups",
                                                                  "dims", "kernel_w", "stride_w", "pad_w"])
    layers = layers.drop_duplicates("shape_id").set_index("shape_id")
    three = ((layers["kernel_h"] == 3) & (layers["kernel_w"] == 3) & (layers["stride_h"] == 1)
             & (layers["stride_w"] == 1) & (layers["pad_h"] == 1) & (layers["pad_w"] == 1) & (layers["groups"] == 1)
             & (layers["dims"] == 2))
    return families.to_frame().join(three.rename("public_kind"))


def shares(families: pd.Series) -> dict:
    return {"layers": int(len(families)),
            "percent": {k: round(100 * v / len(families), 1) for k, v in families.value_counts().items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--public", type=Path, default=Path("data/external/neusight-conv"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    results = {}
    for gpu in ("h100", "h200"):
        found = seer_families(args.data_dir / gpu)
        results[gpu] = {"cudnn": "9.19.0", "every kind": shares(found["family"]),
                        "3x3 stride 1 padding 1": shares(found.loc[found["public_kind"] == True, "family"])}  # noqa: E712
    for name, gpu in PUBLIC_FILES.items():
        raw = pd.read_csv(args.public / name)
        raw = raw[(raw["Kernel_Szie"] == 3) & (raw["Stride"] == 1) & (raw["Padding"] == 1)]
        results[gpu] = {"cudnn": "8.9.2", "3x3 stride 1 padding 1": shares(
            raw["Kernels"].fillna("").map(lambda k: kernels_family(k.split(";"))))}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chosen-family.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["# The family of PyTorch's cudnn.benchmark choice, strict FP32", "",
             "`python benchmarks/chosen_family.py --out benchmarks/results/chosen-family`; seer's GPUs: traced kernels "
             "of PYTORCH_BENCHMARK (fma); public GPUs: NeuSight's rows (single-call timing, zero-valued inputs).", "",
             "| GPU | cuDNN | layers of | count | implicit GEMM % | Winograd % | FFT % | GEMM % | direct % |",
             "|---|---|---|---|---|---|---|---|---|"]
    for gpu, r in results.items():
        for kind in ("3x3 stride 1 padding 1", "every kind"):
            if kind in r:
                p = r[kind]["percent"]
                lines.append(f"| {gpu} | {r['cudnn']} | {kind} | {r[kind]['layers']} | "
                             + " | ".join(f"{p.get(f, 0.0):.1f}" for f in ("implicit_gemm", "winograd", "fft", "gemm",
                                                                         "direct")) + " |")
    (args.out / "chosen-family.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
