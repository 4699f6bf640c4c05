#!/usr/bin/env python3
"""Capture the convolution layers of real networks into seer's layer CSV format.

Every network in :data:`NETWORKS` below is built with random weights (``weights=None``,
no download, auxiliary heads off) on PyTorch's ``meta`` device, and its convolutions are
found by :func:`seer.torch.conv_calls`, the code ``seer network`` runs: one forward pass
of a zero input of batch 1 on ``meta`` (shapes only, a few seconds for all networks), or
on the CPU for a network whose forward fails there.

Output, into ``seer/data/networks/`` (or ``--out DIR``), each written atomically:

``<name>.csv``
    A header, then one row per convolution *call* in forward order (a module called
    twice gives two rows)::

        name,batch,in_ch,out_ch,groups,in_d,in_h,in_w,kernel_d,kernel_h,kernel_w,
        stride_d,stride_h,stride_w,pad_d,pad_h,pad_w,dilation_d,dilation_h,dilation_w,
        out_d,out_h,out_w

    ``name`` is the module's ``named_modules`` name. For a 2D convolution the ``*_d``
    columns are empty. Each row is the convolution cuDNN gets (:mod:`seer.torch.layers`
    says how ``padding='same'``, padding modes and 1D convolutions become one).
``networks.json``
    Versions (python, torch, torchvision), the command, the capture date (UTC), and per
    file: network, builder call, input shape, role (``train`` or ``test``), number of
    convolution calls, unique layers, per-kind counts and the skipped layers with reasons.

Needs torch and torchvision (run it where they are installed)::

    python3 scripts/capture_network_layers.py [--out DIR] [--only NAME ...]

Each written file is read back through seer's own reader (:func:`seer.layers.files.read_layers`),
which checks every row as it checks a user's layer file, and its kinds are counted by
:func:`seer.layers.shapes.layer_kind_flags`: seer's rules, not restated here. Run it from the
repository root (seer importable).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # seer, from this checkout

from seer.layers.files import format_layers, read_layers  # noqa: E402
from seer.layers.shapes import LAYER_COLUMNS, LAYER_KINDS, layer_kind_flags  # noqa: E402
from seer.output import AtomicOutput  # noqa: E402

DEFAULT_OUT = REPO / "seer" / "data" / "networks"
INDEX_NAME = "networks.json"

# --------------------------------------------------------------------------------------
# The networks
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One capture: a network at one input shape, written to ``<name>.csv``."""

    name: str
    builder: str           # the builder call as text, also what is evaluated
    input_shape: tuple     # NCHW or NCDHW, batch 1
    role: str              # "train" or "test" (held out, never trained on)
    note: str = ""


TV = "torchvision.models."
_SEG = "weights=None, weights_backbone=None, aux_loss=False"

