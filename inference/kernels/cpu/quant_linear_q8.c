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
 * `quant_linear_q8_available()`: 2 AVX512-VNNI (`vpdpbusd`: unsigned codes times signed
 * int8, four products a 32-bit lane, which fits our unsigned codes exactly); 1 AVX2 (4-bit
 * codes through `vpmaddubsw`, whose 16-bit pair sums stay below 2 * 15 * 127; 8-bit codes
 * would saturate it at 2 * 255 * 127, so they widen to 16 bits and use `vpmaddwd`);
 * 0 plain C.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

enum { BLOCK = 32, M_TILE = 4, ROW_CHUNK = 16, WINDOW = 16 };

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
 * columns 0-15 of each, then 16-31 of each. Else column order. */
static int vnni4(int bits) { return Q8_PATH == 2 && bits == 4; }

static int64_t q_at(int bits, int b, int c) {
    if (!vnni4(bits)) return (int64_t)b * BLOCK + c;
    return (int64_t)(b & ~3) * BLOCK + (c >> 4) * 64 + (b & 3) * 16 + (c & 15);
}

/* The activations of one call: q (int8, row stride q_stride, zero padded), the centring
 * -z * the sum of each 4 bytes of q (q_stride / 4 a row), d per block and the float sum of
 * x per group (both padded with zeros to whole windows of 16). */
typedef struct {
    int8_t *q;
    int32_t *centre;
    float *d, *sum;
    int64_t q_stride, d_stride, sum_stride;
} activations;

static int quantize_rows(const void *x, int64_t x_stride, int bf16, int64_t M, int K, int bits,
                         int group_size, int blocks, int groups, activations *a) {
    a->q_stride = (int64_t)(blocks + 3) / 4 * 4 * BLOCK; /* whole quads of blocks */
    a->d_stride = (blocks + WINDOW - 1) / WINDOW * WINDOW;
    a->sum_stride = (groups + WINDOW - 1) / WINDOW * WINDOW;
    a->q = aligned_alloc(64, (size_t)(M * a->q_stride));
    a->centre = aligned_alloc(64, (size_t)(M * a->q_stride));
    a->d = calloc((size_t)(M * a->d_stride), sizeof(float));
    a->sum = calloc((size_t)(M * a->sum_stride), sizeof(float));
    if (a->q == NULL || a->centre == NULL || a->d == NULL || a->sum == NULL) return 2;
    memset(a->q, 0, (size_t)(M * a->q_stride));
    const float inv127 = 1.0f / 127.0f;
    for (int64_t m = 0; m < M; m++) {
        int8_t *q = a->q + m * a->q_stride;
        for (int b = 0; b < blocks; b++) {
            const int width = K - b * BLOCK < BLOCK ? K - b * BLOCK : BLOCK;
            float v[BLOCK], amax = 0.0f;
            for (int c = 0; c < width; c++) {
                v[c] = load_x(x, bf16, m * x_stride + (int64_t)b * BLOCK + c);
                amax = fabsf(v[c]) > amax ? fabsf(v[c]) : amax;
                a->sum[m * a->sum_stride + b * BLOCK / group_size] += v[c];
            }
            const float d = amax * inv127, id = d > 0.0f ? 1.0f / d : 0.0f;
            a->d[m * a->d_stride + b] = d;
            for (int c = 0; c < width; c++) {
                const float r = nearbyintf(v[c] * id); /* half to even */
                q[q_at(bits, b, c)] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
            }
        }
        int32_t *centre = a->centre + m * (a->q_stride / 4);
        for (int64_t j = 0; j < a->q_stride / 4; j++)
            centre[j] = -(1 << (bits - 1)) * (q[4 * j] + q[4 * j + 1] + q[4 * j + 2] +
                                              q[4 * j + 3]);
        for (int64_t j = 0; vnni4(bits) && j < a->q_stride / 4; j += 32) /* both halves a lane */
            for (int l = 0; l < 16; l++) centre[j + l] += centre[j + 16 + l];
    }
    return 0;
}

