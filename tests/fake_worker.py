"""A stand-in for the GPU worker, speaking its file protocol, for CPU tests of the orchestrator.

It times nothing: rows carry status "ok" and a made-up time, and are only ever written to
temporary directories by tests. Like the real worker it arms the parent-death signal first
(seer.collect.children.die_with_parent). FAKE_CRASH (``shape_id:math:algo``) makes it die
by SIGSEGV on that item, FAKE_HANG makes it hang there, FAKE_FAIL_AT_START makes it exit at
once. FAKE_ITEM_SECONDS is how long each item takes: a number, or ``command=seconds`` pairs
joined by commas (``profile=30``: only profiling is slow). FAKE_PID_FILE names a file to
which it appends ``<pid> <command>`` at start-up. FAKE_TRACED gives timing rows a trace. A
sparse shape's rows carry its sparse fields and the share of zeros of an input made on the CPU
with the collector's own function (seer.layers.sparsity.sparse_input).
"""

import argparse
import json
import os
import signal
import sys
import time

from seer.collect.children import die_with_parent
from seer.algorithms import PASSES
from seer.collect.protocol import CENSUS, DONE, EVENT, PROFILED, ROW, census_pass, emitter, start_event
from seer.layers.shapes import ConvShape
from seer.layers.sparsity import input_crowding, sparse_input, zero_fraction

#: Per pass, the fake census's three algorithms: one without workspace, a GEMM, an FFT.
CENSUS_ALGORITHMS = {"fwd": ("IMPLICIT_GEMM", "GEMM", "FFT"),
                     "bwd_data": ("BWD_DATA_ALGO_1", "BWD_DATA_ALGO_0", "BWD_DATA_FFT"),
                     "bwd_filter": ("BWD_FILTER_ALGO_1", "BWD_FILTER_ALGO_0", "BWD_FILTER_FFT")}

die_with_parent()

parser = argparse.ArgumentParser()
parser.add_argument("command")
parser.add_argument("--plan")
parser.add_argument("--results")
parser.add_argument("--out")
parser.add_argument("--stop-file")
args, _ = parser.parse_known_args()

if os.environ.get("FAKE_PID_FILE"):
    with open(os.environ["FAKE_PID_FILE"], "a") as pid_file:
        pid_file.write(f"{os.getpid()} {args.command}\n")


def item_seconds(command):
    text = os.environ.get("FAKE_ITEM_SECONDS", "0")
    if "=" not in text:
        return float(text)
    return float(dict(pair.split("=") for pair in text.split(",")).get(command, 0))


seconds = item_seconds(args.command)

if os.environ.get("FAKE_FAIL_AT_START"):
    print("ImportError: pretend the GPU stack is broken", file=sys.stderr)
    sys.exit(1)

emit = emitter(args.results)

census = []
for line in open(args.plan):
    work = json.loads(line)
    if args.stop_file and os.path.exists(args.stop_file):
        break
    for math, algo in work["items"]:
        key = f"{work['shape_id']}:{math}:{algo}"
        emit(start_event(work["shape_id"], math, algo))
        if key == os.environ.get("FAKE_CRASH"):
            os.kill(os.getpid(), signal.SIGSEGV)
        if key == os.environ.get("FAKE_HANG"):
            time.sleep(3600)
        time.sleep(seconds)
        if args.command == "census":
            # The item names its pass. GEMM (ALGO_0 of a backward pass) asks for an im2col
            # buffer on even channel counts (4096 bytes times the pass's place in PASSES), for
            # nothing otherwise; FFT is "not supported" for stride > 1, as cuDNN answers.
            pass_ = census_pass(algo)
            plain, gemm, fft = CENSUS_ALGORITHMS[pass_]
            shape = work["shape"]
            workspace = {plain: 0, gemm: 4096 * (1 + PASSES.index(pass_)) if shape["in_ch"] % 2 == 0 else 0}
            unsupported = [fft] if shape["stride_h"] > 1 else []
            if not unsupported:
                workspace[fft] = 1 << 20
            census.append({"shape_id": work["shape_id"], "math": math, "grid": work["grid"], **shape, "pass": pass_,
                           "status": "ok", "workspace_bytes": workspace, "not_supported": unsupported,
                           "workspace_cap_bytes": 1 << 30, "heuristic": [[gemm, 0], [plain, 1]]})
            if len(census) >= 2:
                emit({EVENT: CENSUS, "records": census})
                census = []
            continue
        if args.command == "profile":
            emit({EVENT: PROFILED, "shape_id": work["shape_id"], "math": math, "algo": algo,
                  "status": "ok"})
            continue
        row = {"shape_id": work["shape_id"], "math": math, "algo": algo, "grid": work["grid"],
               **work["shape"], "status": "ok", "time_ms": 1.0 + len(algo) / 10}
        if work.get("sparsity"):  # a sparse shape: its fields, and the zeros of an input made as the worker makes it
            row |= {k: work[k] for k in ("sparsity", "sparsity_pattern", "dense_shape_id")}
            x = sparse_input(ConvShape.from_mapping(work["shape"]).input_dims, work["sparsity"],
                             work["sparsity_pattern"], seed=int(work["shape_id"], 16) & 0x7FFFFFFF)
            row["input_zero_fraction"], row["input_crowding"] = zero_fraction(x), input_crowding(x)
            row["time_ms"] *= 1 - work["sparsity"]
        # FAKE_WIDE names an item whose repetitions spread widely (a host hiccup).
        row["time_ms_iqr"] = 0.5 * row["time_ms"] if key == os.environ.get("FAKE_WIDE") else 0.001
        # FAKE_TRACED ("ALGO=kernels,..."): those algorithms' rows carry a CUPTI trace.
        traced = dict(pair.split("=") for pair in os.environ.get("FAKE_TRACED", "").split(",") if pair)
        if algo in traced:
            row |= {"trace_status": "ok", "traced_kernels": [["fake_kernel", int(traced[algo]), 1000, 1, 32, 0, 0]]}
        emit({EVENT: ROW, "row": row})
if census:
    emit({EVENT: CENSUS, "records": census})
emit({EVENT: DONE})