NETWORKS: tuple[Entry, ...] = (
    # --- training ("general networks" grids) ---------------------------------------
    Entry("mobilenet_v2", TV + "mobilenet_v2(weights=None)", (1, 3, 224, 224), "train"),
    Entry("efficientnet_b0", TV + "efficientnet_b0(weights=None)", (1, 3, 224, 224), "train"),
    Entry("resnext50_32x4d", TV + "resnext50_32x4d(weights=None)", (1, 3, 224, 224), "train"),
    Entry("regnet_y_400mf", TV + "regnet_y_400mf(weights=None)", (1, 3, 224, 224), "train"),
    Entry("convnext_tiny", TV + "convnext_tiny(weights=None)", (1, 3, 224, 224), "train"),
    Entry("deeplabv3_resnet50_520", TV + f"segmentation.deeplabv3_resnet50({_SEG})",
          (1, 3, 520, 520), "train"),
    Entry("deeplabv3_resnet50_512x1024", TV + f"segmentation.deeplabv3_resnet50({_SEG})",
          (1, 3, 512, 1024), "train"),
    Entry("resnet50_800x1216", TV + "resnet50(weights=None)", (1, 3, 800, 1216), "train",
          "a detection backbone's input size (Mask R-CNN's 800x1216 after resize)"),
    Entry("r3d_18", TV + "video.r3d_18(weights=None)", (1, 3, 16, 112, 112), "train"),
    Entry("mc3_18", TV + "video.mc3_18(weights=None)", (1, 3, 16, 112, 112), "train"),
    Entry("cosmoflow", "cosmoflow()", (1, 4, 128, 128, 128), "train",
          "hand-written: see build_cosmoflow in scripts/capture_network_layers.py"),
    # --- test (held out: general Test-set-II) ----------------------------------------
    Entry("inception_v3", TV + "inception_v3(weights=None, aux_logits=False, init_weights=False)",
          (1, 3, 299, 299), "test"),
    Entry("mobilenet_v3_large", TV + "mobilenet_v3_large(weights=None)", (1, 3, 224, 224), "test"),
    Entry("shufflenet_v2_x1_0", TV + "shufflenet_v2_x1_0(weights=None)", (1, 3, 224, 224), "test"),
    Entry("regnet_x_800mf", TV + "regnet_x_800mf(weights=None)", (1, 3, 224, 224), "test"),
    Entry("resnext101_32x8d", TV + "resnext101_32x8d(weights=None)", (1, 3, 224, 224), "test"),
    Entry("efficientnet_b3", TV + "efficientnet_b3(weights=None)", (1, 3, 300, 300), "test"),
    Entry("deeplabv3_mobilenet_v3_large_520",
          TV + f"segmentation.deeplabv3_mobilenet_v3_large({_SEG})", (1, 3, 520, 520), "test"),
    Entry("fcn_resnet50_384x640", TV + f"segmentation.fcn_resnet50({_SEG})",
          (1, 3, 384, 640), "test"),
    Entry("r2plus1d_18", TV + "video.r2plus1d_18(weights=None)", (1, 3, 16, 112, 112), "test"),
    Entry("resnet18_128x1024", TV + "resnet18(weights=None)", (1, 3, 128, 1024), "test",
          "a spectrogram-like input (128 mel bands x 1024 frames, 3 channels)"),
    Entry("unet3d", "unet3d()", (1, 1, 96, 96, 96), "test",
          "hand-written: see build_unet3d in scripts/capture_network_layers.py"),
)


