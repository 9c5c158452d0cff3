/* The AVX-512 path of paged_decode.c's decode attention: scores (bf16 dot products where
 * the processor has them, else widened to float32), the softmax, and the weighted values,
 * each context read straight from the pools with rows asked for a block ahead.
 *
 * Not a header of its own: paged_decode.c includes it after the helpers it uses
 * (`Problem`, `load_row`, `slot_of`, `softmax_scaled`, `element_size`, `e4m3_table`), and
 * build.py's cache key hashes it with that source. paged_prefill.h uses its `load16`.
 */
#if defined(__AVX512F__)
#include <immintrin.h>

/* 16 elements at `src` (element offset `index`) as float32. */
static inline __m512 load16(const void *base, int64_t index, int dtype) {
    if (dtype == DT_BF16) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)((const uint16_t *)base + index));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
    if (dtype == DT_F32) return _mm512_loadu_ps((const float *)base + index);
    if (dtype == DT_F16) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)((const uint16_t *)base + index));
        return _mm512_cvtph_ps(raw);
    }
    __m128i raw = _mm_loadu_si128((const __m128i *)((const uint8_t *)base + index));
    return _mm512_i32gather_ps(_mm512_cvtepu8_epi32(raw), e4m3_table, 4);
}


/* How far ahead (in tokens) the loops over a context ask for rows: the blocks are
 * scattered, and the hardware prefetchers neither follow a block table nor cross pages. */
#define PREFETCH_TOKENS 16

/* Ask for token t + PREFETCH_TOKENS's row (`bytes`: all its KV heads) of `pool`. */
static inline void prefetch_ahead(const void *pool, const int64_t *table, int block_size,
                                  int bytes, int64_t t, int64_t len) {
    if (t + PREFETCH_TOKENS >= len) return;
    const char *row = (const char *)pool + slot_of(table, t + PREFETCH_TOKENS, block_size) *
                                               (int64_t)bytes;
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(row + off, _MM_HINT_T0);
}

#if defined(__AVX512BF16__)
/* Scores of bf16 queries against a bf16 pool with the processor's bf16 dot product (two
 * products per float lane per instruction), read straight from the pool. Token by token,
 * all heads: each token's keys are one contiguous read. head_dim: 32, 64, 96 or 128. */
static void scores_bf16(const Problem *p, int64_t row, const int64_t *table, int64_t len,
                        float *scores) {
    const int heads = p->num_heads, kv_heads = p->num_kv_heads, dim = p->head_dim;
    const int group = heads / kv_heads, width = kv_heads * dim, chunks = dim / 32;
    const int bs = p->block_size, row_bytes = width * 2;
    const uint16_t *query = (const uint16_t *)p->query + row * p->query_stride;
    for (int64_t t = 0; t < len; ++t) {
        const uint16_t *k = (const uint16_t *)p->key + slot_of(table, t, bs) * width;
        prefetch_ahead(p->key, table, bs, row_bytes, t, len);
        for (int h = 0; h < kv_heads; ++h) {
            __m512bh kc[4];
            for (int c = 0; c < 4; ++c)
                kc[c] = (__m512bh)_mm512_loadu_si512(k + h * dim + 32 * (c < chunks ? c : 0));
            for (int g = 0; g < group; ++g) {
                const uint16_t *qh = query + (h * group + g) * dim;
                __m512 sum = _mm512_setzero_ps();
                for (int c = 0; c < chunks; ++c) {
                    const __m512bh qc = (__m512bh)_mm512_loadu_si512(qh + 32 * c);
                    sum = _mm512_dpbf16_ps(sum, qc, kc[c]);
                }
                const float score = _mm512_reduce_add_ps(sum) * p->q_scale;
                scores[(int64_t)(h * group + g) * len + t] = score;
            }
        }
    }
}
#endif

/* Scores in float32 for any pool dtype: per KV head, its query heads in tiles of up to 4,
 * so the accumulators stay in registers. q: the scaled queries, widened. */
