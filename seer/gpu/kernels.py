"""seer's own forward convolution kernels, CUDA C++ compiled at run time through CuPy.

Two kernels cover 2D and 3D layers (a 2D layer is a 3D one of depth 1), any stride,
padding, dilation and group count, fp32 NCDHW in and out, plain FP32 FMA arithmetic:

- ``seer_direct_conv<KPT>``: one thread per output position and ``KPT`` output channels
  of its group; the input value is read once per channel block and reused ``KPT`` times.
  Written for depthwise and thin layers, where a GEMM tile is mostly empty.
- ``seer_implicit_gemm<BM, BN, BK, TM, TN, SPLIT, MINB, STAGES>``: the convolution as a GEMM
  per group, output positions x output channels x (input channels x filter taps), never
  formed in memory: each block copies BK-deep slices of the im2col matrix and of the filter
  into shared memory with ``cp.async`` (STAGES slices in flight, none through registers)
  and each thread accumulates a TM x TN tile in registers. With
  ``SPLIT`` the reduction is cut into slices run by separate blocks that add into the
  zeroed output, so that layers with few output tiles still fill the GPU.
  ``seer_implicit_gemm_nhwc`` is the same GEMM on channels-last tensors (NDHWC, filters
  KTRSC), where a slice is 8 channels of one filter tap: 16-byte copies, one bounds check.

Each kernel also has a bias instance (``seer_direct_conv_bias``, ``seer_implicit_gemm_bias``, ...:
:func:`with_bias`) that adds a bias per output channel as it writes the output, which spares
a layer with a bias a kernel of its own; the plain instances compile to what they did before.

Which layers each kernel takes, and with which tile and launch, is decided on the CPU by
:mod:`seer.hardware.kernel_plans`; this module holds the CUDA source and runs the plans.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from seer.hardware.kernel_plans import DIRECT_CHANNELS, DIRECT_COLUMNS, GEMM_TILES, TILE_ORDER, Plan, plan, tap_table
from seer.layers.shapes import ConvShape

_SOURCE = r"""
// x: [N][C][D][H][W], w: [K][C/G][T][R][S], y: [N][K][OD][OH][OW]; cross-correlation.
#define CONV_PARAMS const int N, const int C, const int D, const int H, const int W, const int K, \
    const int T, const int R, const int S, const int OD, const int OH, const int OW, \
    const int sd, const int sh, const int sw, const int pd, const int ph, const int pw, \
    const int dd, const int dh, const int dw, const int G

// BIAS: the output adds bias[k] (the bias kernels; the plain ones, which the dataset times,
// compile to what they did before the bias came in).
template <int KPT, bool BIAS>
__device__ __forceinline__ void direct_conv(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS,
    const float* __restrict__ bias)
{
    const int Cg = C / G, Kg = K / G, KB = (Kg + KPT - 1) / KPT;
    const int HW = H * W, DHW = D * HW, RS = R * S, TRS = T * RS;
    const int OHW = OH * OW, ODHW = OD * OHW;
    const long long total = (long long)N * G * KB * ODHW;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int pix = (int)(idx % ODHW);
    long long rest = idx / ODHW;
    const int kb = (int)(rest % KB); rest /= KB;
    const int g = (int)(rest % G);
    const int n = (int)(rest / G);
    const int od = pix / OHW, oh = (pix % OHW) / OW, ow = pix % OW;
    const int k0 = kb * KPT, kv = min(KPT, Kg - k0);
    const int id0 = od * sd - pd, ih0 = oh * sh - ph, iw0 = ow * sw - pw;
    float acc[KPT];
#pragma unroll
    for (int j = 0; j < KPT; ++j) acc[j] = 0.f;
    const float* xg = x + ((long long)n * C + (long long)g * Cg) * DHW;
    const float* wg = w + ((long long)g * Kg + k0) * Cg * TRS;
    for (int c = 0; c < Cg; ++c) {
        const float* xc = xg + (long long)c * DHW;
        const float* wc = wg + c * TRS;
        for (int t = 0; t < T; ++t) {
            const int id = id0 + t * dd;
            if (id < 0 || id >= D) continue;
            for (int r = 0; r < R; ++r) {
                const int ih = ih0 + r * dh;
                if (ih < 0 || ih >= H) continue;
                const float* xrow = xc + id * HW + ih * W;
                const float* wrow = wc + (t * R + r) * S;
                for (int s = 0; s < S; ++s) {
                    const int iw = iw0 + s * dw;
                    if (iw < 0 || iw >= W) continue;
                    const float xv = __ldg(xrow + iw);
#pragma unroll
                    for (int j = 0; j < KPT; ++j)
                        if (j < kv) acc[j] = fmaf(xv, __ldg(wrow + (long long)j * Cg * TRS + s), acc[j]);
                }
            }
        }
    }
    float* yp = y + ((long long)n * K + (long long)g * Kg + k0) * ODHW + pix;
#pragma unroll
    for (int j = 0; j < KPT; ++j) {
        if constexpr (BIAS)
            if (j < kv) acc[j] += __ldg(bias + g * Kg + k0 + j);
        if (j < kv) yp[(long long)j * ODHW] = acc[j];
    }
}

