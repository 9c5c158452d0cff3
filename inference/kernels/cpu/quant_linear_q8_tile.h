/* The register tiles of quant_linear_q8.c: one rows-of-x by weight-rows tile for each
 * path (VNNI, AVX2, plain C), and the VNNI path's 8-way reduction. Not a header of its own:
 * quant_linear_q8.c includes it after the types and helpers it uses (`activations`,
 * `Q8_PATH`, `step_blocks`, `window_scales`, ...), and build.py's cache key hashes it with
 * the source that includes it. */

#if Q8_PATH == 2
/* out[i] = the sum of v[i]'s lanes for 8 vectors at once: halves, then quarters, ... of
 * pairs added side by side (23 operations, where one vector at a time takes 64). */
static inline __attribute__((always_inline)) void reduce8(const __m512 *v, float *out) {
    __m512 s[4], t[2];
    for (int p = 0; p < 4; p++) /* lanes 0-7 v[2p]'s halves added, 8-15 v[2p + 1]'s */
        s[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xee));
    for (int p = 0; p < 2; p++) /* four lanes each of v[4p] .. v[4p + 3] */
        t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* 128-bit lane k: two lanes of v[k], two of v[4 + k]; then neighbours added */
    __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
    u = _mm512_add_ps(u, _mm512_shuffle_ps(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
    float lanes[16];
    _mm512_storeu_ps(lanes, u);
    for (int k = 0; k < 4; k++) {
        out[k] = lanes[4 * k];
        out[4 + k] = lanes[4 * k + 2];
    }
}
#endif

#if Q8_PATH == 1
/* Up to 8 float16 values as floats, the lanes past `count` zero; read in place unless that
 * would pass `limit` (the end of the array: the last row of the weight). */
static inline __m256 halves8(const uint16_t *at, int count, const uint16_t *limit) {
    if (count >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)at));
    const int n = count > 0 ? count : 0;
    uint16_t part[8] = {0};
    if (at + 8 > limit) memcpy(part, at, (size_t)n * sizeof *at);
    const __m128i h = _mm_loadu_si128((const __m128i *)(at + 8 > limit ? part : at));
    const __m128i live = _mm_cmpgt_epi16(_mm_set1_epi16((short)n),
                                         _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_cvtph_ps(_mm_and_si128(h, live));
}

/* Up to 16 float16 values as two vectors of 8, as halves8. */
static inline void scales16(const uint16_t *at, int count, const uint16_t *limit, __m256 out[2]) {
    out[0] = halves8(at, count, limit);
    out[1] = count > 8 ? halves8(at + 8, count - 8, limit) : _mm256_setzero_ps();
}
#endif

/* The tile's weight rows' own float16 scales and offsets, for calls with too few rows of x
 * to pay for the float tables (VNNI: 16 floats a step a row), and for every AVX2 call. */
typedef struct {
    const uint16_t *scale[4], *offset[4];
    const int32_t *window_group;
    const int32_t *pair_index; /* AVX2: each pair step's lanes' groups within the window */
    const uint16_t *scale_end, *offset_end; /* AVX2: the arrays' ends, for reads past a row */
    int group_blocks;
} raw_scales;

/* sums[m * NT + n] = x[m0 + m] . w[row n] for an MT x NT tile: each step's codes are read
 * and widened once for MT rows of x, each step's q once for NT weight rows. */