static void scores_wide(const Problem *p, const int64_t *table, int64_t len, const float *q,
                        float *scores) {
    const int heads = p->num_heads, kv_heads = p->num_kv_heads, dim = p->head_dim;
    const int group = heads / kv_heads, width = kv_heads * dim, bs = p->block_size;
    const int kv_dtype = p->kv_dtype, row_bytes = width * element_size(kv_dtype);
    for (int h = 0; h < kv_heads; ++h) {
        for (int g0 = 0; g0 < group; g0 += 4) {
            const int tile = group - g0 < 4 ? group - g0 : 4;
            const float *qt = q + (h * group + g0) * dim;
            float *st = scores + (int64_t)(h * group + g0) * len;
            for (int64_t t = 0; t < len; ++t) {
                const int64_t at = slot_of(table, t, bs) * width + h * dim;
                if (h == 0 && g0 == 0) prefetch_ahead(p->key, table, bs, row_bytes, t, len);
                __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                                 _mm512_setzero_ps()};
                for (int d = 0; d < dim; d += 16) {
                    const __m512 k = load16(p->key, at + d, kv_dtype);
                    for (int g = 0; g < 4; ++g) /* constant bounds keep sum in registers */
                        if (g < tile)
                            sum[g] = _mm512_fmadd_ps(_mm512_loadu_ps(qt + g * dim + d), k, sum[g]);
                }
                for (int g = 0; g < 4; ++g)
                    if (g < tile) st[g * len + t] = _mm512_reduce_add_ps(sum[g]);
            }
        }
    }
}

/* acc = weights (softmaxed scores) times values: per KV head, query heads in tiles of 4
 * and head_dim in chunks of 64, so the 16 accumulators stay in registers. */
static void weigh_values(const Problem *p, const int64_t *table, int64_t len,
                         const float *weights, float *acc) {
    const int heads = p->num_heads, kv_heads = p->num_kv_heads, dim = p->head_dim;
    const int group = heads / kv_heads, width = kv_heads * dim, bs = p->block_size;
    const int kv_dtype = p->kv_dtype, row_bytes = width * element_size(kv_dtype);
    for (int h = 0; h < kv_heads; ++h) {
        for (int g0 = 0; g0 < group; g0 += 4) {
            const int tile = group - g0 < 4 ? group - g0 : 4;
            const float *wt = weights + (int64_t)(h * group + g0) * len;
            for (int d0 = 0; d0 < dim; d0 += 64) {
                const int chunks = (dim - d0) / 16 < 4 ? (dim - d0) / 16 : 4;
                const int lead = h == 0 && g0 == 0 && d0 == 0; /* the pass that reads first */
                __m512 total[4][4];
                for (int g = 0; g < 4; ++g)
                    for (int c = 0; c < 4; ++c) total[g][c] = _mm512_setzero_ps();
                for (int64_t t = 0; t < len; ++t) {
                    const int64_t at = slot_of(table, t, bs) * width + h * dim + d0;
                    if (lead) prefetch_ahead(p->value, table, bs, row_bytes, t, len);
                    __m512 v[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                                   _mm512_setzero_ps(), _mm512_setzero_ps()};
                    /* Constant bounds (with guards) keep total and v in registers. */
                    for (int c = 0; c < 4; ++c)
                        if (c < chunks) v[c] = load16(p->value, at + 16 * c, kv_dtype);
                    for (int g = 0; g < 4; ++g) {
                        if (g >= tile) continue;
                        const __m512 w = _mm512_set1_ps(wt[g * len + t]);
                        for (int c = 0; c < 4; ++c)
                            if (c < chunks) total[g][c] = _mm512_fmadd_ps(w, v[c], total[g][c]);
                    }
                }
                for (int g = 0; g < tile; ++g)
                    for (int c = 0; c < chunks; ++c)
                        _mm512_storeu_ps(acc + (h * group + g0 + g) * dim + d0 + 16 * c,
                                         total[g][c]);
            }
        }
    }
}

/* The vector path (head_dim a multiple of 16), as attend_sequence. */
static void attend_sequence_avx512(const Problem *p, int64_t row, const int64_t *table,
                                   int64_t len, float *scores, float *q, float *acc,
                                   float *lse) {
    const int heads = p->num_heads, dim = p->head_dim;
#if defined(__AVX512BF16__)
    if (p->q_dtype == DT_BF16 && p->kv_dtype == DT_BF16 && dim % 32 == 0 && dim <= 128) {
        scores_bf16(p, row, table, len, scores);
    } else
#endif
    {
        load_row(p->query, row * p->query_stride, p->q_dtype, heads * dim, q);
        for (int i = 0; i < heads * dim; ++i) q[i] *= p->q_scale;
        scores_wide(p, table, len, q, scores);
    }
    for (int head = 0; head < heads; ++head)
        lse[head] = softmax_scaled(scores + head * len, len, p->v_scale);
    weigh_values(p, table, len, scores, acc);
}
#endif
