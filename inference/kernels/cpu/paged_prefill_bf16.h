/* The prefill tile of paged_prefill.h for bf16 queries over a bf16 or FP8 pool (its keys
 * and values converted to bf16 a tile at a time, exactly), with the
 * processor's bf16 dot products (AVX-512 BF16: two products per float lane per
 * instruction). Included by paged_prefill.h; the same items, key tiles and online softmax
 * as pf_tile, but with the item's rows in the vector lanes, 16 rows a block:
 *   scores  one vector a key: the block's queries as (d, d + 1) pairs a lane (laid out
 *           once an item) dotted with the key's pair broadcast straight from the pool;
 *           exact products of the bf16 values, summed in float;
 *   softmax each row's maximum and sum are lane-wise over the tile's 16 key vectors (no
 *           reductions across lanes), the causal mask one compare a key;
 *   values  the probabilities rounded to bf16 (as torch's flash attention does for bf16),
 *           two keys a lane pair, dotted with the two keys' value pair broadcast per
 *           head_dim lane; the outputs kept transposed (head_dim vectors of 16 rows).
 * head_dim a multiple of 32. */

#if defined(__AVX512BW__) && defined(__AVX512BF16__)
#define PF_HAS_BF16 1

static const uint16_t pf_zero_row[PF_MAX_DIM] __attribute__((aligned(64))) = {0};

/* n e4m3 values from `index` on as bf16: exact (3 mantissa bits fit in 7). */
static void pf_e4m3_to_bf16(const void *base, int64_t index, int n, uint16_t *dst) {
    const uint8_t *src = (const uint8_t *)base + index;
    for (int i = 0; i < n; ++i) {
        uint32_t bits;
        memcpy(&bits, &e4m3_table[src[i]], sizeof bits);
        dst[i] = (uint16_t)(bits >> 16);
    }
}

/* The tile of n keys from t0 on: each key's row (a bf16 pool's in place, an FP8 pool's
 * converted into `rows`: 2 x 16 x head_dim values; a row of zeros past n), and vp, per pair
 * of keys jp and head_dim lane d, the pair (value 2jp, value 2jp + 1) at
 * ((uint32_t *)vp)[jp * dim + d]. */
static void pf_layout_bf16(const Problem *p, const int64_t *table, int64_t t0, int n, int h,
                           const uint16_t **krow, uint16_t *vp, uint16_t *rows) {
    const int dim = p->head_dim, width = p->num_kv_heads * dim, fp8 = p->kv_dtype == DT_E4M3;
    const uint16_t *vrow[PF_KT];
    for (int j = 0; j < PF_KT; ++j) {
        const int64_t at = j < n ? slot_of(table, t0 + j, p->block_size) * width + h * dim : 0;
        if (j < n && fp8) {
            uint16_t *k = rows + (int64_t)j * dim, *v = rows + (int64_t)(PF_KT + j) * dim;
            pf_e4m3_to_bf16(p->key, at, dim, k);
            pf_e4m3_to_bf16(p->value, at, dim, v);
            krow[j] = k;
            vrow[j] = v;
            continue;
        }
        krow[j] = j < n ? (const uint16_t *)p->key + at : pf_zero_row;
        vrow[j] = j < n ? (const uint16_t *)p->value + at : pf_zero_row;
    }
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

/* One block of 16 rows over the key tile (see the top of this file). qt: dim / 2 vectors
 * of the rows' query pairs; ot: dim vectors of their outputs; m, l: their running maxima
 * and sums; pos: each lane's position in its sequence (-1: no row). */
static inline void pf_block_bf16(const Problem *p, const __m512i *qt, float *ot, float *m,
                                 float *l, __m512i pos, int64_t t0, int n,
                                 const uint16_t *const *krow, const uint32_t *vp) {
    const int dim = p->head_dim, pairs = dim / 2;
    __m512 score[PF_KT];
    for (int j = 0; j < PF_KT; ++j) score[j] = _mm512_setzero_ps();
    for (int dp = 0; dp < pairs; ++dp) {
        const __m512bh q = (__m512bh)_mm512_load_si512(qt + dp);
        for (int j = 0; j < PF_KT; ++j) {
            const __m512i k = _mm512_set1_epi32((int)((const uint32_t *)krow[j])[dp]);
            score[j] = _mm512_dpbf16_ps(score[j], q, (__m512bh)k);
        }
    }
    const __m512 scale = _mm512_set1_ps(p->q_scale), masked = _mm512_set1_ps(PF_MASKED);
    const __m512 before = _mm512_loadu_ps(m);
    __m512 top = before;
    __mmask16 live[PF_KT];
    for (int j = 0; j < PF_KT; ++j) {
        live[j] = j < n ? _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32((int)(t0 + j))) : 0;
        score[j] = _mm512_mask_mul_ps(masked, live[j], score[j], scale);
        top = _mm512_max_ps(top, score[j]);
    }
    const __m512 corr = pf_exp512(_mm512_sub_ps(before, top));
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < PF_KT; ++j) {
        score[j] = _mm512_maskz_mov_ps(live[j], pf_exp512(_mm512_sub_ps(score[j], top)));
        sum = _mm512_add_ps(sum, score[j]);
    }
    _mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), corr, sum));
    _mm512_storeu_ps(m, top);
    /* lane pairs (p of key 2jp, p of key 2jp + 1) for each row */
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                                25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19,
                                                3, 18, 2, 17, 1, 16, 0);
    const int used = (n + 1) / 2;
    __m512bh pp[PF_KT / 2];
    for (int jp = 0; jp < used; ++jp)
        pp[jp] = (__m512bh)_mm512_permutexvar_epi16(
            interleave, (__m512i)_mm512_cvtne2ps_pbh(score[2 * jp + 1], score[2 * jp]));
    for (int d0 = 0; d0 < dim; d0 += 16) {
        __m512 acc[16];
        for (int dd = 0; dd < 16; ++dd)
            acc[dd] = _mm512_mul_ps(_mm512_load_ps(ot + (int64_t)(d0 + dd) * 16), corr);
        for (int jp = 0; jp < used; ++jp)
            for (int dd = 0; dd < 16; ++dd)
                acc[dd] = _mm512_dpbf16_ps(
                    acc[dd], pp[jp],
                    (__m512bh)_mm512_set1_epi32((int)vp[(int64_t)jp * dim + d0 + dd]));
        for (int dd = 0; dd < 16; ++dd) _mm512_store_ps(ot + (int64_t)(d0 + dd) * 16, acc[dd]);
    }
}

