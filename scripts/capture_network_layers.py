#!/usr/bin/env python3
"""Capture the convolution layers of real networks into seer's layer CSV format.

Every network in :data:`NETWORKS` below is built with random weights (``weights=None``,
no download, auxiliary heads off), a forward hook is put on every ``nn.Conv2d`` and
``nn.Conv3d`` (and on the transposed ones, which are only listed as skipped), and one
forward pass runs under ``torch.no_grad()`` on a zero tensor of batch 1. The model is
built and run on PyTorch's ``meta`` device (shapes only, no arithmetic, a few seconds for
all networks); a network whose forward fails there is rebuilt and run on the CPU.

Output, into ``seer/data/networks/`` (or ``--out DIR``), each written atomically:

``<name>.csv``
    A header, then one row per convolution *call* in forward order (a module called
    twice gives two rows)::

        name,batch,in_ch,out_ch,groups,in_d,in_h,in_w,kernel_d,kernel_h,kernel_w,
        stride_d,stride_h,stride_w,pad_d,pad_h,pad_w,dilation_d,dilation_h,dilation_w,
        out_d,out_h,out_w

    ``name`` is the module's ``named_modules`` name. For a 2D convolution the ``*_d``
    columns are empty. Padding is numeric; ``padding='same'`` is turned into its number
    where it is symmetric, and a layer that would need asymmetric padding is skipped.
``networks.json``
    Versions (python, torch, torchvision), the command, the capture date (UTC), and per
    file: network, builder call, input shape, role (``train`` or ``test``), number of
    convolution calls, unique layers, per-kind counts and the skipped layers with reasons.

Needs torch and torchvision (run it where they are installed)::

    python3 scripts/capture_network_layers.py [--out DIR] [--only NAME ...]

Each written file is read back through seer's own reader (:func:`seer.layers.read_layers`),
which checks every row as it checks a user's layer file, and its kinds are counted by
:func:`seer.shapes.layer_kind_flags`: seer's rules, not restated here. Run it from the
repository root (seer importable).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # seer, from this checkout

from seer.layers import read_layers  # noqa: E402
from seer.shapes import LAYER_KINDS, conv_out_width, layer_kind_flags  # noqa: E402

DEFAULT_OUT = REPO / "seer" / "data" / "networks"
INDEX_NAME = "networks.json"

COLUMNS = (
    "name", "batch", "in_ch", "out_ch", "groups",
    "in_d", "in_h", "in_w",
    "kernel_d", "kernel_h", "kernel_w",
    "stride_d", "stride_h", "stride_w",
    "pad_d", "pad_h", "pad_w",
    "dilation_d", "dilation_h", "dilation_w",
    "out_d", "out_h", "out_w",
)
#: The per-axis column groups, in the order (d, h, w).
AXIS_GROUPS = ("in", "kernel", "stride", "pad", "dilation", "out")

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
# Capturing
# --------------------------------------------------------------------------------------

def numeric_padding(module) -> tuple[tuple[int, ...] | None, str]:
    """The module's padding as numbers, or ``(None, reason)`` where it is not symmetric."""
    pad = module.padding
    nd = len(module.kernel_size)
    if isinstance(pad, str):
        if pad == "valid":
            return (0,) * nd, ""
        if pad == "same":
            total = [d * (k - 1) for k, d in zip(module.kernel_size, module.dilation)]
            if any(t % 2 for t in total):
                return None, f"padding='same' with kernel {tuple(module.kernel_size)} and " \
                             f"dilation {tuple(module.dilation)} needs asymmetric padding"
            return tuple(t // 2 for t in total), ""
        return None, f"unknown padding {pad!r}"
    return tuple(int(p) for p in pad), ""


@dataclass
class Capture:
    rows: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    problems: list = field(default_factory=list)


def _hooks(model, cap: Capture):
    import torch.nn as nn

    names = {m: n for n, m in model.named_modules()}
    handles = []

    def conv_hook(module, args, output):
        name = names[module]
        x = args[0]
        nd = x.dim() - 2
        batch, in_ch = int(x.shape[0]), int(x.shape[1])
        ins = tuple(int(v) for v in x.shape[2:])
        outs = tuple(int(v) for v in output.shape[2:])
        kernel = tuple(int(v) for v in module.kernel_size)
        stride = tuple(int(v) for v in module.stride)
        dil = tuple(int(v) for v in module.dilation)
        pad, why = numeric_padding(module)
        if pad is None:
            cap.skipped.append({"name": name, "type": type(module).__name__, "reason": why,
                                "in": list(ins), "kernel": list(kernel)})
            return
        if module.padding_mode != "zeros":
            # F.pad(mode) then an unpadded convolution of the padded input: the same sizes.
            cap.problems.append(f"{name}: padding_mode={module.padding_mode!r} recorded as "
                                "zero padding of the same size")
        want = tuple(conv_out_width(*a) for a in zip(ins, kernel, stride, pad, dil))
        if want != outs or int(output.shape[1]) != module.out_channels:
            cap.problems.append(f"{name}: output {tuple(output.shape)} != formula {want}")
        if "," in name:
            raise ValueError(f"module name with a comma: {name!r}")
        axes = lambda t: (("",) + t) if nd == 2 else t  # noqa: E731 - (d, h, w), d empty in 2D
        row = {"name": name, "batch": batch, "in_ch": in_ch,
               "out_ch": int(module.out_channels), "groups": int(module.groups)}
        for group, vals in zip(AXIS_GROUPS, (ins, kernel, stride, pad, dil, outs)):
            for ax, v in zip("dhw", axes(vals)):
                row[f"{group}_{ax}"] = v
        cap.rows.append(row)

    def transposed_hook(module, args, output):
        x = args[0]
        cap.skipped.append({
            "name": names[module], "type": type(module).__name__,
            "reason": "transposed convolution (not a forward convolution)",
            "in_ch": int(x.shape[1]), "out_ch": int(output.shape[1]),
            "in": [int(v) for v in x.shape[2:]], "out": [int(v) for v in output.shape[2:]],
            "kernel": [int(v) for v in module.kernel_size],
            "stride": [int(v) for v in module.stride],
        })

    for m in model.modules():
        if isinstance(m, (nn.ConvTranspose2d, nn.ConvTranspose3d, nn.ConvTranspose1d)):
            handles.append(m.register_forward_hook(transposed_hook))
        elif isinstance(m, (nn.Conv2d, nn.Conv3d)):
            handles.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Conv1d):
            cap.problems.append(f"{names[m]}: Conv1d not captured")
    return handles


