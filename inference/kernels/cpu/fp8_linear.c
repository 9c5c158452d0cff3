/* FP8 (e4m3) weight-only linear layer for the CPU: out = x @ dequantize(q, scale).T, the
 * weight read as one byte a value and widened in registers, never written out whole.
 *
 * x (M, K) bfloat16 rows (row stride x_stride, elements contiguous); q (N, K) e4m3 bytes;
 * scale (N,) float32 per row (groups == 0) or (N, groups) per row and group of group_size
 * columns (a multiple of 16); out (M, N) bfloat16, contiguous. With `x_f32`, x and out are
 * float32 instead, and every path runs fp8_linear_avx2.h (grouped weights not rounded to
 * bfloat16, as `dequantize_weight_fp8(..., float32)` does not round them).
 *
 * Work is split over tiles of weight rows. A tile is widened once into a small bfloat16
 * buffer (exactly: e4m3 values fit bfloat16; grouped scales are applied in float32 first
 * and rounded once, as `dequantize_weight_fp8(...).to(bfloat16)` rounds), then multiplied
 * by bfloat16 pair dot products with float32 sums, one of two ways:
 * - up to ROWS_MAX rows of x ("rows"): NT weight rows by MT rows of x at a time, each
 *   output a 16-lane sum over K added up at the end;
 * - more rows ("panels"): x is first packed so that one vector holds a pair of adjacent
 *   columns of 16 rows, and each pair of one weight row's values is broadcast against it:
 *   16 outputs per vector, no sums across lanes, and each widened weight serves every
 *   row of x from registers.
 * Per-row scales multiply the float32 sum. Built by build.py (-march=native), the dot
 * products one of three ways, which `fp8_linear_available()` reports:
 * 1: AVX-512 BF16's vdpbf16ps (Sapphire Rapids, the AMD EPYC);
 * 2: without AVX-512 BF16 but with AVX-512F, BW and VL (the Ice Lake Xeon), each pair's
 *    two halves widened to float32 by a mask and a shift and multiplied by two FMAs, with
 *    the same buffers, packing and float32 sums;
 * 3: without them, AVX2 with FMA and F16C (fp8_linear_avx2.h): float32 products, 8 lanes;
 * 0: none of these, where the caller uses torch instead.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every path needs AVX2, FMA and F16C (fp8_linear_avx2.h serves float32 x on all of them);
 * VL is for the 128- and 256-bit masked loads (every processor with BW has it). */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#if defined(__AVX512BF16__)
#define FP8_PATH 1 /* vdpbf16ps */
#else
#define FP8_PATH 2 /* each pair's products by two float32 FMAs */
#endif
#else
#define FP8_PATH 3 /* fp8_linear_avx2.h */
#endif
#else
#define FP8_PATH 0
#endif

int fp8_linear_available(void) { return FP8_PATH; }

static inline uint16_t to_bf16(float f) { /* round to nearest even; sums are finite */
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#if FP8_PATH
#include "fp8_linear_avx2.h"
#endif

#if FP8_PATH == 1 || FP8_PATH == 2
enum { NT = 4, MT = 4, ROWS_MAX = MT, PANEL_ROWS = 64, PANEL_NT = 24, PANEL_ACC = 12 };

#if FP8_PATH == 1
typedef __m512bh bf16_pairs; /* 16 pairs of bfloat16, one a 32-bit lane */
static inline bf16_pairs as_pairs(__m512i v) { return (__m512bh)v; }
static inline __m512 dot_pairs(__m512 acc, bf16_pairs a, bf16_pairs b) {
    return _mm512_dpbf16_ps(acc, a, b);
}
static inline __m256i to_bf16x16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
#else
/* The same pairs, each lane's two halves widened to float32 once (bfloat16 is the top half
 * of float32), so that a pair's dot product is two FMAs. A bfloat16 product is exact in
 * float32, so each FMA rounds once, as each of vdpbf16ps's two additions does in Intel's
 * description, and in its order (the odd element first); vdpbf16ps also flushes float32
 * subnormals to zero, which this does not. */
typedef struct {
    __m512 odd, even;
} bf16_pairs;
static inline bf16_pairs as_pairs(__m512i v) {
    const __m512i high = _mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u));
    return (bf16_pairs){_mm512_castsi512_ps(high), _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))};
}
static inline __m512 dot_pairs(__m512 acc, bf16_pairs a, bf16_pairs b) {
    return _mm512_fmadd_ps(a.even, b.even, _mm512_fmadd_ps(a.odd, b.odd, acc));
}
/* float32 to bfloat16, rounded to nearest even (the values are finite). */
static inline __m256i to_bf16x16(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i half = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_add_epi32(bits, half), 16));
}
#endif