/* sums[m] = x[m] . w[n] for MT rows of x. */
static inline __attribute__((always_inline)) void row_dot_tile(
    const activations *a, int64_t m0, const int MT, const uint8_t *row, const uint16_t *scale,
    const uint16_t *offset, int blocks, int groups, int group_blocks, const int32_t *window_group,
    int bits, float *sums) {
    const int block_bytes = BLOCK * bits / 8;
    const int8_t *q = a->q + m0 * a->q_stride;
    const int32_t *centre = a->centre + m0 * (a->q_stride / 4);
    const float *d = a->d + m0 * a->d_stride, *xsum = a->sum + m0 * a->sum_stride;
    const float z = (float)(1 << (bits - 1));
#if Q8_PATH == 2
    /* 16 lanes of 4 (or, 4-bit, 8) products each: lane l belongs to block pattern[l] of the
     * quad (4-bit) or pair (8-bit), and takes that block's scale_g * d_b by a permute. */
    const __m512i pattern = bits == 4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3,
                                                          3, 3, 3)
                                      : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1,
                                                          1, 1, 1);
    const int step = bits == 4 ? 4 : 2;
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    __m512 acc[2][M_TILE];
    for (int m = 0; m < MT; m++) acc[0][m] = acc[1][m] = _mm512_setzero_ps();
    for (int w0 = 0; w0 < blocks; w0 += WINDOW) {
        const int g0 = w0 / group_blocks, in_window = groups - g0 < WINDOW ? groups - g0 : WINDOW;
        const __mmask16 live = (__mmask16)((1u << in_window) - 1);
        __m512 s = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, scale + g0));
        if (group_blocks > 1) /* each block of the window its group's scale */
            s = _mm512_permutexvar_ps(_mm512_loadu_si512(window_group + w0), s);
        __m512 ds[M_TILE];
        for (int m = 0; m < MT; m++)
            ds[m] = _mm512_mul_ps(s, _mm512_loadu_ps(d + m * a->d_stride + w0));
        const int w_end = w0 + WINDOW < blocks ? w0 + WINDOW : blocks;
        for (int b = w0; b < w_end; b += step) {
            const uint8_t *at = row + (int64_t)b * block_bytes;
            const int left = blocks - b; /* past the last block, load nothing */
            const __m512i v = left >= step ? _mm512_loadu_si512(at)
                                           : _mm512_maskz_loadu_epi8(
                                                 (1ull << (left * block_bytes)) - 1, at);
            const __m512i lane_block = _mm512_add_epi32(pattern, _mm512_set1_epi32(b - w0));
            const __m512i low = bits == 4 ? _mm512_and_si512(v, nibble) : v;
            const __m512i high = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
            for (int m = 0; m < MT; m++) {
                const int8_t *qb = q + m * a->q_stride + (int64_t)b * BLOCK;
                __m512i dot = _mm512_load_si512(centre + m * (a->q_stride / 4) + b * 8);
                dot = _mm512_dpbusd_epi32(dot, low, _mm512_load_si512(qb));
                if (bits == 4) dot = _mm512_dpbusd_epi32(dot, high, _mm512_load_si512(qb + 64));
                /* two sums a row, taking turns, so no FMA waits on the last */
                const __m512 weight = _mm512_permutexvar_ps(lane_block, ds[m]);
                const __m512 sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), weight, acc[0][m]);
                acc[0][m] = acc[1][m];
                acc[1][m] = sum;
            }
        }
    }
    for (int g = 0; g < groups; g += WINDOW) {
        const int left = groups - g < WINDOW ? groups - g : WINDOW;
        const __mmask16 live = (__mmask16)((1u << left) - 1);
        const __m512 sg = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, scale + g));
        const __m512 og = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, offset + g));
        const __m512 o = _mm512_fmadd_ps(sg, _mm512_set1_ps(z), og);
        for (int m = 0; m < MT; m++) {
            const __m512 sums_x = _mm512_loadu_ps(xsum + m * a->sum_stride + g);
            acc[0][m] = _mm512_fmadd_ps(o, sums_x, acc[0][m]);
        }
    }
    for (int m = 0; m < MT; m++)
        sums[m] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][m], acc[1][m]));
    (void)window_group;
