"""The one table of Nsight Compute metrics that seer collects, and how runs roll them up.

Each :class:`Metric` names the tidy column it becomes, the ncu metric it comes from,
its unit, and the rule that combines the kernels of one algorithm run (an algorithm may
launch many kernels): ``sum`` (time, traffic, instruction counts), ``main`` (taken from
the main kernel: launch configuration, occupancy, waves) or ``time_weighted`` (a
utilisation averaged over the kernels by their durations). Only :mod:`seer.collect.ncu` and
:mod:`seer.dataset.build` read this table; nothing else names an ncu metric.

:data:`RUN_COLUMNS` is the one table of the profile columns of a run (the measurements
table): each one's unit, meaning, and the metrics and conversion it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    column: str
    ncu_name: str
    unit: str
    rollup: str  # "sum" | "main" | "time_weighted"
    description: str
    group: str  # the profiling group (one ncu run) that collects it; see PROFILE_GROUPS
    # False for a metric added to its group after records of the group were collected: those
    # records lack it, and a run's profile is complete without it.
    required: bool = True


#: Each group is collected by its own ncu run over a chunk of runs, and each must stay one
#: replay pass per kernel: every extra pass replays the kernel with memory saved and
#: restored. Measured with benchmarks/ncu_cost.py --passes (docs/collecting.md):
#: launch statistics and SASS counts (instrumented) take one pass and
#: cost no more than launch statistics alone; all the hardware counters of ``counters``
#: fit one pass; the TF32 tensor-op counter shares no pass with the tensor-pipe instruction
#: counter, nor do SASS counts with hardware counters. Each
#: ncu run also costs a fixed time to start and a time per kernel however few metrics it
#: asks for, so fewer groups is faster: the three ``core`` groups beat the five used before
#: (benchmarks/results/h100-ncu-cost.json).
PROFILE_GROUPS = ("launch_sass", "counters", "tensor", "pipes", "throughput")
#: Groups only default-math runs need: CUDNN_FMA_MATH restricts cuDNN to FMA kernels, so
#: fma runs execute no tensor-core operations.
DEFAULT_MATH_ONLY_GROUPS = frozenset({"tensor"})
#: What ``--ncu-metrics`` may ask for.
METRIC_SETS = {"core": PROFILE_GROUPS[:3], "full": PROFILE_GROUPS}
#: Groups of earlier collections, whose records stay valid: what each one measured.
#: ``counters`` replaced the three of them (one ncu run instead of three).
RETIRED_GROUPS: dict[str, tuple[str, ...]] = {
    "memory": ("dram_read_bytes", "dram_write_bytes", "l2_bytes"),
    "cache": ("l1_bytes", "inst_tensor", "sm_clock_hz"),
    "time_occupancy": ("duration_ns", "achieved_occupancy_pct"),
}

METRICS: tuple[Metric, ...] = (
    # Launch statistics cost no replay; SASS thread-instruction counts come from one
    # instrumented pass.
    Metric("grid_blocks", "launch__grid_size", "blocks", "main", "thread blocks launched", "launch_sass"),
    Metric("block_threads", "launch__block_size", "threads", "main", "threads per block", "launch_sass"),
    Metric("registers", "launch__registers_per_thread", "registers", "main", "registers per thread",
           "launch_sass"),
    Metric("shared_mem_static_bytes", "launch__shared_mem_per_block_static", "bytes", "main",
           "static shared memory per block", "launch_sass"),
    Metric("shared_mem_dynamic_bytes", "launch__shared_mem_per_block_dynamic", "bytes", "main",
           "dynamic shared memory per block", "launch_sass"),
    Metric("shared_mem_config_bytes", "launch__shared_mem_config_size", "bytes", "main",
           "shared memory carveout the driver configured for the launch", "launch_sass"),
    Metric("occupancy_limit_blocks", "launch__occupancy_limit_blocks", "blocks", "main",
           "resident blocks per SM allowed by the block-count limit", "launch_sass"),
    Metric("occupancy_limit_registers", "launch__occupancy_limit_registers", "blocks", "main",
           "resident blocks per SM allowed by registers", "launch_sass"),
    Metric("occupancy_limit_shared_mem", "launch__occupancy_limit_shared_mem", "blocks", "main",
           "resident blocks per SM allowed by shared memory", "launch_sass"),
    Metric("occupancy_limit_warps", "launch__occupancy_limit_warps", "blocks", "main",
           "resident blocks per SM allowed by warps", "launch_sass"),
    Metric("waves", "launch__waves_per_multiprocessor", "waves", "main",
           "grid blocks / (resident blocks per SM x SMs)", "launch_sass"),
    Metric("inst_ffma", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "thread-inst", "sum",
           "fp32 fused multiply-adds (thread level)", "launch_sass"),
    Metric("inst_fadd", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "thread-inst", "sum",
           "fp32 adds", "launch_sass"),
    Metric("inst_fmul", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum", "thread-inst", "sum",
           "fp32 multiplies", "launch_sass"),
    Metric("inst_hfma", "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum", "thread-inst", "sum",
           "fp16 fused multiply-adds", "launch_sass"),
    # FP16 adds and multiplies and FP64 arithmetic, for the roofline's FLOPs (seed 002); the
    # same instrumented pass. Profiles from before 2026-11-25 lack them.
    *(Metric(f"inst_{op}", f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum", "thread-inst", "sum",
             text, "launch_sass", required=False)
      for op, text in (("hadd", "fp16 adds"), ("hmul", "fp16 multiplies"), ("dfma", "fp64 fused multiply-adds"),
                       ("dadd", "fp64 adds"), ("dmul", "fp64 multiplies"))),
    # Memory hierarchy traffic.
    Metric("dram_read_bytes", "dram__bytes_read.sum", "bytes", "sum", "DRAM bytes read", "counters"),
    Metric("dram_write_bytes", "dram__bytes_write.sum", "bytes", "sum", "DRAM bytes written", "counters"),
    Metric("l2_bytes", "lts__t_bytes.sum", "bytes", "sum", "bytes through the L2 slices", "counters"),
    Metric("l1_bytes", "l1tex__t_bytes.sum", "bytes", "sum", "bytes through L1/TEX", "counters"),
    Metric("inst_tensor", "sm__inst_executed_pipe_tensor.sum", "warp-inst", "sum",
           "warp instructions issued to the tensor pipe", "counters"),
    Metric("sm_clock_hz", "sm__cycles_elapsed.avg.per_second", "Hz", "time_weighted",
           "SM clock while the kernel ran", "counters"),
    # Time and occupancy.
    Metric("duration_ns", "gpu__time_duration.sum", "ns", "sum", "kernel duration under ncu",
           "counters"),
    Metric("achieved_occupancy_pct", "sm__warps_active.avg.pct_of_peak_sustained_active", "%",
           "main", "achieved occupancy", "counters"),
    # Tensor-core work (default math only).
    Metric("tensor_ops_tf32", "sm__ops_path_tensor_src_tf32_dst_fp32.sum", "flops", "sum",
           "FLOPs on the tensor path with TF32 sources (a multiply-add counts two)", "tensor"),
    # Extras for analysis (--ncu-metrics full).
    Metric("fma_pipe_util_pct", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "%",
           "time_weighted", "FMA pipe busy, % of active cycles (SEER's fp32 FU utilisation)", "pipes"),
    Metric("tensor_pipe_util_pct", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
           "%", "time_weighted", "tensor pipe busy, % of active cycles", "pipes"),
    Metric("sm_util_pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "time_weighted",
           "SM throughput, % of peak", "throughput"),
    Metric("dram_util_pct", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "time_weighted",
           "DRAM throughput, % of peak", "throughput"),
)

METRIC_BY_COLUMN = {m.column: m for m in METRICS}
METRIC_BY_NCU_NAME = {m.ncu_name: m for m in METRICS}


@dataclass(frozen=True)
class RunColumn:
    """A profile column of the measurements table (one row per run), and what it comes from.

    Either the sum of the rolled-up ``metrics`` (columns of :data:`METRICS`) divided by ``per``:
    one metric as is, renamed, or converted (``per`` 100 turns a percentage into a fraction,
    1e6 nanoseconds into milliseconds); or, with no ``metrics``, a quantity that
    :func:`seer.dataset.build.rollup_kernels` computes (``measurements_table`` where
    ``from_layer``), and ``source`` says from what.
    """

    column: str
    unit: str
    description: str
    metrics: tuple[str, ...] = ()
    per: float = 1
    source: str = ""
    # Computed by measurements_table from the layer's shape, which kernels do not carry.
    from_layer: bool = False


def _as_is(*columns: str) -> tuple[RunColumn, ...]:
    """Metrics that are run columns under their own name, unit and description."""
    return tuple(RunColumn(c, METRIC_BY_COLUMN[c].unit, METRIC_BY_COLUMN[c].description, (c,)) for c in columns)


def _fraction(column: str, metric: str) -> RunColumn:
    return RunColumn(column, "fraction", METRIC_BY_COLUMN[metric].description.replace("%", "fraction"),
                     (metric,), per=100)


#: The profile columns of the measurements table, in the table's order
#: (:data:`seer.schema.MEASUREMENT_COLUMNS`). A run that was not profiled leaves them all empty
#: but flops_analytic.
RUN_COLUMNS: tuple[RunColumn, ...] = (
    RunColumn("main_kernel_share", "fraction", "the main kernel's share of the run's ncu time",
              source="the main kernel's duration_ns over the run's"),
    RunColumn("ncu_time_ms", "ms", "the run's kernels' summed duration under ncu", ("duration_ns",), per=1e6),
    *_as_is("grid_blocks", "block_threads", "registers"),
    RunColumn("shared_mem_bytes", "bytes", "shared memory per block, static and dynamic",
              ("shared_mem_static_bytes", "shared_mem_dynamic_bytes")),
    *_as_is("occupancy_limit_blocks", "occupancy_limit_registers", "occupancy_limit_shared_mem",
            "occupancy_limit_warps"),
    RunColumn("blocks_per_sm", "blocks", "resident blocks per SM (SEER's B_max per SM)",
              source="the least of the main kernel's four occupancy_limit_*"),
    RunColumn("waves", "waves", "grid blocks / (resident blocks per SM x SMs), exact",
              source="grid_blocks, blocks_per_sm and the GPU's SM count"),
    # ncu prints its waves with two decimals (a one-block grid shows 0.00).
    RunColumn("ncu_waves", "waves", "waves as ncu prints them", ("waves",)),
    _fraction("achieved_occupancy", "achieved_occupancy_pct"),
    RunColumn("flops", "flops", "FLOPs executed: thread_flops + tensor_flops", source="thread_flops, tensor_flops"),
    RunColumn("flops_analytic", "flops", "a direct convolution's FLOPs, 2·N·K·C·R·S·P·Q",
              source="the layer's shape", from_layer=True),
    RunColumn("flops_ratio", "ratio", "flops / flops_analytic", source="flops, flops_analytic", from_layer=True),
    RunColumn("thread_flops", "flops", "FLOPs counted from SASS thread instructions",
              source="inst_* (THREAD_FLOPS_PER_INSTRUCTION)"),
    # FMA math forbids tensor cores, so an fma run's tensor FLOPs are zero, not unmeasured.
    RunColumn("tensor_flops", "flops", "FLOPs on the TF32 tensor path", source="tensor_ops_tf32, 0 under fma math"),
    *_as_is("inst_ffma", "inst_fadd", "inst_fmul", "inst_hfma", "inst_hadd", "inst_hmul", "inst_dfma", "inst_dadd",
            "inst_dmul", "inst_tensor", "dram_read_bytes", "dram_write_bytes", "l2_bytes", "l1_bytes"),
    # Utilisations as a roofline sees them: achieved rate over the GPU's peak rate.
    RunColumn("sm_util", "fraction", "achieved FP32 and TF32 FLOP rates over their peaks",
              source="thread_flops, tensor_flops, duration_ns and the GPU's peak FLOP rates"),
    RunColumn("dram_util", "fraction", "achieved DRAM bandwidth over the peak",
              source="dram_read_bytes + dram_write_bytes, duration_ns and the GPU's memory bandwidth"),
    _fraction("fma_pipe_util", "fma_pipe_util_pct"),
    _fraction("tensor_pipe_util", "tensor_pipe_util_pct"),
    _fraction("sm_throughput_util", "sm_util_pct"),
    _fraction("dram_throughput_util", "dram_util_pct"),
    *_as_is("sm_clock_hz"),
)


#: Every group that records may carry, current or retired, and the columns it measured.
GROUP_COLUMNS: dict[str, frozenset[str]] = {
    **{g: frozenset(m.column for m in METRICS if m.group == g) for g in PROFILE_GROUPS},
    **{g: frozenset(columns) for g, columns in RETIRED_GROUPS.items()},
}


def required_columns(metric_set: str, math: str) -> frozenset[str]:
    """Metric columns a run of this math mode needs before its profile is complete."""
    groups = [g for g in METRIC_SETS[metric_set] if math == "default" or g not in DEFAULT_MATH_ONLY_GROUPS]
    return frozenset().union(*(GROUP_COLUMNS[g] for g in groups)) - _NOT_REQUIRED


_NOT_REQUIRED = frozenset(m.column for m in METRICS if not m.required)


def ncu_metric_names(group: str | None = None) -> list[str]:
    """ncu metric names of one profiling group, or of all groups."""
    return [m.ncu_name for m in METRICS if group is None or m.group == group]


def columns_with_rollup(rollup: str) -> list[str]:
    return [m.column for m in METRICS if m.rollup == rollup]


#: SASS thread-instruction counts that are floating-point arithmetic, and the FLOPs of each:
#: FP32, FP16 and FP64 adds and multiplies one, fused multiply-adds two (as seed 002 counts).
THREAD_FLOPS_PER_INSTRUCTION = {"inst_ffma": 2, "inst_fadd": 1, "inst_fmul": 1, "inst_hfma": 2, "inst_hadd": 1,
                                "inst_hmul": 1, "inst_dfma": 2, "inst_dadd": 1, "inst_dmul": 1}


def thread_flops(counts):
    """FLOPs counted from SASS thread instructions (:data:`THREAD_FLOPS_PER_INSTRUCTION`), from
    a frame of the counts (one column each). A count that a profile may lack
    (:attr:`Metric.required` false) adds nothing where it is missing.

    Tensor-core FLOPs are not included: warp-level tensor instruction counts do not say
    how many multiply-adds each instruction did (that depends on the MMA shape).
    """
    total = 0
    for column, flops in THREAD_FLOPS_PER_INSTRUCTION.items():
        count = counts[column]
        total = total + flops * (count if METRIC_BY_COLUMN[column].required else count.fillna(0))
    return total
