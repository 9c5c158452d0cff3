/* The prefill tile of paged_prefill.h for bf16 queries over a bf16 pool, with the
 * processor's bf16 dot products (AVX-512 BF16: two products per float lane per
 * instruction). Included by paged_prefill.h; the same item, tiles and online softmax as
 * pf_tile, with two differences of layout:
 *   scores  the key tile as 16 keys' (d, d + 1) pairs a vector, dotted with each query row's
 *           pair broadcast: exact products of the bf16 values, summed in float;
 *   values  the probabilities rounded to bf16 (as torch's flash attention does for bf16)
 *           and dotted with two keys' values at a time (the value tile laid out as pairs
 *           of keys per head_dim lane).
 * head_dim a multiple of 32. */

#if defined(__AVX512BW__) && defined(__AVX512BF16__)
#define PF_HAS_BF16 1

/* o = o * corr + the value tile weighed by `pairs` bf16 pairs of probabilities (C chunks
 * of 16 lanes; a constant once inlined), in two chains. */
static inline __attribute__((always_inline)) void pf_weigh_bf16(float *o, const uint32_t *pp,
                                                                const uint16_t *vp, int pairs,
                                                                float corr, const int C) {
    __m512 acc[PF_MAX_DIM / 16], odd[PF_MAX_DIM / 16];
    for (int c = 0; c < C; ++c) {
        acc[c] = _mm512_mul_ps(_mm512_load_ps(o + 16 * c), _mm512_set1_ps(corr));
        odd[c] = _mm512_setzero_ps();
    }
    int jp = 0;
    for (; jp + 1 < pairs; jp += 2) {
        const __m512bh p0 = (__m512bh)_mm512_set1_epi32((int)pp[jp]);
        const __m512bh p1 = (__m512bh)_mm512_set1_epi32((int)pp[jp + 1]);
        const uint16_t *v0 = vp + (int64_t)jp * C * 32, *v1 = v0 + C * 32;
        for (int c = 0; c < C; ++c) {
            acc[c] = _mm512_dpbf16_ps(acc[c], p0, (__m512bh)_mm512_load_si512(v0 + 32 * c));
            odd[c] = _mm512_dpbf16_ps(odd[c], p1, (__m512bh)_mm512_load_si512(v1 + 32 * c));
        }
    }
    if (jp < pairs) {
        const __m512bh p0 = (__m512bh)_mm512_set1_epi32((int)pp[jp]);
        const uint16_t *v0 = vp + (int64_t)jp * C * 32;
        for (int c = 0; c < C; ++c)
            acc[c] = _mm512_dpbf16_ps(acc[c], p0, (__m512bh)_mm512_load_si512(v0 + 32 * c));
    }
    for (int c = 0; c < C; ++c) _mm512_store_ps(o + 16 * c, _mm512_add_ps(acc[c], odd[c]));
}

static const uint16_t pf_zero_row[PF_MAX_DIM] __attribute__((aligned(64))) = {0};

/* Lays out a tile of n keys and values from t0 on (the rest zero): kp[d / 2][j] holds key
 * j's (d, d + 1) pair; vp, per pair of keys jp and lane chunk c, 16 lanes of (value 2jp,
 * value 2jp + 1) pairs. */
static void pf_layout_bf16(const Problem *p, const int64_t *table, int64_t t0, int n, int h,
                           uint32_t *kp, uint16_t *vp) {
    const int dim = p->head_dim, width = p->num_kv_heads * dim;
    const uint16_t *keys = p->key, *values = p->value;
    const uint16_t *krow[PF_KT], *vrow[PF_KT];
    for (int j = 0; j < PF_KT; ++j) {
        const int64_t at = j < n ? slot_of(table, t0 + j, p->block_size) * width + h * dim : 0;
        krow[j] = j < n ? keys + at : pf_zero_row;
        vrow[j] = j < n ? values + at : pf_zero_row;
    }
    for (int dp = 0; dp < dim / 2; ++dp)
        for (int j = 0; j < PF_KT; ++j) kp[dp * PF_KT + j] = ((const uint32_t *)krow[j])[dp];
    const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                         40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                         1, 32, 0);
    const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
    for (int jp = 0; jp < PF_KT / 2; ++jp)
        for (int d0 = 0; d0 < dim; d0 += 32) {
            const __m512i a = _mm512_loadu_si512(vrow[2 * jp] + d0);
            const __m512i b = _mm512_loadu_si512(vrow[2 * jp + 1] + d0);
            uint16_t *at = vp + ((int64_t)jp * dim + d0) * 2;
            _mm512_store_si512(at, _mm512_permutex2var_epi16(a, low, b));
            _mm512_store_si512(at + 32, _mm512_permutex2var_epi16(a, high, b));
        }
}