/* 16 e4m3 bytes (fewer under `mask`) as float32: sign | exponent + 120 | mantissa for
 * normal values, m * 2^-9 for subnormal ones (exponent 0). No NaN is expected. */
static inline __m512 widen16(const uint8_t *src, __mmask16 mask) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, src));
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7f));
    const __m512i normal =
        _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0.001953125f));
    const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8));
    const __m512 value = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
}

/* 32 e4m3 bytes (fewer under `mask`) straight to bfloat16 bits, exactly: a normal value's
 * exponent and mantissa shift into place and the exponent moves by 127 - 7; subnormal
 * ones (exponent 0, m * 2^-9) come from `subnormal`, indexed by m. */
static inline __m512i widen32(const uint8_t *src, __mmask32 mask, __m512i subnormal) {
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, src));
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7f));
    const __m512i normal =
        _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
    const __mmask32 is_sub = _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8));
    const __m512i value =
        _mm512_mask_blend_epi16(is_sub, normal, _mm512_permutexvar_epi16(mag, subnormal));
    const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0x80)), 8);
    return _mm512_or_si512(value, sign);
}

/* Row r of q as bfloat16 into dst (k_padded values, zeros past K). */
static void widen_row(const uint8_t *q, const float *scale, int64_t r, int K, int k_padded,
                      int groups, int group_size, __m512i subnormal, uint16_t *dst) {
    const uint8_t *src = q + r * (int64_t)K;
    if (!groups) { /* per-row scale: applied to the sums later */
        for (int c = 0; c < k_padded; c += 32) {
            const int left = K - c;
            const __mmask32 mask = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
            _mm512_storeu_si512(dst + c, widen32(src + c, mask, subnormal));
        }
        return;
    }
    for (int c = 0; c < k_padded; c += 16) {
        const int left = K - c;
        if (left <= 0) { /* padding: no group, and no scale to read past the row's */
            _mm256_storeu_si256((__m256i *)(dst + c), _mm256_setzero_si256());
            continue;
        }
        const __mmask16 mask = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 value = widen16(src + c, mask);
        value = _mm512_mul_ps(value, _mm512_set1_ps(scale[r * groups + c / group_size]));
        _mm256_storeu_si256((__m256i *)(dst + c), to_bf16x16(value));
    }
}

/* out rows m0.. (mt of them, a constant once inlined) x tile rows n0.. (nt of them). */
static inline __attribute__((always_inline)) void tile_product(
                         const uint16_t *x, int64_t x_stride, int64_t m0, const int mt,
                         const uint16_t *w, int k_padded, int K, int64_t n0, int nt,
                         const float *row_scale, uint16_t *out, int64_t N) {
    const uint16_t *rows[MT];
    for (int i = 0; i < mt; ++i) rows[i] = x + (m0 + i) * x_stride;
    __m512 acc[MT][NT];
    for (int i = 0; i < mt; ++i)
        for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int c = 0; c < k_padded; c += 32) {
        const int left = K - c;
        const __mmask32 mask = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
        bf16_pairs wv[NT];
        for (int j = 0; j < NT; ++j) wv[j] = as_pairs(_mm512_loadu_si512(w + j * k_padded + c));
        for (int i = 0; i < mt; ++i) {
            const bf16_pairs xv = as_pairs(_mm512_maskz_loadu_epi16(mask, rows[i] + c));
            for (int j = 0; j < NT; ++j) acc[i][j] = dot_pairs(acc[i][j], xv, wv[j]);
        }
    }
    for (int i = 0; i < mt; ++i)
        for (int j = 0; j < nt; ++j) {
            float sum = _mm512_reduce_add_ps(acc[i][j]);
            if (row_scale) sum *= row_scale[n0 + j];
            out[(m0 + i) * N + n0 + j] = to_bf16(sum);
        }
}