template <int KPT>
__global__ void __launch_bounds__(256) seer_direct_conv(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS)
{
    direct_conv<KPT, false>(x, w, y, N, C, D, H, W, K, T, R, S, OD, OH, OW, sd, sh, sw, pd, ph, pw, dd, dh, dw, G,
                            nullptr);
}

template <int KPT>
__global__ void __launch_bounds__(256) seer_direct_conv_bias(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS,
    const float* __restrict__ bias)
{
    direct_conv<KPT, true>(x, w, y, N, C, D, H, W, K, T, R, S, OD, OH, OW, sd, sh, sw, pd, ph, pw, dd, dh, dw, G,
                           bias);
}

// Channels-last: x [N][D][H][W][C], w [K][T][R][S][C/G], y [N][OD][OH][OW][K]. A thread
// computes KPT output channels of one group at PPT consecutive output columns, so each filter
// value it reads serves PPT outputs. Consecutive threads take consecutive channel blocks of one
// output position: on a depthwise layer a warp reads and writes 32 consecutive floats.
template <int KPT, int PPT, bool BIAS>
__device__ __forceinline__ void direct_conv_nhwc(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS,
    const float* __restrict__ bias)
{
    const int Cg = C / G, Kg = K / G, KB = (Kg + KPT - 1) / KPT, GKB = G * KB;
    const int TRS = T * R * S, OWB = (OW + PPT - 1) / PPT;
    const long long total = (long long)N * OD * OH * OWB * GKB;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int gk = (int)(idx % GKB);
    long long rest = idx / GKB;
    const int owb = (int)(rest % OWB); rest /= OWB;
    const int oh = (int)(rest % OH); rest /= OH;
    const int od = (int)(rest % OD);
    const int n = (int)(rest / OD);
    const int g = gk / KB, k0 = (gk % KB) * KPT, kv = min(KPT, Kg - k0);
    const int ow0 = owb * PPT;
    const int id0 = od * sd - pd, ih0 = oh * sh - ph, iw0 = ow0 * sw - pw;
    float acc[PPT][KPT];
#pragma unroll
    for (int p = 0; p < PPT; ++p)
#pragma unroll
        for (int j = 0; j < KPT; ++j) acc[p][j] = 0.f;
    const float* xn = x + (long long)n * D * H * W * C + g * Cg;
    const float* wk = w + (long long)(g * Kg + k0) * TRS * Cg;
    for (int t = 0; t < T; ++t) {
        const int id = id0 + t * dd;
        if (id < 0 || id >= D) continue;
        for (int r = 0; r < R; ++r) {
            const int ih = ih0 + r * dh;
            if (ih < 0 || ih >= H) continue;
            const float* xrow = xn + ((long long)id * H + ih) * W * C;
            for (int s = 0; s < S; ++s) {
                const float* wtap = wk + ((t * R + r) * S + s) * Cg;
                const int iws = iw0 + s * dw;
                for (int c = 0; c < Cg; ++c) {
                    float wv[KPT];
#pragma unroll
                    for (int j = 0; j < KPT; ++j) wv[j] = j < kv ? __ldg(wtap + (long long)j * TRS * Cg + c) : 0.f;
#pragma unroll
                    for (int p = 0; p < PPT; ++p) {
                        const int iw = iws + p * sw;
                        if (iw < 0 || iw >= W) continue;
                        const float xv = __ldg(xrow + (long long)iw * C + c);
#pragma unroll
                        for (int j = 0; j < KPT; ++j) acc[p][j] = fmaf(xv, wv[j], acc[p][j]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
        if (ow0 + p >= OW) break;
        float* yp = y + ((((long long)n * OD + od) * OH + oh) * OW + ow0 + p) * K + g * Kg + k0;
#pragma unroll
        for (int j = 0; j < KPT; ++j) {
            if (j >= kv) break;
            float v = acc[p][j];
            if constexpr (BIAS) v += __ldg(bias + g * Kg + k0 + j);
            yp[j] = v;
        }
    }
}

template <int KPT, int PPT>
__global__ void __launch_bounds__(256) seer_direct_conv_nhwc(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS)
{
    direct_conv_nhwc<KPT, PPT, false>(x, w, y, N, C, D, H, W, K, T, R, S, OD, OH, OW, sd, sh, sw, pd, ph, pw, dd, dh,
                                      dw, G, nullptr);
}

template <int KPT, int PPT>
__global__ void __launch_bounds__(256) seer_direct_conv_nhwc_bias(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS,
    const float* __restrict__ bias)
{
    direct_conv_nhwc<KPT, PPT, true>(x, w, y, N, C, D, H, W, K, T, R, S, OD, OH, OW, sd, sh, sw, pd, ph, pw, dd, dh,
                                     dw, G, bias);
}

// N consecutive floats of shared memory in one vector load (N = 1, 2 or 4, aligned).
template <int N>
__device__ __forceinline__ void load_half(const float* p, float* out)
{
    if constexpr (N == 4) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    } else if constexpr (N == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        out[0] = v.x; out[1] = v.y;
    } else {
        out[0] = p[0];
    }
}

// BYTES (4 or 16: one float, or four consecutive and 16-byte aligned) from global to shared
// memory, not through registers (cp.async, sm_80 on); a source size of 0 writes zeros
// instead: padding, and rows or columns past the GEMM's edge.
template <int BYTES>
__device__ __forceinline__ void copy_async(float* dst, const float* src, const bool valid)
{
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(to), "l"(src), "n"(BYTES),
                 "r"(valid ? BYTES : 0));
}

__device__ __forceinline__ float lane(const float4& v, const int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// MINB: blocks per SM the registers must allow (__launch_bounds__); STAGES: slices of the
// reduction in flight, copied into shared memory while an earlier one is used. Indices are
// 32-bit: the plans refuse tensors of 2**31 elements or more.
// CL (channels-last): x is [N][D][H][W][C], w [K][T][R][S][C/G], y [N][OD][OH][OW][K], and
// the reduction runs over (tap, channel), channel fastest. With C/G a multiple of BK a slice
// is BK consecutive channels of one tap: per output position, BK/4 16-byte copies under one
// bounds check and one tap, where NC[D]HW needs a 4-byte copy, a tap and a check per element.
// BIAS: the output adds bias[k], in the first slice of a split reduction only.
template <int BM, int BN, int BK, int TM, int TN, int SPLIT, int MINB, int STAGES, bool CL, bool BIAS>
__device__ __forceinline__ void implicit_gemm(
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS,
    const int4* __restrict__ taps, const int tiles_per_split, const float* __restrict__ bias)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int A_ROWS = THREADS / BM;          // reduction rows one pass of A copies covers
    constexpr int A_LOADS = BK / A_ROWS;
    constexpr int B_COLS = THREADS / BK;          // output channels one pass of B copies covers
    constexpr int B_LOADS = BN / B_COLS;
    constexpr int A_CHUNKS = BM * BK / 4;         // CL: 16-byte copies of an A slice
    // Output positions whose input corner this thread keeps: one (NC[D]HW), one per chunk (CL).
    constexpr int A_POS = CL ? (A_CHUNKS + THREADS - 1) / THREADS : 1;
    static_assert(CL || (THREADS % BM == 0 && BK % A_ROWS == 0), "A tile loads");
    static_assert(THREADS % BK == 0 && BN % B_COLS == 0, "B tile loads");
    static_assert(TM % 2 == 0 && TN % 2 == 0, "thread tiles are two halves");
    static_assert(STAGES >= 2, "a slice in use and one in flight at least");
    static_assert(!CL || BK % 4 == 0, "whole 16-byte chunks");
    // A is reduction-major (rows of BM positions) for NC[D]HW; position-major for CL, rows
    // padded to 12 floats so that the 16-byte reads of 8 consecutive rows hit distinct banks.
    __shared__ __align__(16) float As[STAGES][CL ? BM : BK][CL ? BK + 4 : BM];
    // Rows of B padded by 4 floats: the 8 rows that a warp's coalesced filter copies fill
    // land in different banks.
    __shared__ __align__(16) float Bs[STAGES][BK][BN + 4];

    const int tid = threadIdx.x;
    const int Cg = C / G, Kg = K / G;
    const int HW = H * W, DHW = D * HW, RS = R * S, TRS = T * RS, KRED = Cg * TRS;
    const int OHW = OH * OW, ODHW = OD * OHW, M = N * ODHW;
    const int g = blockIdx.z % G, split = blockIdx.z / G;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int k_tiles = (KRED + BK - 1) / BK;
    const int tile_begin = SPLIT ? split * tiles_per_split : 0;
    const int tile_end = SPLIT ? min(k_tiles, tile_begin + tiles_per_split) : k_tiles;
    if (tile_begin >= tile_end) return;

    // The output positions whose im2col columns this thread copies, decomposed once; the
    // reduction index is decomposed by the precomputed tap table (offset, t*dd, r*dh, s*dw).
    // A position past M starts far outside the input, so that every bounds check fails
    // without a branch of its own.
    const int a_m = tid % BM, a_k = tid / BM;
    int id0[A_POS], ih0[A_POS], iw0[A_POS], a_base[A_POS];
#pragma unroll
    for (int i = 0; i < A_POS; ++i) {
        const int am = m0 + (CL ? (tid + i * THREADS) / (BK / 4) : a_m);
        id0[i] = -(1 << 30); ih0[i] = 0; iw0[i] = 0; a_base[i] = 0;
        if (am < M) {
            const int n = am / ODHW, p = am % ODHW;
            const int od = p / OHW, oh = (p % OHW) / OW, ow = p % OW;
            id0[i] = od * sd - pd; ih0[i] = oh * sh - ph; iw0[i] = ow * sw - pw;
            a_base[i] = CL ? (((n * D + id0[i]) * H + ih0[i]) * W + iw0[i]) * C + g * Cg
                           : (n * C + g * Cg) * DHW + id0[i] * HW + ih0[i] * W + iw0[i];
        }
    }
    const int b_k = tid % BK, b_n = tid / BK;
    const float* wg = w + g * Kg * KRED;

    // Every tap of the slice is loaded before any is used, and the checks are bitwise: no
    // branch makes one copy wait for the previous one's tap.
    auto issue = [&](int tile, int stage) {
        if constexpr (CL) {
            const int4 tap = __ldg(taps + tile);  // one tap per slice
#pragma unroll
            for (int i = 0; i < A_POS; ++i) {
                const int q = tid + i * THREADS, row = q / (BK / 4), col = q % (BK / 4) * 4;
                if (A_CHUNKS % THREADS == 0 || q < A_CHUNKS) {
                    const bool ok = ((unsigned)(id0[i] + tap.y) < (unsigned)D)
                        & ((unsigned)(ih0[i] + tap.z) < (unsigned)H) & ((unsigned)(iw0[i] + tap.w) < (unsigned)W);
                    copy_async<16>(&As[stage][row][col], ok ? x + (a_base[i] + tap.x + col) : x, ok);
                }
            }
        } else {
            int4 tap[A_LOADS];
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) tap[i] = __ldg(taps + tile * BK + a_k + i * A_ROWS);  // padded
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
                const bool ok = ((unsigned)(id0[0] + tap[i].y) < (unsigned)D)
                    & ((unsigned)(ih0[0] + tap[i].z) < (unsigned)H) & ((unsigned)(iw0[0] + tap[i].w) < (unsigned)W);
                copy_async<4>(&As[stage][a_k + i * A_ROWS][a_m], ok ? x + (a_base[0] + tap[i].x) : x, ok);
            }
        }
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int kk = tile * BK + b_k, nn = n0 + b_n + j * B_COLS;
            const bool ok = (kk < KRED) & (nn < Kg);
            copy_async<4>(&Bs[stage][b_k][b_n + j * B_COLS], ok ? wg + (nn * KRED + kk) : w, ok);
        }
    };

    // Thread tile: two halves of TM/2 positions (and TN/2 channels), half a tile apart,
    // so that a warp's shared-memory reads are contiguous.
    const int tx = tid % (BM / TM), ty = tid / (BM / TM);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    // One commit group per slice, empty past the end, so that waiting for all but the
    // newest STAGES - 2 groups always means the slice about to be used has landed.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (tile_begin + s < tile_end) issue(tile_begin + s, s);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    int stage = 0;
    for (int tile = tile_begin; tile < tile_end; ++tile) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
        // Also: every thread is done with the stage the next copies overwrite.
        __syncthreads();
        if (tile + STAGES - 1 < tile_end) issue(tile + STAGES - 1, (stage + STAGES - 1) % STAGES);
        asm volatile("cp.async.commit_group;\n" ::);
        if constexpr (CL) {
            // Rows tx, tx + BM/TM, ...: four reduction steps per 16-byte read.
#pragma unroll
            for (int k4 = 0; k4 < BK; k4 += 4) {
                float4 a4[TM];
#pragma unroll
                for (int i = 0; i < TM; ++i) a4[i] = *reinterpret_cast<const float4*>(&As[stage][tx + i * (BM / TM)][k4]);
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    float b[TN];
                    load_half<TN / 2>(&Bs[stage][k4 + kk][ty * (TN / 2)], b);
                    load_half<TN / 2>(&Bs[stage][k4 + kk][BN / 2 + ty * (TN / 2)], b + TN / 2);
#pragma unroll
                    for (int i = 0; i < TM; ++i)
#pragma unroll
                        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(lane(a4[i], kk), b[j], acc[i][j]);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                float a[TM], b[TN];
                load_half<TM / 2>(&As[stage][k][tx * (TM / 2)], a);
                load_half<TM / 2>(&As[stage][k][BM / 2 + tx * (TM / 2)], a + TM / 2);
                load_half<TN / 2>(&Bs[stage][k][ty * (TN / 2)], b);
                load_half<TN / 2>(&Bs[stage][k][BN / 2 + ty * (TN / 2)], b + TN / 2);
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
        stage = (stage + 1) % STAGES;
    }

    // The bias is added once per output: by the reduction's first slice where it is split.
    const bool add_bias = BIAS && split == 0;
    if constexpr (CL) {
        // y[m][K]: each half of a thread's channels is TN/2 consecutive floats of one row,
        // one 16-byte store (or, split, one 16-byte atomic add) where they are four and aligned.
        const bool aligned = Kg % 4 == 0;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + tx + i * (BM / TM);
            if (m >= M) continue;
            float* yp = y + m * K + g * Kg;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int nn0 = n0 + h * (BN / 2) + ty * (TN / 2);
                float* v = acc[i] + h * (TN / 2);
                if constexpr (BIAS) {
                    if (add_bias) {
#pragma unroll
                        for (int j = 0; j < TN / 2; ++j)
                            if (nn0 + j < Kg) v[j] += __ldg(bias + g * Kg + nn0 + j);
                    }
                }
                if constexpr (TN / 2 == 4) {
                    if (aligned) {
                        if (nn0 < Kg) {
                            const float4 out = make_float4(v[0], v[1], v[2], v[3]);
                            if (SPLIT) atomicAdd(reinterpret_cast<float4*>(yp + nn0), out);  // sm_90 on
                            else *reinterpret_cast<float4*>(yp + nn0) = out;
                        }
                        continue;
                    }
                }
#pragma unroll
                for (int j = 0; j < TN / 2; ++j) {
                    if (nn0 + j >= Kg) continue;
                    if (SPLIT) atomicAdd(yp + nn0 + j, v[j]);
                    else yp[nn0 + j] = v[j];
                }
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + (i < TM / 2 ? tx * (TM / 2) + i : BM / 2 + tx * (TM / 2) + i - TM / 2);
            if (m >= M) continue;
            const int n = m / ODHW, p = m % ODHW;
            float* yp = y + (n * K + g * Kg) * ODHW + p;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int nn = n0 + (j < TN / 2 ? ty * (TN / 2) + j : BN / 2 + ty * (TN / 2) + j - TN / 2);
                if (nn >= Kg) continue;
                if constexpr (BIAS) {
                    if (add_bias) acc[i][j] += __ldg(bias + g * Kg + nn);
                }
                if (SPLIT) atomicAdd(yp + nn * ODHW, acc[i][j]);
                else yp[nn * ODHW] = acc[i][j];
            }
        }
    }
}

