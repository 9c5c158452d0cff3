/* fp8_linear.c's AVX2 path (FP8_PATH 3: AVX2 with FMA and F16C, every x86-64 server since
 * Haswell, such as AMD's EPYC before Zen 4): the same product in 8-lane float32 vectors.
 * Every build takes float32 x (and writes float32 out) here too.
 *
 * An e4m3 byte becomes a float16 by moving its bits: sign-extended to 16 bits and shifted
 * left by 7, its exponent and mantissa land in float16's places and its sign in bits 14
 * and 15, of which 14 is cleared. That float16 is the e4m3 value times 2^-8 exactly,
 * subnormals included (each format's subnormals are the mantissa in units of its smallest
 * normal's: 2^-9 and 2^-17, the same ratio), and F16C's vcvtph2ps widens it to float32. The
 * 2^8 goes into the scales, exactly: per-row sums are multiplied by 256 before the row's
 * scale; a group's scale times 256 multiplies the value (rounded once to bfloat16 for
 * bfloat16 x), the reference's product. The sums are float32 throughout (bfloat16 x widened
 * exactly), in another order than the AVX-512 paths'.
 *
 * - Up to AVX2_ROWS_MAX rows of x ("rows"): x widened into float32 rows once; two weight
 *   rows at a time are widened 16 columns at a time in registers, each serving every row.
 * - More ("panels"): x packed as float32 in blocks of 8 rows, one vector a column; a tile
 *   of AVX2_PANEL_NT weight rows widened into a float32 buffer, and each weight broadcast
 *   against two blocks (16 rows) at a time, 6 weight rows at a time: 12 accumulators.
 */
enum { AVX2_ROWS_MAX = 4, AVX2_PREFETCH_ROWS = 8 };
enum { AVX2_PANEL_NT = 24, AVX2_PANEL_ROWS = 16, AVX2_PANEL_J = 6 };

/* x (bfloat16, or float32 with f32) and out (the same dtype). */
struct avx2_io {
    const void *x;
    int64_t x_stride;
    int f32;
    void *out;
};

