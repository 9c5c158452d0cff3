/* How quant_linear_q8.c quantizes a row of x to int8: a block of 32 columns at a time (AVX2
 * or AVX-512 where built, plain C for a last partial block and on other builds), then the
 * centring sums. Not a header of its own: quant_linear_q8.c includes it after the types and
 * helpers it uses (`activations`, `put`, `q_at`, `load_x`, ...), and build.py's cache key
 * hashes it with the source that includes it. */

#if Q8_PATH == 1
/* A whole block of x quantized with AVX2, as quantize_row's loop does it (the same d, id
 * and round-half-even products); returns the float sum of the block's values. */
static float quantize_block(const void *x, int bf16, int64_t at, int8_t codes[BLOCK], float *d) {
    __m256 v[4], amax = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int i = 0; i < 4; i++) {
        if (bf16) {
            const __m128i half = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + at) + i);
            v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
        } else {
            v[i] = _mm256_loadu_ps((const float *)x + at + 8 * i);
        }
        amax = _mm256_max_ps(_mm256_and_ps(v[i], magnitude), amax); /* NaN: amax kept */
        sum = _mm256_add_ps(sum, v[i]);
    }
    float lanes[8], total = 0.0f, top = 0.0f;
    _mm256_storeu_ps(lanes, amax);
    for (int i = 0; i < 8; i++) top = lanes[i] > top ? lanes[i] : top;
    _mm256_storeu_ps(lanes, sum);
    for (int i = 0; i < 8; i++) total += lanes[i];
    *d = top * (1.0f / 127.0f);
    const __m256 id = _mm256_set1_ps(*d > 0.0f ? 1.0f / *d : 0.0f);
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    __m256i r[4];
    for (int i = 0; i < 4; i++) {
        const __m256 p = _mm256_round_ps(_mm256_mul_ps(v[i], id),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r[i] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(p, hi), lo));
    }
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]),
                                              _mm256_packs_epi32(r[2], r[3]));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i *)codes, _mm256_permutevar8x32_epi32(packed, order));
    return total;
}
#elif Q8_PATH == 2
/* The same with AVX-512: two vectors a block. */
static float quantize_block(const void *x, int bf16, int64_t at, int8_t codes[BLOCK], float *d) {
    __m512 v[2], amax = _mm512_setzero_ps();
    for (int i = 0; i < 2; i++) {
        if (bf16) {
            const __m256i half =
                _mm256_loadu_si256((const __m256i *)((const uint16_t *)x + at + 16 * i));
            v[i] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
        } else {
            v[i] = _mm512_loadu_ps((const float *)x + at + 16 * i);
        }
        amax = _mm512_max_ps(_mm512_abs_ps(v[i]), amax); /* NaN: amax kept */
    }
    *d = _mm512_reduce_max_ps(amax) * (1.0f / 127.0f);
    const __m512 id = _mm512_set1_ps(*d > 0.0f ? 1.0f / *d : 0.0f);
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (int i = 0; i < 2; i++) {
        const __m512 p = _mm512_roundscale_ps(_mm512_mul_ps(v[i], id),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512i r = _mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(p, hi), lo));
        _mm_storeu_si128((__m128i *)(codes + 16 * i), _mm512_cvtepi32_epi8(r));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(v[0], v[1]));
}
#endif

/* A block of x's `width` values from x[at] (the last, partial, or every one in plain C) to
 * codes (zero past width) and its d, each value added to *sum in turn. */
static void quantize_values(const void *x, int bf16, int64_t at, int width, int8_t codes[BLOCK],
                            float *d_out, float *sum) {
    float v[BLOCK], amax = 0.0f;
    for (int c = 0; c < width; c++) {
        v[c] = load_x(x, bf16, at + c);
        amax = fabsf(v[c]) > amax ? fabsf(v[c]) : amax;
        *sum += v[c];
    }
    const float d = amax * (1.0f / 127.0f), id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int c = 0; c < width; c++) {
        const float r = nearbyintf(v[c] * id); /* half to even */
        codes[c] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
    }
    memset(codes + width, 0, (size_t)(BLOCK - width));
    *d_out = d;
}

/* Block b of a row of x (from x[at]) to int8 codes in column order: its d, its values'
 * sum added to *sum (whole blocks in SIMD where built). */
static void quantize_x_block(const void *x, int bf16, int64_t at, int width, int8_t codes[BLOCK],
                             float *d, float *sum) {
#if Q8_PATH
    if (width == BLOCK) {
        *sum += quantize_block(x, bf16, at, codes, d);
        return;
    }
#endif
    quantize_values(x, bf16, at, width, codes, d, sum);
}

static void quantize_row(const void *x, int64_t x_stride, int bf16, int64_t m, int K, int bits,
                         int group_size, int blocks, activations *a) {
    int8_t *q = a->q + m * a->q_stride;
    for (int b = 0; b < blocks; b++) {
        const int width = K - b * BLOCK < BLOCK ? K - b * BLOCK : BLOCK;
        int8_t codes[BLOCK];
        float d;
        quantize_x_block(x, bf16, m * x_stride + (int64_t)b * BLOCK, width, codes, &d,
                         &a->sum[m * a->sum_stride + b * BLOCK / group_size]);
        put(a->d + m * a->d_stride, b, bits, d);
        memcpy(q + q_at(bits, b, 0), codes, BLOCK / 2);
        memcpy(q + q_at(bits, b, BLOCK / 2), codes + BLOCK / 2, BLOCK / 2);
    }
    int32_t *centre = a->centre + m * (a->q_stride / 4);
#if Q8_PATH == 2 /* each lane: the sum of 4 bytes of q (ones times q), times -z; 64 at once */
    const __m512i ones = _mm512_set1_epi8(1), minus_z = _mm512_set1_epi32(-(1 << (bits - 1)));
    for (int64_t j = 0; j < a->q_stride / 4; j += 16) {
        const __m512i sums =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(q + 4 * j));
        _mm512_store_si512(centre + j, _mm512_mullo_epi32(sums, minus_z));
    }
    for (int64_t j = 0; vnni4(bits) && j < a->q_stride / 4; j += 32) /* both halves a lane */
        _mm512_store_si512(centre + j, _mm512_add_epi32(_mm512_load_si512(centre + j),
                                                        _mm512_load_si512(centre + j + 16)));
#else
    for (int64_t j = 0; j < a->q_stride / 4; j++)
        centre[j] = -(1 << (bits - 1)) * (q[4 * j] + q[4 * j + 1] + q[4 * j + 2] + q[4 * j + 3]);
    for (int64_t j = 0; pair4(bits) && j < a->q_stride / 4; j += 16) /* AVX2: both halves */
        for (int l = 0; l < 8; l++) centre[j + l] += centre[j + 8 + l];
#endif
}