static inline __attribute__((always_inline)) void tile(
    const activations *a, int64_t m0, const int MT, const uint8_t *const *rows, const int NT,
    const float *const *wscale, const float *const *woffset, const raw_scales *raw, int blocks,
    int groups, const int bits, float *sums) {
    const int block_bytes = BLOCK * bits / 8;
    const int8_t *q = a->q + m0 * a->q_stride;
    const int32_t *centre = a->centre + m0 * (a->q_stride / 4);
    const float *d = a->d + m0 * a->d_stride, *xsum = a->sum + m0 * a->sum_stride;
    const int64_t c_stride = a->q_stride / 4;
#if Q8_PATH == 2
    /* a step: 64 bytes of each weight row, 64 (4-bit: 128) of q and 16 lanes of the
     * centring, d and the scales */
    const int step = step_blocks(bits), full_steps = blocks / step;
    const int64_t q_step = (int64_t)step * BLOCK;
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const int8_t *qm[4];
    const int32_t *cm[4];
    const float *dm[4];
    for (int m = 0; m < MT; m++) {
        qm[m] = q + m * a->q_stride;
        cm[m] = centre + m * c_stride;
        dm[m] = d + m * a->d_stride;
    }
    __m512 acc[4][4];
    for (int m = 0; m < MT; m++)
        for (int n = 0; n < NT; n++) acc[m][n] = _mm512_setzero_ps();
    const int steps = (blocks + step - 1) / step;
    const __m512i pattern = lane_blocks(bits);
    __m512 window[4]; /* raw: a window of 16 blocks' scales, as fill_tables */
    for (int n = 0; n < NT; n++) window[n] = _mm512_setzero_ps();
    for (int i = 0; i < steps; i++) {
        const int b = i * step;
        if (raw != NULL && b % WINDOW == 0)
            for (int n = 0; n < NT; n++)
                window[n] = window_scales(raw->scale[n], b, groups, raw->group_blocks,
                                          raw->window_group);
        const __m512i spread_at = _mm512_add_epi32(pattern, _mm512_set1_epi32(b % WINDOW));
        const int left = blocks - i * step; /* past the last block, load nothing */
        const __mmask64 live = i < full_steps ? ~0ull : (1ull << (left * block_bytes)) - 1;
        __m512i low[4], high[4];
        for (int n = 0; n < NT; n++) {
            const __m512i v = _mm512_maskz_loadu_epi8(live, rows[n] + (int64_t)i * 64);
            low[n] = bits == 4 ? _mm512_and_si512(v, nibble) : v;
            high[n] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        }
        for (int m = 0; m < MT; m++) {
            const int8_t *qb = qm[m] + i * q_step;
            const __m512 dv = _mm512_loadu_ps(dm[m] + i * 16);
            const __m512i start = _mm512_load_si512(cm[m] + i * (q_step / 4));
            const __m512i q0 = _mm512_load_si512(qb);
            const __m512i q1 = bits == 4 ? _mm512_load_si512(qb + 64) : q0;
            for (int n = 0; n < NT; n++) {
                __m512i dot = _mm512_dpbusd_epi32(start, low[n], q0);
                if (bits == 4) dot = _mm512_dpbusd_epi32(dot, high[n], q1);
                const __m512 w = _mm512_mul_ps(
                    dv, raw != NULL ? _mm512_permutexvar_ps(spread_at, window[n])
                                    : _mm512_loadu_ps(wscale[n] + i * 16));
                acc[m][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), w, acc[m][n]);
            }
        }
    }
    const __m512 z = _mm512_set1_ps((float)(1 << (bits - 1)));
    for (int g = 0; g < groups; g += 16)
        for (int n = 0; n < NT; n++) {
            const int count = groups - g;
            const __m512 o = raw != NULL ? _mm512_fmadd_ps(load_halves(raw->scale[n] + g, count), z,
                                                           load_halves(raw->offset[n] + g, count))
                                         : _mm512_loadu_ps(woffset[n] + g);
            for (int m = 0; m < MT; m++)
                acc[m][n] = _mm512_fmadd_ps(o, _mm512_loadu_ps(xsum + m * a->sum_stride + g),
                                            acc[m][n]);
        }
    __m512 v[8];
    for (int i = 0; i < 8; i++) v[i] = i < MT * NT ? acc[i / NT][i % NT] : _mm512_setzero_ps();
    reduce8(v, sums);