/* pf_tile for bf16 queries and pool (see the top of this file). */
static void pf_tile_bf16(const Problem *p, const int64_t *table, int64_t start, int64_t first,
                         int count, int64_t pos0, int h, const pf_scratch *s) {
    const int dim = p->head_dim, group = p->num_heads / p->num_kv_heads;
    const int rows = count * group, chunks = dim / 16, pairs = dim / 2;
    uint32_t *kp = (uint32_t *)s->kt;
    uint16_t *vp = (uint16_t *)s->v;
    const uint32_t *q[PF_QT * PF_MAX_GROUP];
    for (int r = 0; r < rows; ++r) {
        const int64_t token = start + first + r / group;
        q[r] = (const uint32_t *)((const uint16_t *)p->query + token * p->query_stride +
                                  (int64_t)(h * group + r % group) * dim);
        memset(s->o + (int64_t)r * dim, 0, sizeof(float) * (size_t)dim);
        s->m[r] = PF_MASKED;
        s->l[r] = 0.0f;
    }
    const int64_t last = pos0 + count - 1;
    for (int64_t t0 = 0; t0 <= last; t0 += PF_KT) {
        const int n = last + 1 - t0 < PF_KT ? (int)(last + 1 - t0) : PF_KT;
        pf_layout_bf16(p, table, t0, n, h, kp, vp);
        const int r0 = t0 > pos0 ? (int)(t0 - pos0) * group : 0; /* rows before: none */
        for (int r = r0; r < rows; r += 4) {
            const int live_rows = rows - r < 4 ? rows - r : 4;
            const uint32_t *qr[4];
            for (int i = 0; i < 4; ++i) qr[i] = q[r + (i < live_rows ? i : 0)];
            __m512 even[4], odd[4];
            for (int i = 0; i < 4; ++i) even[i] = odd[i] = _mm512_setzero_ps();
            for (int dp = 0; dp < pairs; dp += 2) {
                const __m512bh k0 = (__m512bh)_mm512_load_si512(kp + dp * PF_KT);
                const __m512bh k1 = (__m512bh)_mm512_load_si512(kp + (dp + 1) * PF_KT);
                for (int i = 0; i < 4; ++i) {
                    even[i] = _mm512_dpbf16_ps(even[i], (__m512bh)_mm512_set1_epi32((int)qr[i][dp]), k0);
                    odd[i] = _mm512_dpbf16_ps(odd[i], (__m512bh)_mm512_set1_epi32((int)qr[i][dp + 1]), k1);
                }
            }
            for (int i = 0; i < live_rows; ++i) {
                const int row = r + i;
                const int64_t pos = pos0 + row / group;
                const int valid = pos - t0 + 1 < n ? (int)(pos - t0 + 1) : n;
                float corr;
                const __m512 e = pf_softmax_step(_mm512_add_ps(even[i], odd[i]), valid,
                                                 p->q_scale, &s->m[row], &s->l[row], &corr);
                uint32_t pp[PF_KT / 2];
                _mm256_storeu_si256((__m256i *)pp, (__m256i)_mm512_cvtneps_pbh(e));
                float *o = s->o + (int64_t)row * dim;
                const int used = (valid + 1) / 2;
                switch (chunks) { /* a constant for pf_weigh_bf16's loops */
                case 2: pf_weigh_bf16(o, pp, vp, used, corr, 2); break;
                case 4: pf_weigh_bf16(o, pp, vp, used, corr, 4); break;
                case 8: pf_weigh_bf16(o, pp, vp, used, corr, 8); break;
                default: pf_weigh_bf16(o, pp, vp, used, corr, chunks); break;
                }
            }
        }
    }
    pf_store(p, start, first, rows, h, s);
}
#endif
