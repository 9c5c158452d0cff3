/* Group-quantized (4- or 8-bit) linear layer for the CPU: out = x @ dequantize(w).T, the
 * weight read as its packed codes and widened in registers, never written out whole.
 *
 * The layout is inference/model/quant/group_math.py's: codes (N, Kp * bits / 8) bytes in
 * blocks of 32 columns (Kp = K rounded up to 32; a 4-bit block is 16 bytes, byte i holding
 * column i in its low nibble and column 16 + i in its high one); scale and offset (N, G)
 * float16, one a row and group of group_size columns (a multiple of 32);
 *   w[n, k] = scale[n, g] * code[n, k] + offset[n, g]   (float32, g = k / group_size).
 * Each weight is widened to exactly that float32 value (the product is exact, so one FMA
 * rounds as the reference's multiply-then-add does) and multiplied into float32 sums: the
 * result is the float32 matmul with the dequantized weight, up to the order of the sums.
 *
 * x (M, K) float32 or bfloat16 rows (row stride x_stride, elements contiguous); out (M, N)
 * in x's dtype, contiguous. x is first widened into a float32 copy padded to Kp with zeros.
 * Rows of the weight are split over the threads; each widened block of 32 weights serves
 * every row of x (up to M_TILE at a time) from registers.
 *
 * `quant_linear_available()` says how it was built (build.py, -march=native):
 * 2: AVX-512 (F, BW, VL) with FMA and F16C: 16 weights a vector, and a 4-bit block widened
 *    by two permutes of its group's 16 possible weights instead of converts and FMAs;
 * 1: AVX2 with FMA and F16C (every x86-64 server since Haswell);
 * 0: plain C, which the compiler vectorises as it can.
 * `quant_dequantize` writes the whole float weight (float32 or bfloat16): the fallback for
 * many rows of x, where one matmul over a dequantized copy beats this kernel.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prefetch_rows.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define QUANT_PATH 2
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define QUANT_PATH 1
#else
#define QUANT_PATH 0
#endif

enum { BLOCK = 32, M_TILE = 4, ROW_CHUNK = 16 };

/* The vector of each path: a block of 32 weights is VECS of them. */
#if QUANT_PATH == 2
typedef __m512 vec;
enum { LANES = 16 };
#define vzero _mm512_setzero_ps
#define vset1 _mm512_set1_ps
#define vload _mm512_loadu_ps
#define vfma _mm512_fmadd_ps
#define vadd _mm512_add_ps
#define vsum _mm512_reduce_add_ps
#elif QUANT_PATH == 1
typedef __m256 vec;
enum { LANES = 8 };
#define vzero _mm256_setzero_ps
#define vset1 _mm256_set1_ps
#define vload _mm256_loadu_ps
#define vfma _mm256_fmadd_ps
#define vadd _mm256_add_ps
static inline float vsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}
#endif
#if QUANT_PATH
enum { VECS = BLOCK / LANES };
#endif

int quant_linear_available(void) { return QUANT_PATH; }