#elif Q8_PATH == 1
    /* a step: a pair of blocks, 32 bytes of each 4-bit weight row (64 of an 8-bit one), 64
     * of q and 8 lanes of d, the scales and (4-bit) the centring: see lanes_a_row. 4-bit
     * codes multiply q's low and high halves (`pair4`) and their 16-bit sums add (each at
     * most 2 * 15 * 127, two of them 7,620); 8-bit codes less 128 are signed and multiply
     * as |w| times q with w's sign (pair sums at most 2 * 128 * 127 = 32,512, no
     * saturation and no centring), two blocks' dots paired by a horizontal add. */
    (void)wscale; /* no float tables on AVX2: `raw` at any number of rows */
    (void)woffset;
    const __m256i nibble = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8((char)0x80);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4], window[4][2];
    for (int m = 0; m < MT; m++)
        for (int n = 0; n < NT; n++) acc[m][n] = _mm256_setzero_ps();
    const int pairs = (blocks + 1) / 2;
    for (int p = 0; p < pairs; p++) {
        const int b = 2 * p, single = b + 1 == blocks;
        if (b % WINDOW == 0)
            for (int n = 0; n < NT; n++)
                scales16(raw->scale[n] + b / raw->group_blocks, groups - b / raw->group_blocks,
                         raw->scale_end, window[n]);
        const __m256i at_lanes = _mm256_loadu_si256((const __m256i *)(raw->pair_index + p * 8));
        const int upper = raw->window_group[b] >= 8;
        for (int n = 0; n < NT; n++) {
            const uint8_t *at = rows[n] + (int64_t)b * block_bytes;
            __m256i w0, w1; /* 4-bit: low and high nibbles; 8-bit: each block's code - 128 */
            if (bits == 4) {
                const __m256i v =
                    single ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)at))
                           : _mm256_loadu_si256((const __m256i *)at);
                w0 = _mm256_and_si256(v, nibble);
                w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
            } else {
                w0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)at), flip);
                w1 = single ? _mm256_setzero_si256()
                            : _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(at + 32)), flip);
            }
            const __m256i a0 = bits == 4 ? w0 : _mm256_abs_epi8(w0);
            const __m256i a1 = bits == 4 ? w1 : _mm256_abs_epi8(w1);
            const __m256 s = _mm256_permutevar8x32_ps(window[n][upper], at_lanes);
            for (int m = 0; m < MT; m++) {
                const int8_t *qb = q + m * a->q_stride + (int64_t)b * BLOCK;
                const __m256i q0 = _mm256_loadu_si256((const __m256i *)qb);
                const __m256i q1 = _mm256_loadu_si256((const __m256i *)(qb + 32));
                __m256i dot;
                if (bits == 4) {
                    const __m256i start =
                        _mm256_loadu_si256((const __m256i *)(centre + m * c_stride + p * 16));
                    const __m256i pairs16 = _mm256_add_epi16(_mm256_maddubs_epi16(a0, q0),
                                                             _mm256_maddubs_epi16(a1, q1));
                    dot = _mm256_add_epi32(start, _mm256_madd_epi16(pairs16, ones));
                } else {
                    const __m256i d0 = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(a0, _mm256_sign_epi8(q0, w0)), ones);
                    const __m256i d1 = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(a1, _mm256_sign_epi8(q1, w1)), ones);
                    dot = _mm256_hadd_epi32(d0, d1);
                }
                const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(d + m * a->d_stride + p * 8), s);
                acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), w, acc[m][n]);
            }
        }
    }
    const __m256 z = _mm256_set1_ps((float)(1 << (bits - 1)));
    for (int g = 0; g < groups; g += 8)
        for (int n = 0; n < NT; n++) {
            const __m256 o =
                _mm256_fmadd_ps(halves8(raw->scale[n] + g, groups - g, raw->scale_end), z,
                                halves8(raw->offset[n] + g, groups - g, raw->offset_end));
            for (int m = 0; m < MT; m++)
                acc[m][n] = _mm256_fmadd_ps(o, _mm256_loadu_ps(xsum + m * a->sum_stride + g),
                                            acc[m][n]);
        }
    for (int m = 0; m < MT; m++)
        for (int n = 0; n < NT; n++) {
            const __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[m][n]),
                                        _mm256_extractf128_ps(acc[m][n], 1));
            const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
            sums[m * NT + n] = _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
        }
#else
    (void)raw;
    float total[4][4] = {{0.0f}};
    for (int n = 0; n < NT && MT == 1; n++) /* one row of x: each weight row in turn */
        for (int b = 0; b < blocks; b++) {
            const uint8_t *at = rows[n] + (int64_t)b * block_bytes;
            int32_t dot = 0;
            for (int j = 0; j < BLOCK / 4; j++) dot += centre[b * 8 + j];
            for (int i = 0; i < BLOCK / 2 && bits == 4; i++)
                dot += (at[i] & 0x0f) * q[b * BLOCK + i] + (at[i] >> 4) * q[b * BLOCK + i + 16];
            for (int i = 0; i < BLOCK && bits == 8; i++) dot += at[i] * q[b * BLOCK + i];
            total[0][n] += wscale[n][b] * d[b] * (float)dot;
        }
    for (int b = 0; b < blocks && MT > 1; b++) {
        int16_t w[4][BLOCK]; /* each weight row's codes of the block, widened once */
        for (int n = 0; n < NT; n++) {
            const uint8_t *at = rows[n] + (int64_t)b * block_bytes;
            for (int i = 0; i < BLOCK / 2 && bits == 4; i++) w[n][i] = at[i] & 0x0f;
            for (int i = 0; i < BLOCK / 2 && bits == 4; i++) w[n][i + BLOCK / 2] = at[i] >> 4;
            for (int i = 0; i < BLOCK && bits == 8; i++) w[n][i] = at[i];
        }
        for (int m = 0; m < MT; m++) {
            const int8_t *qb = q + m * a->q_stride + (int64_t)b * BLOCK;
            int32_t start = 0;
            for (int j = 0; j < BLOCK / 4; j++) start += centre[m * c_stride + b * 8 + j];
            for (int n = 0; n < NT; n++) {
                int32_t dot = start;
                for (int i = 0; i < BLOCK; i++) dot += w[n][i] * qb[i];
                total[m][n] += wscale[n][b] * d[m * a->d_stride + b] * (float)dot;
            }
        }
    }
    for (int m = 0; m < MT; m++)
        for (int n = 0; n < NT; n++) {
            for (int g = 0; g < groups; g++)
                total[m][n] += woffset[n][g] * xsum[m * a->sum_stride + g];
            sums[m * NT + n] = total[m][n];
        }
#endif
}
