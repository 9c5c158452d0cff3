/* Group-quantized linear layer with int8 activations (llama.cpp's Q4_1 x Q8_1 in our
 * layout): each row of x is quantized per block of 32 columns to int8 with a float32 scale,
 * and each block's dot product with the weight's codes is an integer one.
 *
 * The weight layout is quant_linear.c's (group_math.py): w = scale_g * code + offset_g. For
 * a row of x with blocks quantized as x ~ d_b * q_b (q_b int8 in -127..127, d_b = amax/127),
 * and the codes centred on z = 2^(bits-1):
 *   y = sum_g scale_g * sum_{b in g} d_b * (code_b - z) . q_b
 *         + (offset_g + z * scale_g) * sum_{k in g} x_k
 * The integer dot products are exact (at most 32 * 255 * 127 < 2^24, also exact as a
 * float), and the offset term multiplies the float sum of x itself, so the only error
 * beyond float32 rounding is x's int8 rounding times scale * (code - z): centring halves
 * the largest weight it multiplies (and makes Q4_0 and Q8_0, whose code - z is the file's
 * signed value, the products llama.cpp computes for them). The centring costs nothing: the
 * integer dot products start from -z * (the sum of q over each lane's 4 columns).
 * The rounding is round-half-even of x * (1 / d) with d = amax * (1 / 127) in float32,
 * reproducible in torch (the tests do); built without -ffast-math so it stays that.
 *
 * A call quantizes x once (rows spread over the threads), then multiplies in register
 * tiles of 4 rows of x by 2 weight rows (1 by 4 for the rows left over), so each read of
 * a weight row's codes serves 4 rows of x and each read of q 2 weight rows: a batch of
 * decode steps (16-64 rows) costs far less than that many single rows.
 *
 * `quant_linear_q8_available()`: 2 AVX512-VNNI (`vpdpbusd`: unsigned codes times signed
 * int8, four products a 32-bit lane, which fits our unsigned codes exactly); 1 AVX2, a pair
 * of blocks a step (4-bit codes through `vpmaddubsw`, whose 16-bit pair sums stay below
 * 2 * 15 * 127; 8-bit codes would saturate it at 2 * 255 * 127, so they multiply as signed
 * code - 128, llama.cpp's sign trick); 0 plain C.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prefetch_rows.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define Q8_PATH 2
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define Q8_PATH 1
#else
#define Q8_PATH 0
#endif

/* Tiles of TILE_M rows of x by TILE_N weight rows, and 1 by EDGE_N for the rows of x left
 * over (a decode step's one row among them); weight rows go in chunks of ROW_CHUNK. */
enum { BLOCK = 32, ROW_CHUNK = 16, WINDOW = 16, TILE_M = 4, TILE_N = 2, EDGE_N = 4 };

int quant_linear_q8_available(void) { return Q8_PATH; }