static float half_to_float(uint16_t h) {
#if QUANT_PATH
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

static float bf16_to_float(uint16_t b) {
    const uint32_t bits = (uint32_t)b << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* float32 to bfloat16, rounded to nearest even (torch's rounding; finite values). */
static uint16_t float_to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* The 32 codes of one block as integers 0..255, in column order. */
static void block_codes(const uint8_t *block, int bits, int codes[BLOCK]) {
    if (bits == 8) {
        for (int i = 0; i < BLOCK; i++) codes[i] = block[i];
        return;
    }
    for (int i = 0; i < BLOCK / 2; i++) {
        codes[i] = block[i] & 0x0f;
        codes[i + BLOCK / 2] = block[i] >> 4;
    }
}

#if QUANT_PATH
/* One group's weights for widening: scale and offset broadcast, and (AVX-512, 4-bit) its 16
 * possible weights, scale * code + offset for codes 0..15, each the same float32 value the
 * reference computes: the product is exact, so the one rounding of the FMA is the add's. */
typedef struct {
    vec s, o;
#if QUANT_PATH == 2
    __m512 table;
#endif
} group_weights;

static inline group_weights group_of(uint16_t scale, uint16_t offset) {
    group_weights g = {.s = vset1(_cvtsh_ss(scale)), .o = vset1(_cvtsh_ss(offset))};
#if QUANT_PATH == 2
    const __m512i codes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    g.table = _mm512_fmadd_ps(_mm512_cvtepi32_ps(codes), g.s, g.o);
#endif
    return g;
}

/* One block of 32 weights as VECS vectors of LANES float32 values, in column order. */
static inline void widen_block(const uint8_t *block, int bits, const group_weights *g,
                               vec w[VECS]) {
#if QUANT_PATH == 2
    if (bits == 4) { /* a permute reads only an index's low 4 bits: no mask for the low nibble */
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)block));
        w[0] = _mm512_permutexvar_ps(bytes, g->table);
        w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), g->table);
        return;
    }
    for (int v = 0; v < VECS; v++) {
        const __m128i c = _mm_loadu_si128((const __m128i *)(block + 16 * v));
        w[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c)), g->s, g->o);
    }
#else
    __m128i c[VECS]; /* 8 codes each, in the low 8 bytes */
    if (bits == 4) {
        const __m128i bytes = _mm_loadu_si128((const __m128i *)block);
        const __m128i nibble = _mm_set1_epi8(0x0f);
        const __m128i low = _mm_and_si128(bytes, nibble);
        const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
        c[0] = low;
        c[1] = _mm_srli_si128(low, 8);
        c[2] = high;
        c[3] = _mm_srli_si128(high, 8);
    } else {
        const __m128i first = _mm_loadu_si128((const __m128i *)block);
        const __m128i second = _mm_loadu_si128((const __m128i *)(block + 16));
        c[0] = first;
        c[1] = _mm_srli_si128(first, 8);
        c[2] = second;
        c[3] = _mm_srli_si128(second, 8);
    }
    for (int v = 0; v < VECS; v++)
        w[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c[v])), g->s, g->o);
#endif
}

/* sums[m] = x[m] . w[n] for MT rows of the widened x (row stride kp floats): each row
 * keeps two accumulators (even and odd vectors of a block), so no FMA waits on the last. */
static inline __attribute__((always_inline)) void row_dot_tile(
    const float *xf, int64_t kp, const int MT, const uint8_t *row, const uint16_t *scale,
    const uint16_t *offset, int blocks, int group_blocks, int bits, float *sums) {
    const int block_bytes = BLOCK * bits / 8;
    vec acc[2][M_TILE];
    for (int m = 0; m < MT; m++) acc[0][m] = acc[1][m] = vzero();
    for (int b0 = 0, g = 0; b0 < blocks; b0 += group_blocks, g++) {
        const group_weights gw = group_of(scale[g], offset[g]);
        const int b_end = b0 + group_blocks < blocks ? b0 + group_blocks : blocks;
        for (int b = b0; b < b_end; b++) {
            vec w[VECS];
            widen_block(row + (int64_t)b * block_bytes, bits, &gw, w);
            for (int m = 0; m < MT; m++) {
                const float *xb = xf + m * kp + (int64_t)b * BLOCK;
                for (int v = 0; v < VECS; v++)
                    acc[v & 1][m] = vfma(vload(xb + v * LANES), w[v], acc[v & 1][m]);
            }
        }
    }
    for (int m = 0; m < MT; m++) sums[m] = vsum(vadd(acc[0][m], acc[1][m]));
}