/* x (M rows) packed per block of 16 rows: for each pair of columns, 16 dwords, lane i
 * holding row m0 + i's two bf16 values; rows past M and columns past K are zero. Threads
 * take whole pairs, so that no two write one cache line. */
static void pack_x(const uint16_t *x, int64_t x_stride, int64_t M, int K, int k_padded,
                   uint32_t *packed, int num_threads) {
    const int pairs = k_padded / 2;
    const int64_t blocks = (M + 15) / 16;
#pragma omp parallel for collapse(2) schedule(static) num_threads(num_threads)
    for (int64_t b = 0; b < blocks; ++b)
        for (int p = 0; p < pairs; ++p) {
            uint32_t *dst = packed + (b * pairs + p) * 16;
            const int c = 2 * p;
            for (int i = 0; i < 16; ++i) {
                const int64_t m = b * 16 + i;
                const uint16_t *row = x + m * x_stride;
                const uint32_t lo = m < M && c < K ? row[c] : 0;
                const uint32_t hi = m < M && c + 1 < K ? row[c + 1] : 0;
                dst[i] = lo | hi << 16;
            }
        }
}

/* out[m0 + i][n0 + j] for i < 16 * mb (< M), j < nt: weight rows w (nt_max of k_padded,
 * the pairs broadcast) against mb packed 16-row blocks of x. */
static inline __attribute__((always_inline)) void panel_product(
                         const uint32_t *xp, int pairs, int64_t m0, int64_t M, const int mb,
                         const uint16_t *w, int k_padded, int64_t n0, const int nt_max, int nt,
                         const float *row_scale, uint16_t *out, int64_t N) {
    __m512 acc[PANEL_ACC][4];
    for (int j = 0; j < nt_max; ++j)
        for (int b = 0; b < mb; ++b) acc[j][b] = _mm512_setzero_ps();
    const uint32_t *x0 = xp + (m0 / 16) * 16 * (int64_t)pairs;
    for (int p = 0; p < pairs; ++p) {
        bf16_pairs xv[4];
        for (int b = 0; b < mb; ++b)
            xv[b] = as_pairs(_mm512_loadu_si512(x0 + ((int64_t)b * pairs + p) * 16));
        for (int j = 0; j < nt_max; ++j) {
            uint32_t pair;
            memcpy(&pair, w + (int64_t)j * k_padded + 2 * p, sizeof pair);
            const bf16_pairs wv = as_pairs(_mm512_set1_epi32((int)pair));
            for (int b = 0; b < mb; ++b) acc[j][b] = dot_pairs(acc[j][b], xv[b], wv);
        }
    }
    float lanes[16];
    for (int j = 0; j < nt; ++j)
        for (int b = 0; b < mb; ++b) {
            __m512 sums = acc[j][b];
            if (row_scale) sums = _mm512_mul_ps(sums, _mm512_set1_ps(row_scale[n0 + j]));
            _mm512_storeu_ps(lanes, sums);
            for (int i = 0; i < 16 && m0 + 16 * b + i < M; ++i)
                out[(m0 + 16 * b + i) * N + n0 + j] = to_bf16(lanes[i]);
        }
}

/* Every row of x against weight rows n0 .. n0 + nt (widened in w, zeros up to PANEL_NT),
 * PANEL_ROWS rows at a time, in as many weight rows at a time as leave registers for the
 * accumulators: 16 * mb rows by nt_max weight rows, 24 vectors at most. */
static void panel_rows(const uint32_t *xp, int pairs, int64_t M, const uint16_t *w,
                       int k_padded, int64_t n0, int nt, const float *row_scale,
                       uint16_t *out, int64_t N) {
    for (int64_t m0 = 0; m0 < M; m0 += PANEL_ROWS) {
        const int64_t left = (M - m0 + 15) / 16;
        const int mb = left > 4 ? 4 : (int)left;
        const int nt_max = mb == 4 ? 6 : mb == 3 ? 8 : 12;
        for (int j0 = 0; j0 < nt; j0 += nt_max) {
            const uint16_t *wj = w + (int64_t)j0 * k_padded;
            const int n = nt - j0 < nt_max ? nt - j0 : nt_max;
            switch (mb) { /* constants once inlined: the accumulators stay in registers */
            case 4: panel_product(xp, pairs, m0, M, 4, wj, k_padded, n0 + j0, 6, n, row_scale, out, N); break;
            case 3: panel_product(xp, pairs, m0, M, 3, wj, k_padded, n0 + j0, 8, n, row_scale, out, N); break;
            case 2: panel_product(xp, pairs, m0, M, 2, wj, k_padded, n0 + j0, 12, n, row_scale, out, N); break;
            default: panel_product(xp, pairs, m0, M, 1, wj, k_padded, n0 + j0, 12, n, row_scale, out, N); break;
            }
        }
    }
}
#endif