/* x[m][c] as float32 (bfloat16 exactly: the top half). */
static inline float x_value(struct avx2_io io, int64_t m, int c) {
    if (io.f32) return ((const float *)io.x)[m * io.x_stride + c];
    const uint32_t bits = (uint32_t)((const uint16_t *)io.x)[m * io.x_stride + c] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline void store_out(struct avx2_io io, int64_t index, float value) {
    if (io.f32)
        ((float *)io.out)[index] = value;
    else
        ((uint16_t *)io.out)[index] = to_bf16(value);
}

static inline float sum8(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* float32 rounded to a bfloat16 value (to nearest even; finite values), kept as float32. */
static inline __m256 round_bf16x8(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i up = _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(up, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Columns c .. c + 16 of a weight row of K bytes (zeros past K) as float32, times 2^-8;
 * `grouped`, times `scale` (the group's, times 256), and with `round` rounded to bfloat16. */
static inline __attribute__((always_inline)) void widen16_avx2(
        const uint8_t *row, int c, int K, int grouped, float scale, int round, __m256 *lo,
        __m256 *hi) {
    __m128i bytes;
    if (c + 16 <= K) {
        bytes = _mm_loadu_si128((const __m128i *)(row + c));
    } else {
        uint8_t tail[16] = {0};
        memcpy(tail, row + c, (size_t)(K - c));
        bytes = _mm_loadu_si128((const __m128i *)tail);
    }
    const __m256i half = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7),
                                          _mm256_set1_epi16((short)0xbfff));
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(half));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(half, 1));
    if (grouped) {
        *lo = _mm256_mul_ps(*lo, _mm256_set1_ps(scale));
        *hi = _mm256_mul_ps(*hi, _mm256_set1_ps(scale));
        if (round) *lo = round_bf16x8(*lo), *hi = round_bf16x8(*hi);
    }
}

/* The float32 sum of out[m][n], scaled, into out. */
static inline void store_sum(struct avx2_io io, float sum, const float *scale, int groups,
                             int64_t m, int64_t n, int64_t N) {
    store_out(io, m * N + n, groups ? sum : sum * 256.0f * scale[n]);
}

/* mt (<= AVX2_ROWS_MAX, a constant once inlined) rows of float32 x against weight rows n0
 * and n0 + 1 (only n0 where nt is 1). */
static inline __attribute__((always_inline)) void rows_pair(
        struct avx2_io io, const float *xf, int k16, const int mt, const int grouped,
        const int round, const uint8_t *q, const float *scale, int K, int groups,
        int group_size, int64_t n0, int nt, int64_t N) {
    const int64_t r1 = n0 + nt - 1;
    const uint8_t *row0 = q + n0 * (int64_t)K, *row1 = q + r1 * (int64_t)K;
    __m256 acc[AVX2_ROWS_MAX][2];
    for (int i = 0; i < mt; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    /* The weight rows (and scales) a few pairs on are prefetched: a single stream from
     * memory otherwise waits for its bytes. Prefetches past the tensors do not fault. */
    if (grouped) /* 16 scales a cache line */
        for (int g = 0; g < 2 * groups; g += 16)
            _mm_prefetch((const char *)(scale + (n0 + AVX2_PREFETCH_ROWS) * groups + g),
                         _MM_HINT_T0);
    for (int c = 0, g = 0, g_end = group_size; c < k16; c += 16) {
        if (c == g_end) ++g, g_end += group_size; /* no division in the loop */
        _mm_prefetch((const char *)(row0 + AVX2_PREFETCH_ROWS * K + c), _MM_HINT_T0);
        _mm_prefetch((const char *)(row1 + AVX2_PREFETCH_ROWS * K + c), _MM_HINT_T0);
        __m256 w0[2], w1[2];
        const float s0 = grouped ? scale[n0 * groups + g] * 256.0f : 0.0f;
        const float s1 = grouped ? scale[r1 * groups + g] * 256.0f : 0.0f;
        widen16_avx2(row0, c, K, grouped, s0, round, &w0[0], &w0[1]);
        widen16_avx2(row1, c, K, grouped, s1, round, &w1[0], &w1[1]);
        for (int i = 0; i < mt; ++i) {
            const __m256 x0 = _mm256_load_ps(xf + i * k16 + c);
            const __m256 x1 = _mm256_load_ps(xf + i * k16 + c + 8);
            acc[i][0] = _mm256_fmadd_ps(x1, w0[1], _mm256_fmadd_ps(x0, w0[0], acc[i][0]));
            acc[i][1] = _mm256_fmadd_ps(x1, w1[1], _mm256_fmadd_ps(x0, w1[0], acc[i][1]));
        }
    }
    for (int i = 0; i < mt; ++i) {
        store_sum(io, sum8(acc[i][0]), scale, groups, i, n0, N);
        if (nt > 1) store_sum(io, sum8(acc[i][1]), scale, groups, i, r1, N);
    }
}

static int rows_avx2(struct avx2_io io, int M, const uint8_t *q, const float *scale,
                     int64_t N, int K, int groups, int group_size, int num_threads) {
    const int k16 = (K + 15) / 16 * 16; /* each chunk of 16 holds a column: its group exists */
    float *xf = aligned_alloc(32, sizeof(float) * (size_t)M * (size_t)k16);
    if (!xf) return -1;
    for (int i = 0; i < M; ++i)
        for (int c = 0; c < k16; ++c) xf[i * k16 + c] = c < K ? x_value(io, i, c) : 0;
    const int64_t pairs = (N + 1) / 2;
#pragma omp parallel for schedule(static) num_threads(num_threads)
    for (int64_t p = 0; p < pairs; ++p) {
        const int64_t n0 = 2 * p;
        const int nt = N - n0 < 2 ? 1 : 2;
        /* Each row count and kind of scale its own specialised loop. */
#define ROWS_PAIR(mt, grouped, round) \
    rows_pair(io, xf, k16, mt, grouped, round, q, scale, K, groups, group_size, n0, nt, N)
#define ROWS_PAIRS(grouped, round)                                     \
    switch (M) {                                                       \
    case 4: ROWS_PAIR(4, grouped, round); break;                       \
    case 3: ROWS_PAIR(3, grouped, round); break;                       \
    case 2: ROWS_PAIR(2, grouped, round); break;                       \
    default: ROWS_PAIR(1, grouped, round); break;                      \
    }
        if (!groups) {
            ROWS_PAIRS(0, 0)
        } else if (io.f32) {
            ROWS_PAIRS(1, 0)
        } else {
            ROWS_PAIRS(1, 1)
        }
#undef ROWS_PAIRS
#undef ROWS_PAIR
    }
    free(xf);
    return 0;
}

/* x (M rows) as float32 per block of 8 rows, one vector a column (zeros past M and K). */
static void pack_x_avx2(struct avx2_io io, int64_t M, int K, int k16, float *packed,
                        int num_threads) {
    const int64_t blocks = (M + 7) / 8;
#pragma omp parallel for schedule(static) num_threads(num_threads)
    for (int64_t b = 0; b < blocks; ++b)
        for (int c = 0; c < k16; ++c)
            for (int i = 0; i < 8; ++i) {
                const int64_t m = b * 8 + i;
                packed[(b * k16 + c) * 8 + i] = m < M && c < K ? x_value(io, m, c) : 0;
            }
}

/* Rows m0 .. m0 + 8 * mb (fewer past M) against nj (<= AVX2_PANEL_J) widened weight rows w
 * (rows n0 ..), each weight broadcast against the mb blocks. */
static inline __attribute__((always_inline)) void panel_avx2(
        struct avx2_io io, const float *xp, int k16, int64_t m0, int64_t M, const int mb,
        const float *w, int64_t n0, int nj, const float *scale, int groups, int64_t N) {
    __m256 acc[AVX2_PANEL_J][2];
#pragma GCC unroll 6 /* unrolled before scalar replacement: the sums stay in registers */
    for (int j = 0; j < AVX2_PANEL_J; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    const float *x0 = xp + (m0 / 8) * (int64_t)k16 * 8;
    for (int c = 0; c < k16; ++c) {
        __m256 xv[2];
#pragma GCC unroll 2
        for (int b = 0; b < mb; ++b) xv[b] = _mm256_load_ps(x0 + ((int64_t)b * k16 + c) * 8);
#pragma GCC unroll 6
        for (int j = 0; j < AVX2_PANEL_J; ++j) {
            const __m256 wv = _mm256_broadcast_ss(w + (int64_t)j * k16 + c);
#pragma GCC unroll 2
            for (int b = 0; b < mb; ++b) acc[j][b] = _mm256_fmadd_ps(xv[b], wv, acc[j][b]);
        }
    }
    float lanes[8];
#pragma GCC unroll 6
    for (int j = 0; j < AVX2_PANEL_J; ++j)
#pragma GCC unroll 2
        for (int b = 0; b < mb; ++b) {
            if (j >= nj) continue;
            __m256 sums = acc[j][b];
            if (!groups) sums = _mm256_mul_ps(sums, _mm256_set1_ps(256.0f * scale[n0 + j]));
            _mm256_storeu_ps(lanes, sums);
            for (int i = 0; i < 8 && m0 + 8 * b + i < M; ++i)
                store_out(io, (m0 + 8 * b + i) * N + n0 + j, lanes[i]);
        }
}

static int panels_avx2(struct avx2_io io, int64_t M, const uint8_t *q, const float *scale,
                       int64_t N, int K, int groups, int group_size, int num_threads) {
    const int k16 = (K + 15) / 16 * 16;
    const int64_t tiles = (N + AVX2_PANEL_NT - 1) / AVX2_PANEL_NT;
    float *xp = aligned_alloc(32, sizeof(float) * 8 * (size_t)k16 * (size_t)((M + 7) / 8));
    if (!xp) return -1;
    pack_x_avx2(io, M, K, k16, xp, num_threads);
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        float *w = aligned_alloc(32, sizeof(float) * AVX2_PANEL_NT * (size_t)k16);
        if (!w) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; ++t) {
            if (!w) continue;
            const int64_t n0 = t * AVX2_PANEL_NT;
            const int nt = N - n0 < AVX2_PANEL_NT ? (int)(N - n0) : AVX2_PANEL_NT;
            for (int j = 0; j < AVX2_PANEL_NT; ++j) {
                float *dst = w + (int64_t)j * k16;
                if (j >= nt) {
                    memset(dst, 0, sizeof(float) * (size_t)k16);
                    continue;
                }
                const uint8_t *row = q + (n0 + j) * (int64_t)K;
                for (int c = 0, g = 0, g_end = group_size; c < k16; c += 16) {
                    if (c == g_end) ++g, g_end += group_size;
                    const float s = groups ? scale[(n0 + j) * groups + g] * 256.0f : 0.0f;
                    __m256 lo, hi;
                    widen16_avx2(row, c, K, groups != 0, s, !io.f32, &lo, &hi);
                    _mm256_store_ps(dst + c, lo);
                    _mm256_store_ps(dst + c + 8, hi);
                }
            }
            for (int64_t m0 = 0; m0 < M; m0 += AVX2_PANEL_ROWS)
                for (int j0 = 0; j0 < nt; j0 += AVX2_PANEL_J) {
                    const float *wj = w + (int64_t)j0 * k16;
                    const int nj = nt - j0 < AVX2_PANEL_J ? nt - j0 : AVX2_PANEL_J;
                    if (M - m0 > 8)
                        panel_avx2(io, xp, k16, m0, M, 2, wj, n0 + j0, nj, scale, groups, N);
                    else
                        panel_avx2(io, xp, k16, m0, M, 1, wj, n0 + j0, nj, scale, groups, N);
                }
        }
        free(w);
    }
    free(xp);
    return failed ? -1 : 0;
}