/* One row of x against two rows of the weight at a time: four independent sums. */
static void row_pair_dot(const float *xf, const uint8_t *row0, const uint8_t *row1,
                         const uint16_t *scale0, const uint16_t *offset0, const uint16_t *scale1,
                         const uint16_t *offset1, int blocks, int group_blocks, int bits,
                         float *sum0, float *sum1) {
    const int block_bytes = BLOCK * bits / 8;
    vec a[2] = {vzero(), vzero()}, c[2] = {vzero(), vzero()};
    for (int b0 = 0, g = 0; b0 < blocks; b0 += group_blocks, g++) {
        const group_weights g0 = group_of(scale0[g], offset0[g]);
        const group_weights g1 = group_of(scale1[g], offset1[g]);
        const int b_end = b0 + group_blocks < blocks ? b0 + group_blocks : blocks;
        for (int b = b0; b < b_end; b++) {
            vec xv[VECS], w[VECS];
            for (int v = 0; v < VECS; v++) xv[v] = vload(xf + (int64_t)b * BLOCK + v * LANES);
            widen_block(row0 + (int64_t)b * block_bytes, bits, &g0, w);
            for (int v = 0; v < VECS; v++) a[v & 1] = vfma(xv[v], w[v], a[v & 1]);
            widen_block(row1 + (int64_t)b * block_bytes, bits, &g1, w);
            for (int v = 0; v < VECS; v++) c[v & 1] = vfma(xv[v], w[v], c[v & 1]);
        }
    }
    *sum0 = vsum(vadd(a[0], a[1]));
    *sum1 = vsum(vadd(c[0], c[1]));
}
#endif

static void row_dot(const float *xf, int64_t kp, int mt, const uint8_t *row, const uint16_t *scale,
                    const uint16_t *offset, int blocks, int group_blocks, int bits, float *sums) {
#if QUANT_PATH
    switch (mt) { /* each a copy with its own number of accumulators in registers */
    case 1: row_dot_tile(xf, kp, 1, row, scale, offset, blocks, group_blocks, bits, sums); break;
    case 2: row_dot_tile(xf, kp, 2, row, scale, offset, blocks, group_blocks, bits, sums); break;
    case 3: row_dot_tile(xf, kp, 3, row, scale, offset, blocks, group_blocks, bits, sums); break;
    default: row_dot_tile(xf, kp, 4, row, scale, offset, blocks, group_blocks, bits, sums);
    }
#else
    const int block_bytes = BLOCK * bits / 8;
    float acc[M_TILE] = {0};
    int codes[BLOCK];
    float w[BLOCK];
    for (int b = 0; b < blocks; b++) {
        const int g = b / group_blocks;
        const float s = half_to_float(scale[g]), o = half_to_float(offset[g]);
        block_codes(row + (int64_t)b * block_bytes, bits, codes);
        for (int i = 0; i < BLOCK; i++) w[i] = (float)codes[i] * s + o; /* exact product */
        for (int m = 0; m < mt; m++) {
            const float *xb = xf + m * kp + (int64_t)b * BLOCK;
            float part = 0.0f;
            for (int i = 0; i < BLOCK; i++) part += xb[i] * w[i];
            acc[m] += part;
        }
    }
    for (int m = 0; m < mt; m++) sums[m] = acc[m];
#endif
}

static inline void store(void *out, int bf16, int64_t at, float value) {
    if (bf16)
        ((uint16_t *)out)[at] = float_to_bf16(value);
    else
        ((float *)out)[at] = value;
}

static int checked(int64_t M, int64_t N, int K, int bits, int group_size) {
    return M > 0 && N > 0 && K > 0 && (bits == 4 || bits == 8) && group_size > 0 &&
           group_size % BLOCK == 0;
}