/* Returns 0, or -1 where unavailable (see above) or out of memory. */
int fp8_linear(const void *x, int64_t x_stride, int64_t M, const uint8_t *q,
               const float *scale, int64_t N, int K, int groups, int group_size, void *out,
               int x_f32, int num_threads) {
#if FP8_PATH
    if (x_f32 || FP8_PATH == 3) {
        const struct avx2_io io = {x, x_stride, x_f32, out};
        if (M <= AVX2_ROWS_MAX)
            return rows_avx2(io, (int)M, q, scale, N, K, groups, group_size, num_threads);
        return panels_avx2(io, M, q, scale, N, K, groups, group_size, num_threads);
    }
#endif
#if FP8_PATH == 1 || FP8_PATH == 2
    const int k_padded = (K + 31) / 32 * 32;
    const int panels = M > ROWS_MAX;
    const int tile_rows = panels ? PANEL_NT : NT;
    const int64_t tiles = (N + tile_rows - 1) / tile_rows;
    const int pairs = k_padded / 2;
    int failed = 0;
    uint16_t table[32] = {0};
    for (int m = 0; m < 8; ++m) { /* m * 2^-9 in bfloat16: exact, the top half of float32 */
        const float value = (float)m * 0.001953125f;
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        table[m] = (uint16_t)(bits >> 16);
    }
    const __m512i subnormal = _mm512_loadu_si512(table);
    uint32_t *xp = NULL;
    if (panels) {
        xp = aligned_alloc(64, sizeof(uint32_t) * 16 * (size_t)pairs * (size_t)((M + 15) / 16));
        if (!xp) return -1;
        pack_x(x, x_stride, M, K, k_padded, xp, num_threads);
    }
    const float *row_scale = groups ? NULL : scale;
#pragma omp parallel num_threads(num_threads)
    {
        uint16_t *w = aligned_alloc(64, sizeof(uint16_t) * (size_t)tile_rows * (size_t)k_padded);
        if (!w) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; ++t) {
            if (!w) continue;
            const int64_t n0 = t * tile_rows;
            const int nt = N - n0 < tile_rows ? (int)(N - n0) : tile_rows;
            for (int j = 0; j < tile_rows; ++j)
                if (j < nt)
                    widen_row(q, scale, n0 + j, K, k_padded, groups, group_size, subnormal,
                              w + j * k_padded);
                else
                    memset(w + j * k_padded, 0, sizeof(uint16_t) * (size_t)k_padded);
            if (panels) {
                panel_rows(xp, pairs, M, w, k_padded, n0, nt, row_scale, out, N);
                continue;
            }
            switch (M) { /* at most ROWS_MAX (= MT) rows, each count its own specialised loop */
            case 4: tile_product(x, x_stride, 0, 4, w, k_padded, K, n0, nt, row_scale, out, N); break;
            case 3: tile_product(x, x_stride, 0, 3, w, k_padded, K, n0, nt, row_scale, out, N); break;
            case 2: tile_product(x, x_stride, 0, 2, w, k_padded, K, n0, nt, row_scale, out, N); break;
            default: tile_product(x, x_stride, 0, 1, w, k_padded, K, n0, nt, row_scale, out, N); break;
            }
        }
        free(w);
    }
    free(xp);
    return failed ? -1 : 0;
#else
    (void)x, (void)x_stride, (void)M, (void)q, (void)scale, (void)N, (void)K, (void)groups;
    (void)group_size, (void)out, (void)x_f32, (void)num_threads;
    return -1;
#endif
}