/* pf_tile for bf16 queries and pool (see the top of this file). s->q holds the blocks'
 * query pairs, s->o their transposed outputs. */
static void pf_tile_bf16(const Problem *p, const int64_t *table, int64_t start, int64_t first,
                         int count, int64_t pos0, int h, const pf_scratch *s) {
    const int dim = p->head_dim, group = p->num_heads / p->num_kv_heads;
    const int rows = count * group, blocks = (rows + 15) / 16, pairs = dim / 2;
    __m512i *qt = (__m512i *)s->q;
    uint32_t *q_lanes = (uint32_t *)s->q;
    for (int b = 0; b < blocks; ++b) {
        for (int i = 0; i < 16; ++i) {
            const int r = b * 16 + i;
            const int64_t token = start + first + (r < rows ? r : rows - 1) / group;
            const uint32_t *q = (const uint32_t *)((const uint16_t *)p->query +
                                                   token * p->query_stride +
                                                   (int64_t)(h * group + r % group) * dim);
            for (int dp = 0; dp < pairs; ++dp)
                q_lanes[((int64_t)b * pairs + dp) * 16 + i] = r < rows ? q[dp] : 0;
            s->m[r] = PF_MASKED;
            s->l[r] = 0.0f;
        }
        memset(s->o + (int64_t)b * dim * 16, 0, sizeof(float) * 16 * (size_t)dim);
    }
    const uint16_t *krow[PF_KT];
    const int64_t last = pos0 + count - 1;
    for (int64_t t0 = 0; t0 <= last; t0 += PF_KT) {
        const int n = last + 1 - t0 < PF_KT ? (int)(last + 1 - t0) : PF_KT;
        pf_layout_bf16(p, table, t0, n, h, krow, (uint16_t *)s->v, (uint16_t *)s->kt);
        for (int b = 0; b < blocks; ++b) {
            const int top_row = b * 16 + 15 < rows ? b * 16 + 15 : rows - 1;
            if (pos0 + top_row / group < t0) continue; /* causal: the tile is after them */
            int lanes[16];
            for (int i = 0; i < 16; ++i) {
                const int r = b * 16 + i;
                lanes[i] = r < rows ? (int)(pos0 + r / group) : -1;
            }
            pf_block_bf16(p, qt + (int64_t)b * pairs, s->o + (int64_t)b * dim * 16,
                          s->m + b * 16, s->l + b * 16, _mm512_loadu_si512(lanes), t0, n, krow,
                          (const uint32_t *)s->v);
        }
    }
    float row[PF_MAX_DIM] __attribute__((aligned(64)));
    for (int r = 0; r < rows; ++r) {
        const int b = r / 16, i = r % 16;
        const float norm = p->v_scale / s->l[r];
        for (int d = 0; d < dim; ++d) row[d] = s->o[((int64_t)b * dim + d) * 16 + i] * norm;
        const int64_t token = start + first + r / group;
        store_row(p->out, token * p->out_stride + (int64_t)(h * group + r % group) * dim,
                  p->q_dtype, dim, row);
    }
}
#endif