int quant_linear(const void *x, int64_t x_stride, int x_bf16, int64_t M, const uint8_t *codes,
                 const uint16_t *scale, const uint16_t *offset, int64_t N, int K, int bits,
                 int group_size, void *out, int threads) {
    if (!checked(M, N, K, bits, group_size)) return 1;
    const int blocks = (K + BLOCK - 1) / BLOCK;
    const int64_t kp = (int64_t)blocks * BLOCK;
    const int groups = (K + group_size - 1) / group_size, group_blocks = group_size / BLOCK;
    const int64_t row_bytes = kp * bits / 8;
    float *xf = aligned_alloc(64, (size_t)(M * kp * sizeof(float) + 64) / 64 * 64);
    if (xf == NULL) return 2;
    for (int64_t m = 0; m < M; m++) {
        float *dst = xf + m * kp;
        if (x_bf16) {
            const uint16_t *src = (const uint16_t *)x + m * x_stride;
            for (int k = 0; k < K; k++) dst[k] = bf16_to_float(src[k]);
        } else {
            memcpy(dst, (const float *)x + m * x_stride, (size_t)K * sizeof(float));
        }
        for (int64_t k = K; k < kp; k++) dst[k] = 0.0f;
    }
    const int64_t chunks = (N + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t chunk = 0; chunk < chunks; chunk++) {
        const int64_t n_end = chunk * ROW_CHUNK + ROW_CHUNK < N ? chunk * ROW_CHUNK + ROW_CHUNK : N;
#if QUANT_PATH
        if (M == 1) { /* decode at batch 1: two weight rows share each load of x */
            const int64_t ahead = prefetch_distance(row_bytes);
            int64_t n = chunk * ROW_CHUNK;
            for (; n + 1 < n_end; n += 2) {
                float y0, y1;
                prefetch_rows(codes, row_bytes, n + ahead, 2, N); /* see prefetch_rows.h */
                prefetch_rows(scale, groups * 2, n + ahead, 2, N);
                prefetch_rows(offset, groups * 2, n + ahead, 2, N);
                row_pair_dot(xf, codes + n * row_bytes, codes + (n + 1) * row_bytes,
                             scale + n * groups, offset + n * groups, scale + (n + 1) * groups,
                             offset + (n + 1) * groups, blocks, group_blocks, bits, &y0, &y1);
                store(out, x_bf16, n, y0);
                store(out, x_bf16, n + 1, y1);
            }
            if (n < n_end) {
                float y0;
                row_dot(xf, kp, 1, codes + n * row_bytes, scale + n * groups, offset + n * groups,
                        blocks, group_blocks, bits, &y0);
                store(out, x_bf16, n, y0);
            }
            continue;
        }
#endif
        for (int64_t m0 = 0; m0 < M; m0 += M_TILE) {
            const int mt = M - m0 < M_TILE ? (int)(M - m0) : M_TILE;
            for (int64_t n = chunk * ROW_CHUNK; n < n_end; n++) {
                float sums[M_TILE];
                row_dot(xf + m0 * kp, kp, mt, codes + n * row_bytes, scale + n * groups,
                        offset + n * groups, blocks, group_blocks, bits, sums);
                for (int m = 0; m < mt; m++) store(out, x_bf16, (m0 + m) * N + n, sums[m]);
            }
        }
    }
    free(xf);
    return 0;
}

int quant_dequantize(const uint8_t *codes, const uint16_t *scale, const uint16_t *offset,
                     int64_t N, int K, int bits, int group_size, void *out, int out_bf16,
                     int threads) {
    if (!checked(1, N, K, bits, group_size)) return 1;
    const int blocks = (K + BLOCK - 1) / BLOCK;
    const int groups = (K + group_size - 1) / group_size, group_blocks = group_size / BLOCK;
    const int64_t row_bytes = (int64_t)blocks * BLOCK * bits / 8;
    const int block_bytes = BLOCK * bits / 8;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t n = 0; n < N; n++) {
        int c[BLOCK];
        for (int b = 0; b < blocks; b++) {
            const int g = b / group_blocks;
            const float s = half_to_float(scale[n * groups + g]);
            const float o = half_to_float(offset[n * groups + g]);
            block_codes(codes + n * row_bytes + (int64_t)b * block_bytes, bits, c);
            const int width = K - b * BLOCK < BLOCK ? K - b * BLOCK : BLOCK;
            const int64_t at = n * K + (int64_t)b * BLOCK;
            for (int i = 0; i < width; i++) {
                const float w = (float)c[i] * s + o; /* the product is exact */
                if (out_bf16)
                    ((uint16_t *)out)[at + i] = float_to_bf16(w);
                else
                    ((float *)out)[at + i] = w;
            }
        }
    }
    return 0;
}