def build_cosmoflow():
    """CosmoFlow, the MLPerf HPC CosmoFlow benchmark network (input 4 x 128^3).

    Sources: Mathuriya et al., "CosmoFlow: Using Deep Learning to Learn the Universe at
    Scale", SC18 (arXiv:1808.04728); the MLPerf HPC reference, github.com/mlcommons/hpc
    ``cosmoflow/models/cosmoflow.py`` with ``configs/cosmo.yaml`` (``conv_size: 32``,
    ``n_conv_layers: 5``, channels ``conv_size * 2**i``, each conv followed by LeakyReLU
    and ``MaxPool3D(2)``); and NVIDIA's PyTorch implementation of that benchmark
    (``get_standard_cosmoflow_model``: ``Conv3d(kernel_size=3, stride=1, padding=1)``,
    LeakyReLU(0.3), ``MaxPool3d(2, 2)``, ``n_conv_filters=32``, 5 layers). The TensorFlow
    reference's default ``kernel_size=2`` with ``padding='same'`` needs asymmetric padding,
    so the PyTorch version's kernel 3 / padding 1 is used. Channels: 4 -> 32, 64, 128, 256,
    512 (the references double every layer; none stops at 256). Then dense 128, 64, 4.
    """
    import torch.nn as nn

    class CosmoFlow(nn.Module):
        def __init__(self, in_ch=4, base=32, n_conv=5, spatial=128):
            super().__init__()
            blocks = []
            c = in_ch
            for i in range(n_conv):
                o = base * 2 ** i
                blocks.append(nn.Sequential(
                    nn.Conv3d(c, o, kernel_size=3, stride=1, padding=1),
                    nn.LeakyReLU(0.3),
                    nn.MaxPool3d(kernel_size=2, stride=2),
                ))
                c = o
            self.conv_seq = nn.Sequential(*blocks)
            flat = c * (spatial // 2 ** n_conv) ** 3
            self.head = nn.Sequential(
                nn.Flatten(), nn.Linear(flat, 128), nn.LeakyReLU(0.3),
                nn.Linear(128, 64), nn.LeakyReLU(0.3), nn.Linear(64, 4), nn.Tanh(),
            )

        def forward(self, x):
            return self.head(self.conv_seq(x)) * 1.2

    return CosmoFlow()


def _unet3d_module(in_ch: int, widths, n_classes: int, decoder: bool):
    """The 3D U-Net of Çiçek et al. (MICCAI 2016, arXiv:1606.06650), same-padded.

    Each analysis level has two 3x3x3 convolutions (each with BatchNorm and ReLU), the
    first of which already doubles or sets the channels as in the paper's Fig. 1
    (32/64, 64/128, 128/256, bottom 256/512), then 2x2x2 max-pooling with stride 2. Each
    synthesis level: a 2x2x2 up-convolution with stride 2 (``ConvTranspose3d``, channels
    kept as in the paper), concatenation with the same-resolution analysis output, two
    3x3x3 convolutions down to the level's width; a final 1x1x1 convolution to
    ``n_classes`` (3 in the paper). The paper used unpadded convolutions (132x132x116 in,
    44x44x28 out); padding 1 is used here, as common ports do, so that any input size
    divisible by 8 works.
    """
    import torch
    import torch.nn as nn

    def double(cin, mid, cout):
        return nn.Sequential(
            nn.Conv3d(cin, mid, 3, padding=1), nn.BatchNorm3d(mid), nn.ReLU(inplace=True),
            nn.Conv3d(mid, cout, 3, padding=1), nn.BatchNorm3d(cout), nn.ReLU(inplace=True),
        )

    class UNet3D(nn.Module):
        def __init__(self):
            super().__init__()
            # widths: ((mid, out) per level, bottom last), e.g. ((32,64),(64,128),(128,256),(256,512))
            self.down = nn.ModuleList()
            c = in_ch
            for mid, out in widths:
                self.down.append(double(c, mid, out))
                c = out
            self.pool = nn.MaxPool3d(2, 2)
            self.decoder = decoder
            if decoder:
                self.up = nn.ModuleList()
                self.dec = nn.ModuleList()
                for _, skip in reversed(widths[:-1]):
                    self.up.append(nn.ConvTranspose3d(c, c, kernel_size=2, stride=2))
                    self.dec.append(double(c + skip, skip, skip))
                    c = skip
                self.final = nn.Conv3d(c, n_classes, kernel_size=1)

        def forward(self, x):
            skips = []
            for i, level in enumerate(self.down):
                x = level(x)
                if i < len(self.down) - 1:
                    skips.append(x)
                    x = self.pool(x)
            if not self.decoder:
                return x
            for up, dec in zip(self.up, self.dec):
                x = dec(torch.cat([skips.pop(), up(x)], dim=1))
            return self.final(x)

    return UNet3D()


def build_unet3d():
    """The held-out 3D U-Net (Çiçek et al. 2016), 1 input channel, 3 classes."""
    return _unet3d_module(1, ((32, 64), (64, 128), (128, 256), (256, 512)), 3, decoder=True)


LOCAL_BUILDERS: dict[str, Callable] = {
    "cosmoflow": build_cosmoflow,
    "unet3d": build_unet3d,
}


def build(entry: Entry):
    """Build ``entry``'s model (in the current default device) and return it in eval mode."""
    call = entry.builder
    if call.startswith(TV):
        import torchvision

        env = {"torchvision": torchvision}
        model = eval(call, env)  # noqa: S307 - our own table
    else:
        fn = call.split("(", 1)[0]
        model = LOCAL_BUILDERS[fn]()
    return model.eval()


# --------------------------------------------------------------------------------------
# Capturing: seer.torch.conv_calls, the same code `seer network` runs
# --------------------------------------------------------------------------------------

def capture(entry: Entry, device: str):
    """Build ``entry`` (:func:`seer.torch.build_model`) and find its convolutions (:func:`seer.torch.conv_calls`)."""
    from seer.torch import build_model, conv_calls

    return conv_calls(build_model(lambda: build(entry)), entry.input_shape, device=device)


def read_back(path: Path) -> dict[str, int]:
    """Read a written file through seer's reader (every row checked) and count its layer kinds
    by seer's table of kinds (:data:`seer.layers.shapes.LAYER_KINDS`; a call counts for each it is)."""
    frame = read_layers(path)
    counts = {"conv2d": int((frame["dims"] == 2).sum()), "conv3d": int((frame["dims"] == 3).sum())}
    return counts | {k: int(v) for k, v in layer_kind_flags(frame).sum().items()}


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with AtomicOutput(path) as handle:
        handle.write(text)


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help=f"output folder (default: {DEFAULT_OUT.relative_to(REPO)})")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="capture only these entries")
    ap.add_argument("--device", choices=("auto", "meta", "cpu"), default="auto",
                    help="auto: meta, and the CPU for a network that fails on meta")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--list", action="store_true", help="list the entries and exit")
    args = ap.parse_args(argv)

    if args.list:
        for e in NETWORKS:
            print(f"{e.name:34s} {e.role:5s} {'x'.join(map(str, e.input_shape)):18s} {e.builder}")
        return 0

    import torch

    try:
        import torchvision
    except ImportError:  # enough for the hand-written networks
        torchvision = None

    if args.threads:
        torch.set_num_threads(args.threads)
    entries = NETWORKS
    if args.only:
        unknown = set(args.only) - {e.name for e in NETWORKS}
        if unknown:
            ap.error(f"unknown entries: {sorted(unknown)}")
        entries = tuple(e for e in NETWORKS if e.name in args.only)

    start = time.perf_counter()
    files, failures = [], []
    for e in entries:
        t0 = time.perf_counter()
        try:
            found = capture(e, args.device)
        except Exception as exc:  # noqa: BLE001 - one network's failure is recorded, the rest go on
            print(f"FAILED {e.name}: {exc}", flush=True)
            failures.append({"network": e.name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        path = args.out / f"{e.name}.csv"
        write_atomic(path, format_layers(found.per_call(), fmt="csv"))
        skipped = found.skipped.to_dict(orient="records")
        info = {
            "file": f"{e.name}.csv",
            "network": e.name,
            "builder": e.builder,
            "input_shape": list(e.input_shape),
            "role": e.role,
            "conv_calls": int(found.layers["calls"].sum()),
            "unique_layers": int(len(found.layers.drop(columns=["name", "call", "calls"]).drop_duplicates())),
            "kinds": read_back(path),
            "skipped": skipped,
            "device": found.device,
        }
        if e.note:
            info["note"] = e.note
        files.append(info)
        kinds = {k: v for k, v in info["kinds"].items() if v}
        print(f"{e.name:34s} {found.device:4s} {info['conv_calls']:4d} convs {info['unique_layers']:4d} unique "
              f"{len(skipped):2d} skipped {time.perf_counter() - t0:6.2f}s {kinds}", flush=True)

    index = {
        "description": "Convolution layers of real networks, one row per convolution call "
                       "in forward order, batch 1; 2D rows leave the *_d columns empty.",
        "columns": ["name", *(c for c in LAYER_COLUMNS if c != "dims")],
        "kinds": {"conv2d": "2D convolutions", "conv3d": "3D convolutions",
                  **{k.name: k.description for k in LAYER_KINDS}},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__ if torchvision else None,
        "command": " ".join(["python3", "scripts/capture_network_layers.py"] + sys.argv[1:]),
        "captured_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "capture_seconds": round(time.perf_counter() - start, 2),
        "files": files,
    }
    if failures:
        index["failures"] = failures
    if args.only and (args.out / INDEX_NAME).exists():
        # keep the other files' records
        old = json.loads((args.out / INDEX_NAME).read_text(encoding="utf-8"))
        mine = {f["file"] for f in files}
        index["files"] = [f for f in old.get("files", []) if f["file"] not in mine] + files
        order = {f"{e.name}.csv": i for i, e in enumerate(NETWORKS)}
        index["files"].sort(key=lambda f: order.get(f["file"], len(order)))
    write_atomic(args.out / INDEX_NAME, json.dumps(index, indent=1) + "\n")
    print(f"{len(files)} files in {args.out} in {index['capture_seconds']} s"
          + (f"; {len(failures)} FAILED" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
