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

/* The tile's weight rows' own float16 scales and offsets, for calls with too few rows of x
 * to pay for the float tables (VNNI: 16 floats a step a row). */
typedef struct {
    const uint16_t *scale[4], *offset[4];
    const int32_t *window_group;
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
    /* the tables are one float a block; raw (one row of x) converts each group's scale as
     * the loop reaches it instead, and adds the offsets' term once at the end */
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4];
    for (int m = 0; m < MT; m++)
        for (int n = 0; n < NT; n++) acc[m][n] = _mm256_setzero_ps();
    float group_scale[4] = {0.0f};
    for (int b = 0, g = 0, left = 0; b < blocks; b++) {
        if (raw != NULL && left-- == 0) { /* the first block of group g */
            for (int n = 0; n < NT; n++) group_scale[n] = _cvtsh_ss(raw->scale[n][g]);
            g++;
            left = raw->group_blocks - 1;
        }
        __m256i codes[4], low16[4], high16[4];
        for (int n = 0; n < NT; n++) {
            const uint8_t *at = rows[n] + (int64_t)b * block_bytes;
            if (bits == 4) {
                const __m128i v = _mm_loadu_si128((const __m128i *)at);
                codes[n] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), nibble),
                                            _mm_and_si128(v, nibble));
            } else {
                low16[n] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)at));
                high16[n] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(at + 16)));
            }
        }
        for (int m = 0; m < MT; m++) {
            const int8_t *qb = q + m * a->q_stride + (int64_t)b * BLOCK;
            const __m256i start =
                _mm256_loadu_si256((const __m256i *)(centre + m * c_stride + b * 8));
            const __m256 dm = _mm256_broadcast_ss(d + m * a->d_stride + b);
            __m256i qv = _mm256_loadu_si256((const __m256i *)qb), q0 = qv, q1 = qv;
            if (bits == 8) {
                q0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qb));
                q1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qb + 16)));
            }
            for (int n = 0; n < NT; n++) {
                const __m256i dot =
                    bits == 4 ? _mm256_madd_epi16(_mm256_maddubs_epi16(codes[n], qv), ones)
                              : _mm256_add_epi32(_mm256_madd_epi16(low16[n], q0),
                                                 _mm256_madd_epi16(high16[n], q1));
                const __m256 w = _mm256_mul_ps(
                    dm, _mm256_set1_ps(raw != NULL ? group_scale[n] : wscale[n][b]));
                acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(start, dot)), w,
                                            acc[m][n]);
            }
        }
    }
    for (int g = 0; g < groups && raw == NULL; g += 8)
        for (int n = 0; n < NT; n++) {
            const __m256 o = _mm256_loadu_ps(woffset[n] + g);
            for (int m = 0; m < MT; m++)
                acc[m][n] = _mm256_fmadd_ps(
                    o, _mm256_loadu_ps(xsum + m * a->sum_stride + g), acc[m][n]);
        }
    const float z = (float)(1 << (bits - 1));
    for (int m = 0; m < MT; m++)
        for (int n = 0; n < NT; n++) {
            float part[8], total = 0.0f;
            _mm256_storeu_ps(part, acc[m][n]);
            for (int i = 0; i < 8; i++) total += part[i];
            for (int g = 0; g < groups && raw != NULL; g++) /* offset + z * scale, as fill_tables */
                total += (_cvtsh_ss(raw->offset[n][g]) + z * _cvtsh_ss(raw->scale[n][g])) *
                         xsum[m * a->sum_stride + g];
            sums[m * NT + n] = total;
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