#define GEMM_KERNEL(NAME, CL) \
template <int BM, int BN, int BK, int TM, int TN, int SPLIT, int MINB, int STAGES> \
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MINB) NAME( \
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS, \
    const int4* __restrict__ taps, const int tiles_per_split) \
{ \
    implicit_gemm<BM, BN, BK, TM, TN, SPLIT, MINB, STAGES, CL, false>(x, w, y, N, C, D, H, W, K, T, R, S, OD, OH, \
        OW, sd, sh, sw, pd, ph, pw, dd, dh, dw, G, taps, tiles_per_split, nullptr); \
} \
template <int BM, int BN, int BK, int TM, int TN, int SPLIT, int MINB, int STAGES> \
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MINB) NAME##_bias( \
    const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, CONV_PARAMS, \
    const int4* __restrict__ taps, const int tiles_per_split, const float* __restrict__ bias) \
{ \
    implicit_gemm<BM, BN, BK, TM, TN, SPLIT, MINB, STAGES, CL, true>(x, w, y, N, C, D, H, W, K, T, R, S, OD, OH, \
        OW, sd, sh, sw, pd, ph, pw, dd, dh, dw, G, taps, tiles_per_split, bias); \
}
GEMM_KERNEL(seer_implicit_gemm, false)
GEMM_KERNEL(seer_implicit_gemm_nhwc, true)
"""

def with_bias(kernel: str) -> str:
    """The instance of ``kernel`` (a name :func:`plan` gives) that also adds a bias per output
    channel: the same tile and launch, one more argument (the bias's pointer) at the end."""
    name, bracket, rest = kernel.partition("<")
    return f"{name}_bias{bracket}{rest}"


def _plannable_kernels(layout: str, bias: bool = False) -> tuple[str, ...]:
    """Every template instance :func:`plan` can choose in ``layout`` (the direct kernels, and
    the tiles of :data:`TILE_ORDER` with and without the split), or their bias instances."""
    names = ([f"seer_direct_conv<{k}>" for k in DIRECT_CHANNELS] if layout == "nchw" else
             [f"seer_direct_conv_nhwc<{k}, {p}>" for k in DIRECT_CHANNELS for p in DIRECT_COLUMNS])
    for name in TILE_ORDER:
        names += [GEMM_TILES[name].kernel(False, layout), GEMM_TILES[name].kernel(True, layout)]
    return tuple(map(with_bias, names)) if bias else tuple(names)


@lru_cache(maxsize=None)
def _module(names: tuple[str, ...]):
    import cupy as cp

    return cp.RawModule(code=_SOURCE, options=("-std=c++17",), name_expressions=names)


def _function(kernel: str, layout: str):
    """The compiled kernel: one module per layout holds every instance :func:`plan` can
    choose, compiled at first use (and one their bias instances); a tile only a ``tile=``
    override names is compiled on its own when asked."""
    plannable = _plannable_kernels(layout, bias="_bias<" in kernel)
    return _module(plannable if kernel in plannable else (kernel,)).get_function(kernel)


@lru_cache(maxsize=256)
def _device_taps(shape: ConvShape, layout: str, device: int):
    """The layer's tap table on a GPU, copied once (a PyTorch module calls :func:`forward`
    for every batch) and complete before any stream reads it."""
    import cupy as cp

    with cp.cuda.Device(device):
        taps = cp.asarray(tap_table(shape, layout))
        cp.cuda.Device().synchronize()
    return taps


@lru_cache(maxsize=1)
def _cu_launch_kernel():
    """The CUDA driver's ``cuLaunchKernel`` through ctypes: a launch with arguments prepared
    once costs a few microseconds of host time, where CuPy's kernel call converts every
    argument per call. No ``argtypes``: every argument is passed as a ctypes object made
    once (:class:`Launch`), which spares ctypes a conversion per argument and call."""
    import ctypes

    launch = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    launch.restype = ctypes.c_int
    return launch


class Launch:
    """One plan of ``algo`` for ``shape`` on GPU ``device``, its arguments prepared once: a
    call passes three device pointers and a stream (:meth:`enqueue`), or launches on CuPy's
    current stream (``__call__``). A plan with ``zero_output`` adds into its output, which
    the caller zeroes first. With ``bias``, the kernel also adds a bias per output channel
    (fp32, contiguous, its pointer passed to each call). Not thread-safe: the pointers are
    set on the instance."""

    def __init__(self, algo: str, shape: ConvShape, device: int, tile: str | None = None,
                 layout: str = "nchw", bias: bool = False) -> None:
        import ctypes

        import cupy as cp

        with cp.cuda.Device(device):
            self.plan = plan(algo, shape, tile, sms=cp.cuda.Device().attributes["MultiProcessorCount"],
                             layout=layout)
            self.kernel = with_bias(self.plan.kernel) if bias else self.plan.kernel
            kernel = _function(self.kernel, layout)
            self._function = kernel.kernel.ptr  # the CUfunction, loaded on this device
            sizes = (shape.batch, shape.in_ch, shape.in_d, shape.in_h, shape.in_w, shape.out_ch, shape.kernel_d,
                     shape.kernel_h, shape.kernel_w, shape.out_d, shape.out_h, shape.out_w, shape.stride_d,
                     shape.stride_h, shape.stride_w, shape.pad_d, shape.pad_h, shape.pad_w, shape.dilation_d,
                     shape.dilation_h, shape.dilation_w, shape.groups)
            self._pointers = [ctypes.c_uint64() for _ in range(3)]  # x, w, y
            self._arguments = self._pointers + [ctypes.c_int32(v) for v in sizes]
            if algo != "SEER_DIRECT":
                self._taps = _device_taps(shape, layout, device)
                self._arguments += [ctypes.c_uint64(self._taps.data.ptr), ctypes.c_int32(self.plan.tiles_per_split)]
            self._bias = ctypes.c_uint64() if bias else None
            if bias:
                self._arguments.append(self._bias)
        parameters = (ctypes.c_void_p * len(self._arguments))(*map(ctypes.addressof, self._arguments))
        grid, block = tuple(self.plan.grid), (self.plan.block,)
        dims = (*grid, *(1,) * (3 - len(grid)), *block, 1, 1, 0)  # grid, block, shared memory bytes
        self._stream = ctypes.c_void_p()
        # cuLaunchKernel's arguments, but the stream's value, made once.
        self._launch_arguments = (ctypes.c_void_p(self._function), *map(ctypes.c_uint, dims), self._stream,
                                  parameters, ctypes.c_void_p())
        self.zero_output = self.plan.splits > 1

    def enqueue(self, x_ptr: int, w_ptr: int, y_ptr: int, stream: int, bias_ptr: int = 0) -> None:
        """Launch on ``stream`` (a CUstream/cudaStream_t handle) of this device's context;
        ``bias_ptr``: the bias of a launch made with ``bias``."""
        x, w, y = self._pointers
        x.value, w.value, y.value = x_ptr, w_ptr, y_ptr
        if self._bias is not None:
            self._bias.value = bias_ptr
        self._stream.value = stream
        status = _cu_launch_kernel()(*self._launch_arguments)
        if status:
            raise RuntimeError(f"seer: cuLaunchKernel of {self.kernel} failed with CUDA error {status}")

    def __call__(self, x_ptr: int, w_ptr: int, y_ptr: int, bias_ptr: int = 0) -> None:
        import cupy as cp

        self.enqueue(x_ptr, w_ptr, y_ptr, cp.cuda.get_current_stream().ptr, bias_ptr)


def forward(algo: str, shape: ConvShape, x, w, y, tile: str | None = None,
            layout: str = "nchw", bias=None) -> tuple[Callable[[], None], Plan]:
    """A function that runs ``algo`` once on CuPy arrays ``x``, ``w``, ``y`` (float32, C
    order, the shape's dims in ``layout``'s order: :meth:`ConvShape.layout_order`) and
    ``bias`` (None, or ``out_ch`` floats the output adds) on the current stream, and its
    :class:`Plan` (``tile``: see :func:`plan`)."""
    import cupy as cp

    launch = Launch(algo, shape, cp.cuda.Device().id, tile, layout, bias=bias is not None)
    bias_ptr = 0 if bias is None else bias.data.ptr

    def run() -> None:
        if launch.zero_output:  # slices add into the output
            cp.cuda.runtime.memsetAsync(y.data.ptr, 0, y.nbytes, cp.cuda.get_current_stream().ptr)
        launch(x.data.ptr, w.data.ptr, y.data.ptr, bias_ptr)

    return run, launch.plan