#if Q8_PATH != 2 /* the VNNI path converts 16 at a time */
static float half_to_float(uint16_t h) {
#if Q8_PATH
    return _cvtsh_ss(h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff, bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        exponent = 113;
        while (!(mantissa & 0x400)) {
            mantissa <<= 1;
            exponent--;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
#endif
}
#endif

static float load_x(const void *x, int bf16, int64_t at) {
    if (!bf16) return ((const float *)x)[at];
    const uint32_t bits = (uint32_t)((const uint16_t *)x)[at] << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* float32 to bfloat16, rounded to nearest even (torch's rounding; finite values). */
static void store(void *out, int bf16, int64_t at, float value) {
    if (!bf16) {
        ((float *)out)[at] = value;
        return;
    }
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        ((uint16_t *)out)[at] = (uint16_t)((bits >> 16) | 0x40); /* NaN */
        return;
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    ((uint16_t *)out)[at] = (uint16_t)(bits >> 16);
}

/* Where column c of block b sits in a row of q. VNNI with 4-bit codes reads four blocks'
 * 64 bytes at once and multiplies their low nibbles (columns 0-15 of each block), then
 * their high ones (16-31), into the same 16 lanes: q follows, a quad of blocks holding
 * columns 0-15 of each, then 16-31 of each. AVX2 with 4-bit codes does the same with a
 * pair of blocks' 32 bytes (`pair4`). Else column order. */
static int vnni4(int bits) { return Q8_PATH == 2 && bits == 4; }
static int pair4(int bits) { return Q8_PATH == 1 && bits == 4; }

static int64_t q_at(int bits, int b, int c) {
    if (pair4(bits)) return (int64_t)(b & ~1) * BLOCK + (c >> 4) * 32 + (b & 1) * 16 + (c & 15);
    if (!vnni4(bits)) return (int64_t)b * BLOCK + c;
    return (int64_t)(b & ~3) * BLOCK + (c >> 4) * 64 + (b & 3) * 16 + (c & 15);
}

/* The activations of one call, quantized once for every weight row: q (int8, row stride
 * q_stride, zero padded), the centring -z * the sum of each 4 bytes of q (q_stride / 4 a
 * row), d per block (VNNI: spread over the lanes of each step, see put) and the float
 * sum of x per group (padded with zeros to whole windows of 16). */
typedef struct {
    int8_t *q;
    int32_t *centre;
    float *d, *sum;
    int64_t q_stride, d_stride, sum_stride;
} activations;

/* Blocks a VNNI step reads (64 bytes of codes: four 4-bit blocks or two 8-bit ones). */
static int step_blocks(int bits) { return bits == 4 ? 4 : 2; }

/* Where block b's d (or a weight row's scale) goes: VNNI spreads each step's blocks over
 * its 16 lanes as the integer dots lie (4-bit: lanes 4j..4j+3 block j; 8-bit: 8j..8j+7),
 * and AVX2 each pair's over 8 lanes (4-bit: lanes 0-3 the first block, 4-7 the second;
 * 8-bit, whose two blocks' dots are paired by a horizontal add: lanes 0, 1, 4, 5 the
 * first), so one multiply serves a step; plain C keeps one value a block. */
static int64_t lanes_a_row(int blocks, int bits) {
    if (Q8_PATH == 0) return (blocks + WINDOW - 1) / WINDOW * WINDOW;
    if (Q8_PATH == 1) return (int64_t)(blocks + WINDOW - 1) / WINDOW * WINDOW * 4;
    return (int64_t)(blocks + step_blocks(bits) - 1) / step_blocks(bits) * 16;
}

/* The block (0 or 1 of its pair) that lane l of an AVX2 pair step holds. */
static int pair_lane_block(int l, int bits) { return bits == 4 ? l >> 2 : (l >> 1) & 1; }

static void put(float *row, int b, int bits, float value) {
    if (Q8_PATH == 0) {
        row[b] = value;
        return;
    }
    if (Q8_PATH == 1) {
        for (int l = 0; l < 8; l++)
            if (pair_lane_block(l, bits) == (b & 1)) row[(int64_t)b / 2 * 8 + l] = value;
        return;
    }
    const int step = step_blocks(bits), lanes = 16 / step;
    for (int l = 0; l < lanes; l++) row[(int64_t)b / step * 16 + b % step * lanes + l] = value;
}

#include "quant_linear_q8_quantize.h" /* quantize_row(): a row of x to int8 */

/* A chunk of weight rows' float tables: each row's scale per block (laid out as d) and
 * offset + z * scale per group, for the rows of one chunk (VNNI from 4 rows of x, plain
 * C always; AVX2 reads the weight's own scales instead). */
typedef struct {
    float *scale, *offset;
    int64_t scale_stride, offset_stride;
    int32_t *window_group; /* VNNI: each block's group's place in its window of 16 blocks */
} weight_tables;

#if Q8_PATH == 2
/* Up to 16 float16 values (the rest zero) as floats. */
static inline __m512 load_halves(const uint16_t *at, int count) {
    const int n = count < 16 ? count : 16;
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), at));
}

/* Lane l of a step holds block l / 4 of its 4 (4-bit) or l / 8 of its 2 (8-bit). */
static inline __m512i lane_blocks(int bits) {
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_srli_epi32(lanes, step_blocks(bits) == 4 ? 2 : 3);
}

/* The scales of blocks w0 .. w0 + 15 of a row, each its group's. */
static inline __m512 window_scales(const uint16_t *scale, int w0, int groups, int group_blocks,
                                   const int32_t *window_group) {
    const int g0 = w0 / group_blocks;
    const __m512 s = load_halves(scale + g0, groups - g0);
    return group_blocks > 1 ? _mm512_permutexvar_ps(_mm512_loadu_si512(window_group + w0), s) : s;
}
#endif

static void fill_tables(weight_tables *t, const uint16_t *scale, const uint16_t *offset, int rows,
                        int blocks, int groups, int group_blocks, int bits) {
    const float z = (float)(1 << (bits - 1));
#if Q8_PATH == 2 /* 16 blocks' scales at a time, spread over each step's lanes by a permute */
    const int step = step_blocks(bits);
    const __m512i pattern = lane_blocks(bits);
    for (int n = 0; n < rows; n++) {
        const uint16_t *s = scale + (int64_t)n * groups, *o = offset + (int64_t)n * groups;
        float *row = t->scale + n * t->scale_stride;
        for (int w0 = 0; w0 < blocks; w0 += WINDOW) {
            const __m512 sw = window_scales(s, w0, groups, group_blocks, t->window_group);
            const int w_end = w0 + WINDOW < blocks ? w0 + WINDOW : blocks;
            for (int b = w0; b < w_end; b += step) {
                const __m512i at = _mm512_add_epi32(pattern, _mm512_set1_epi32(b - w0));
                _mm512_storeu_ps(row + b / step * 16, _mm512_permutexvar_ps(at, sw));
            }
        }
        for (int g = 0; g < groups; g += 16)
            _mm512_storeu_ps(t->offset + n * t->offset_stride + g,
                             _mm512_fmadd_ps(load_halves(s + g, groups - g), _mm512_set1_ps(z),
                                             load_halves(o + g, groups - g)));
    }
#else
    for (int n = 0; n < rows; n++) {
        const uint16_t *s = scale + (int64_t)n * groups, *o = offset + (int64_t)n * groups;
        for (int b = 0; b < blocks; b++)
            put(t->scale + n * t->scale_stride, b, bits, half_to_float(s[b / group_blocks]));
        for (int g = 0; g < groups; g++)
            t->offset[n * t->offset_stride + g] = half_to_float(o[g]) + z * half_to_float(s[g]);
    }
#endif
}

#include "quant_linear_q8_tile.h" /* tile(): the multiply of one register tile */

/* x's M rows quantized into `a` (one allocation: free(a->q)); 0, or 2 where it failed. */
static int quantize_activations(const void *x, int64_t x_stride, int x_bf16, int64_t M, int K,
                                int bits, int group_size, int threads, activations *a_out) {
    const int blocks = (K + BLOCK - 1) / BLOCK;
    const int groups = (K + group_size - 1) / group_size;
    activations a = {0};
    a.q_stride = (int64_t)(blocks + 3) / 4 * 4 * BLOCK; /* whole quads of blocks */
    a.d_stride = lanes_a_row(blocks, bits);
    a.sum_stride = (groups + WINDOW - 1) / WINDOW * WINDOW;
    /* one allocation a call (q, centre, d, sum; each a multiple of 64 bytes a row), one
     * a thread below: a decode step makes some 120 calls, and eight allocations each were
     * a few tenths of a microsecond of them */
    const size_t q_bytes = (size_t)(M * a.q_stride);
    const size_t float_bytes = (size_t)(M * (a.d_stride + a.sum_stride)) * sizeof(float);
    a.q = aligned_alloc(64, 2 * q_bytes + float_bytes);
    int failed = a.q == NULL ? 2 : 0;
    if (!failed) {
        a.centre = (int32_t *)(a.q + q_bytes);
        a.d = (float *)(a.q + 2 * q_bytes);
        a.sum = a.d + M * a.d_stride;
        memset(a.q, 0, q_bytes);
        memset(a.d, 0, float_bytes);
        if (M < 4) { /* a parallel region of one thread still costs its set-up */
            for (int64_t m = 0; m < M; m++)
                quantize_row(x, x_stride, x_bf16, m, K, bits, group_size, blocks, &a);
        } else {
#pragma omp parallel for schedule(static) num_threads(threads)
            for (int64_t m = 0; m < M; m++)
                quantize_row(x, x_stride, x_bf16, m, K, bits, group_size, blocks, &a);
        }
    }
    *a_out = a;
    return failed;
}

int quant_linear_q8(const void *x, int64_t x_stride, int x_bf16, int64_t M, const uint8_t *codes,
                    const uint16_t *scale, const uint16_t *offset, int64_t N, int K, int bits,
                    int group_size, void *out, int threads) {
    if (!(M > 0 && N > 0 && K > 0 && (bits == 4 || bits == 8) && group_size > 0 &&
          group_size % BLOCK == 0))
        return 1;
    const int blocks = (K + BLOCK - 1) / BLOCK, group_blocks = group_size / BLOCK;
    const int groups = (K + group_size - 1) / group_size;
    const int64_t row_bytes = (int64_t)blocks * BLOCK * bits / 8;
    activations a;
    int failed = quantize_activations(x, x_stride, x_bf16, M, K, bits, group_size, threads, &a);
    const int64_t chunks = (N + ROW_CHUNK - 1) / ROW_CHUNK, ahead = prefetch_distance(row_bytes);
#pragma omp parallel num_threads(threads) if (!failed)
    {
        weight_tables t = {0};
        t.scale_stride = lanes_a_row(blocks, bits);
        t.offset_stride = a.sum_stride;
        /* AVX2 never fills the float tables: one row keeps the pointers valid */
        const int table_rows = Q8_PATH == 1 ? 1 : ROW_CHUNK;
        const int windows = (blocks + WINDOW - 1) / WINDOW;
        /* AVX2 only: lane l of pair step p reads its block's group within the window */
        const size_t pair_lanes = Q8_PATH == 1 ? (size_t)windows * WINDOW * 4 : 1;
        const size_t table_floats = (size_t)(table_rows * (t.scale_stride + t.offset_stride));
        t.scale = malloc(table_floats * sizeof(float) +
                         ((size_t)windows * WINDOW + pair_lanes) * sizeof(int32_t));
        const int ready = t.scale != NULL;
        if (ready) {
            memset(t.scale, 0, table_floats * sizeof(float));
            t.offset = t.scale + table_rows * t.scale_stride;
            t.window_group = (int32_t *)(t.scale + table_floats);
        }
        int32_t *pair_index = ready ? t.window_group + windows * WINDOW : NULL;
        for (int b = 0; ready && b < windows * WINDOW; b++)
            t.window_group[b] =
                b < blocks ? b / group_blocks - b / WINDOW * WINDOW / group_blocks : 0;
        for (int p = 0; Q8_PATH == 1 && ready && p < windows * WINDOW / 2; p++)
            for (int l = 0; l < 8; l++)
                pair_index[p * 8 + l] = t.window_group[2 * p + pair_lane_block(l, bits)];
        if (!ready) {
#pragma omp atomic write
            failed = 2;
        }
#pragma omp for schedule(static)
        for (int64_t chunk = 0; chunk < chunks; chunk++) {
            if (!ready) continue;
            const int64_t n0 = chunk * ROW_CHUNK;
            const int rows = N - n0 < ROW_CHUNK ? (int)(N - n0) : ROW_CHUNK;
            /* with fewer rows of x than a tile the SIMD paths read the weight's own
             * scales: the tables pay only when many rows of x use them, and on AVX2,
             * where a pair step's scales are one permute of a window, not even then */
            const int use_raw = Q8_PATH == 1 || (Q8_PATH == 2 && M < TILE_M);
            if (!use_raw)
                fill_tables(&t, scale + n0 * groups, offset + n0 * groups, rows, blocks, groups,
                            group_blocks, bits);
            raw_scales raw = {.window_group = t.window_group,
                              .pair_index = pair_index,
                              .scale_end = scale + N * groups,
                              .offset_end = offset + N * groups,
                              .group_blocks = group_blocks};
            for (int64_t m0 = 0; m0 < M;) {
                const int full = M - m0 >= TILE_M, nt = full ? TILE_N : EDGE_N;
                for (int j = 0; j < rows; j += nt) {
                    if (m0 == 0) { /* the tile's rows `ahead` on: see prefetch_rows.h */
                        const int64_t next = n0 + j + ahead;
                        prefetch_rows(codes, row_bytes, next, nt, N);
                        prefetch_rows(scale, groups * 2, next, nt, N);
                        prefetch_rows(offset, groups * 2, next, nt, N);
                    }
                    const uint8_t *tile_rows[EDGE_N];
                    const float *ws[EDGE_N], *wo[EDGE_N];
                    for (int n = 0; n < nt; n++) { /* past the chunk: its last row again */
                        const int r = j + n < rows ? j + n : rows - 1;
                        tile_rows[n] = codes + (n0 + r) * row_bytes;
                        const int tr = r < table_rows ? r : 0; /* AVX2: its one row */
                        ws[n] = t.scale + tr * t.scale_stride;
                        wo[n] = t.offset + tr * t.offset_stride;
                        raw.scale[n] = scale + (n0 + r) * groups;
                        raw.offset[n] = offset + (n0 + r) * groups;
                    }
                    float sums[8];
#define TILE(MT, NT, RAW, BITS) \
    tile(&a, m0, MT, tile_rows, NT, ws, wo, RAW, blocks, groups, BITS, sums)
#define FULL_RAW (Q8_PATH == 1 ? &raw : NULL) /* a constant for each path's tile */
                    if (full && bits == 4) TILE(TILE_M, TILE_N, FULL_RAW, 4);
                    else if (full) TILE(TILE_M, TILE_N, FULL_RAW, 8);
                    else if (use_raw && bits == 4) TILE(1, EDGE_N, &raw, 4);
                    else if (use_raw) TILE(1, EDGE_N, &raw, 8);
                    else if (bits == 4) TILE(1, EDGE_N, NULL, 4);
                    else TILE(1, EDGE_N, NULL, 8);
#undef TILE
#undef FULL_RAW
                    const int mt = full ? TILE_M : 1;
                    for (int m = 0; m < mt; m++)
                        for (int n = 0; n < nt && j + n < rows; n++)
                            store(out, x_bf16, (m0 + m) * N + n0 + j + n, sums[m * nt + n]);
                }
                m0 += full ? TILE_M : 1;
            }
        }
        free(t.scale);
    }
    free(a.q);
    return failed;
}

#include "quant_linear_q8_il.h" /* quant_linear_q8_il(): 16 weight rows interleaved */