def _convolution_counter():
    """A dispatch mode that counts aten.convolution calls (to check no conv is unhooked)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten.convolution:
                self.n += 1
            return func(*args, **(kwargs or {}))

    return Count()


def capture(entry: Entry, device: str) -> tuple[Capture, str, int | None]:
    """Run ``entry`` once on ``device`` ("meta" or "cpu"); returns the capture, the device
    used and the number of aten.convolution calls seen (None if that count failed)."""
    import torch

    with torch.device(device):
        model = build(entry)
    cap = Capture()
    handles = _hooks(model, cap)
    x = torch.zeros(entry.input_shape, device=device)
    counted = None
    try:
        with torch.no_grad():
            try:
                counter = _convolution_counter()
                with counter:
                    model(x)
                counted = counter.n
            except Exception:  # the count is a check only: run once more without it
                cap.rows.clear()
                cap.skipped.clear()
                cap.problems.clear()
                model(x)
    finally:
        for h in handles:
            h.remove()
    return cap, device, counted


def read_back(path: Path) -> dict[str, int]:
    """Read a written file through seer's reader (every row checked) and count its layer kinds
    by seer's table of kinds (:data:`seer.shapes.LAYER_KINDS`; a call counts for each it is)."""
    frame = read_layers(path)
    counts = {"conv2d": int((frame["dims"] == 2).sum()), "conv3d": int((frame["dims"] == 3).sum())}
    return counts | {k: int(v) for k, v in layer_kind_flags(frame).sum().items()}


def unique_layers(rows) -> int:
    return len({tuple(r[c] for c in COLUMNS[1:]) for r in rows})


def csv_text(rows) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> what open() would have given
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


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
    import torchvision

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
        cap = dev = counted = None
        errors = []
        for device in (("meta", "cpu") if args.device == "auto" else (args.device,)):
            try:
                cap, dev, counted = capture(e, device)
                break
            except Exception as exc:  # try the next device
                errors.append(f"{device}: {type(exc).__name__}: {exc}")
        if cap is None:
            print(f"FAILED {e.name}: {errors}", flush=True)
            failures.append({"network": e.name, "errors": errors})
            continue
        hooked = len(cap.rows) + len(cap.skipped)
        if counted is not None and counted != hooked:
            cap.problems.append(f"{counted} aten.convolution calls but {hooked} hooked")
        path = args.out / f"{e.name}.csv"
        write_atomic(path, csv_text(cap.rows))
        info = {
            "file": f"{e.name}.csv",
            "network": e.name,
            "builder": e.builder,
            "input_shape": list(e.input_shape),
            "role": e.role,
            "conv_calls": len(cap.rows),
            "unique_layers": unique_layers(cap.rows),
            "kinds": read_back(path),
            "skipped": cap.skipped,
            "device": dev,
        }
        if e.note:
            info["note"] = e.note
        if errors:
            info["fallback_reasons"] = errors
        if cap.problems:
            info["problems"] = cap.problems
        files.append(info)
        kinds = {k: v for k, v in info["kinds"].items() if v}
        print(f"{e.name:34s} {dev:4s} {len(cap.rows):4d} convs {info['unique_layers']:4d} unique "
              f"{len(cap.skipped):2d} skipped {time.perf_counter() - t0:6.2f}s {kinds}"
              + (f" PROBLEMS {cap.problems}" if cap.problems else ""), flush=True)

    index = {
        "description": "Convolution layers of real networks, one row per convolution call "
                       "in forward order, batch 1; 2D rows leave the *_d columns empty.",
        "columns": list(COLUMNS),
        "kinds": {"conv2d": "2D convolutions", "conv3d": "3D convolutions",
                  **{k.name: k.description for k in LAYER_KINDS}},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
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