#elif Q8_PATH == 1
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[M_TILE];
    for (int m = 0; m < MT; m++) acc[m] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const float s = _cvtsh_ss(scale[b / group_blocks]);
        const uint8_t *at = row + (int64_t)b * block_bytes;
        __m256i codes, low16 = _mm256_setzero_si256(), high16 = low16;
        if (bits == 4) {
            const __m128i v = _mm_loadu_si128((const __m128i *)at);
            codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), nibble),
                                     _mm_and_si128(v, nibble));
        } else {
            codes = _mm256_setzero_si256();
            low16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)at));
            high16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(at + 16)));
        }
        for (int m = 0; m < MT; m++) {
            const int8_t *qb = q + m * a->q_stride + (int64_t)b * BLOCK;
            __m256i dot;
            const int32_t *lanes = centre + m * (a->q_stride / 4) + b * 8;
            const __m256i start = _mm256_loadu_si256((const __m256i *)lanes);
            if (bits == 4) {
                const __m256i qv = _mm256_loadu_si256((const __m256i *)qb);
                const __m256i pairs = _mm256_maddubs_epi16(codes, qv);
                dot = _mm256_madd_epi16(pairs, ones);
            } else {
                const __m256i q0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qb));
                const __m256i q1 =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qb + 16)));
                dot = _mm256_add_epi32(_mm256_madd_epi16(low16, q0), _mm256_madd_epi16(high16, q1));
            }
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(start, dot)),
                                     _mm256_set1_ps(s * d[m * a->d_stride + b]), acc[m]);
        }
    }
    for (int m = 0; m < MT; m++) {
        float part[8], total = 0.0f;
        _mm256_storeu_ps(part, acc[m]);
        for (int i = 0; i < 8; i++) total += part[i];
        for (int g = 0; g < groups; g++)
            total += (half_to_float(offset[g]) + z * half_to_float(scale[g])) *
                     xsum[m * a->sum_stride + g];
        sums[m] = total;
    }
    (void)window_group;
#else
    for (int m = 0; m < MT; m++) {
        float total = 0.0f;
        for (int b = 0; b < blocks; b++) {
            const uint8_t *at = row + (int64_t)b * block_bytes;
            const int8_t *qb = q + m * a->q_stride + (int64_t)b * BLOCK;
            int32_t dot = 0;
            for (int j = 0; j < BLOCK / 4; j++) dot += centre[m * (a->q_stride / 4) + b * 8 + j];
            for (int i = 0; i < BLOCK / 2 && bits == 4; i++)
                dot += (at[i] & 0x0f) * qb[i] + (at[i] >> 4) * qb[i + BLOCK / 2];
            for (int i = 0; i < BLOCK && bits == 8; i++) dot += at[i] * qb[i];
            total += half_to_float(scale[b / group_blocks]) * d[m * a->d_stride + b] * (float)dot;
        }
        for (int g = 0; g < groups; g++)
            total += (half_to_float(offset[g]) + z * half_to_float(scale[g])) *
                     xsum[m * a->sum_stride + g];
        sums[m] = total;
    }
    (void)window_group;
#endif
}

static void row_dot(const activations *a, int64_t m0, int mt, const uint8_t *row,
                    const uint16_t *scale, const uint16_t *offset, int blocks, int groups,
                    int group_blocks, const int32_t *window_group, int bits, float *sums) {
    switch (mt) { /* each a copy with its own number of accumulators in registers */
#define TILE(MT)                                                                                \
    row_dot_tile(a, m0, MT, row, scale, offset, blocks, groups, group_blocks, window_group, bits, \
                 sums)
    case 1: TILE(1); break;
    case 2: TILE(2); break;
    case 3: TILE(3); break;
    default: TILE(4);
#undef TILE
    }
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
    activations a = {0};
    /* For each block, its group's place within the block's window of 16 (whose first
     * group is the window's first block's): the permute that spreads groups to blocks. */
    const int windows = (blocks + WINDOW - 1) / WINDOW;
    int32_t *window_group = malloc((size_t)windows * WINDOW * sizeof(int32_t));
    int failed = window_group == NULL ? 2 : 0;
    if (!failed) {
        for (int b = 0; b < windows * WINDOW; b++) {
            const int g0 = (b / WINDOW * WINDOW) / group_blocks;
            window_group[b] = b < blocks ? b / group_blocks - g0 : 0;
        }
        failed = quantize_rows(x, x_stride, x_bf16, M, K, bits, group_size, blocks, groups, &a);
    }
    if (!failed) {
        const int64_t chunks = (N + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t chunk = 0; chunk < chunks; chunk++) {
            const int64_t n_end = (chunk + 1) * ROW_CHUNK < N ? (chunk + 1) * ROW_CHUNK : N;
            for (int64_t m0 = 0; m0 < M; m0 += M_TILE) {
                const int mt = M - m0 < M_TILE ? (int)(M - m0) : M_TILE;
                for (int64_t n = chunk * ROW_CHUNK; n < n_end; n++) {
                    float sums[M_TILE];
                    row_dot(&a, m0, mt, codes + n * row_bytes, scale + n * groups,
                            offset + n * groups, blocks, groups, group_blocks, window_group,
                            bits, sums);
                    for (int m = 0; m < mt; m++) store(out, x_bf16, (m0 + m) * N + n, sums[m]);
                }
            }
        }
    }
    free(window_group);
    free(a.q);
    free(a.centre);
    free(a.d);
    free(a.sum);
    return failed;
}
