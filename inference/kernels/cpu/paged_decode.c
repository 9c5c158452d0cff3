/* Paged attention for decode steps on the CPU: one query token per sequence, read straight
 * from the paged KV pools through the block tables, with no gathered copy of the context.
 *
 * Layouts (all contiguous, element strides):
 *   query, out     (T, num_heads, head_dim), rows `*_stride` elements apart; a decode's
 *                  row is rows[b]
 *   key, value     (num_blocks, block_size, num_kv_heads, head_dim)
 *   block_tables   (num_seqs, table_stride) int64
 * One work item (OpenMP, dynamic) is one sequence and all its heads; the query heads of one
 * KV head (a GQA group) share each key and value row. Scores are kept for the whole
 * context, then a softmax and one pass over the values: two streaming reads, K then V,
 * each asking for rows a block ahead. There is a portable path and an AVX-512 one (bf16
 * scores with AVX-512 BF16 dot products where the processor has them).
 * Cascade: a caller that has attended the blocks every sequence shares (skip tokens of
 * each context) passes that part's output and log-sum-exp; the kernel attends the rest and
 * folds the two together.
 * FP8 (e4m3fn) pools follow inference/kernels/kv_cache.py: stored * scale; the key scale
 * folds into the query, the value scale into the output. Built by build.py at first use.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2, DT_E4M3 = 3 };

static float e4m3_table[256];

/* Filled once when the library is loaded, before any call can read it. */
__attribute__((constructor)) static void init_e4m3_table(void) {
    for (int bits = 0; bits < 256; ++bits) {
        int sign = bits >> 7, exponent = (bits >> 3) & 15, mantissa = bits & 7;
        float value;
        if (exponent == 15 && mantissa == 7) value = NAN; /* e4m3fn: no infinities */
        else if (exponent == 0) value = ldexpf((float)mantissa / 8.0f, -6);
        else value = ldexpf(1.0f + (float)mantissa / 8.0f, exponent - 7);
        e4m3_table[bits] = sign ? -value : value;
    }
}

static inline int element_size(int dtype) {
    return dtype == DT_F32 ? 4 : dtype == DT_E4M3 ? 1 : 2;
}

/* The pool slot of a sequence's token t. block_size is a power of two (EngineConfig
 * allows 8 to 128), so this is a shift and a mask, not a division per token. */
static inline int64_t slot_of(const int64_t *table, int64_t t, int block_size) {
    const int shift = __builtin_ctz((unsigned)block_size);
    return (table[t >> shift] << shift) | (t & (block_size - 1));
}

/* n elements of `base` from `index` on, as float32. */
static inline void load_row(const void *base, int64_t index, int dtype, int n, float *dst) {
    if (dtype == DT_BF16) {
        const uint16_t *src = (const uint16_t *)base + index;
        uint32_t *out = (uint32_t *)dst;
        for (int i = 0; i < n; ++i) out[i] = (uint32_t)src[i] << 16;
    } else if (dtype == DT_F32) {
        memcpy(dst, (const float *)base + index, (size_t)n * sizeof(float));
    } else if (dtype == DT_F16) {
        const _Float16 *src = (const _Float16 *)base + index;
        for (int i = 0; i < n; ++i) dst[i] = (float)src[i];
    } else {
        const uint8_t *src = (const uint8_t *)base + index;
        for (int i = 0; i < n; ++i) dst[i] = e4m3_table[src[i]];
    }
}

static inline void store_row(void *base, int64_t index, int dtype, int n, const float *src) {
    if (dtype == DT_F32) {
        memcpy((float *)base + index, src, (size_t)n * sizeof(float));
    } else if (dtype == DT_BF16) {
        uint16_t *out = (uint16_t *)base + index;
        for (int i = 0; i < n; ++i) { /* round to nearest even, as torch does */
            uint32_t bits;
            memcpy(&bits, &src[i], sizeof bits);
            if ((bits & 0x7fffffffu) > 0x7f800000u) out[i] = (uint16_t)((bits >> 16) | 0x40);
            else out[i] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        }
    } else {
        _Float16 *out = (_Float16 *)base + index;
        for (int i = 0; i < n; ++i) out[i] = (_Float16)src[i];
    }
}

/* In place: s[0..n) -> softmax(s) * factor; returns log(sum(exp(s))) of the input. */
static float softmax_scaled(float *s, int64_t n, float factor) {
    float top = s[0], total = 0.0f;
    for (int64_t t = 1; t < n; ++t) top = s[t] > top ? s[t] : top;
    for (int64_t t = 0; t < n; ++t) {
        s[t] = expf(s[t] - top);
        total += s[t];
    }
    const float norm = factor / total;
    for (int64_t t = 0; t < n; ++t) s[t] *= norm;
    return top + logf(total);
}

typedef struct {
    const void *query;
    void *out;
    int64_t query_stride, out_stride; /* elements from one token's row to the next */
    int q_dtype;
    const void *key;
    const void *value;
    int kv_dtype;
    int num_heads, num_kv_heads, head_dim, block_size;
    float q_scale, v_scale;
    const void *prior;      /* cascade: (num_seqs, num_heads, head_dim) in q_dtype, or NULL */
    const float *prior_lse; /* (num_seqs, num_heads) */
} Problem;

/* One sequence: query row `row`, a context of `len` tokens via `table`. Leaves the
 * attention output of each head in acc (num_heads * head_dim) and its log-sum-exp in lse.
 * scores: num_heads * len floats; q: num_heads * head_dim; kv_row: one token's heads. */
static void attend_sequence(const Problem *p, int64_t row, const int64_t *table, int64_t len,
                            float *scores, float *q, float *acc, float *lse, float *kv_row) {
    const int heads = p->num_heads, kv_heads = p->num_kv_heads, dim = p->head_dim;
    const int group = heads / kv_heads, width = kv_heads * dim;
    load_row(p->query, row * p->query_stride, p->q_dtype, heads * dim, q);
    for (int i = 0; i < heads * dim; ++i) q[i] *= p->q_scale;
    for (int64_t t = 0; t < len; ++t) {
        const int64_t slot = slot_of(table, t, p->block_size);
        load_row(p->key, slot * width, p->kv_dtype, width, kv_row);
        for (int head = 0; head < heads; ++head) {
            const float *qh = q + head * dim, *kh = kv_row + (head / group) * dim;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < dim; ++d) dot += qh[d] * kh[d];
            scores[head * len + t] = dot;
        }
    }
    for (int head = 0; head < heads; ++head)
        lse[head] = softmax_scaled(scores + head * len, len, p->v_scale);
    memset(acc, 0, sizeof(float) * (size_t)(heads * dim));
    for (int64_t t = 0; t < len; ++t) {
        const int64_t slot = slot_of(table, t, p->block_size);
        load_row(p->value, slot * width, p->kv_dtype, width, kv_row);
        for (int head = 0; head < heads; ++head) {
            const float weight = scores[head * len + t];
            const float *vh = kv_row + (head / group) * dim;
            float *ah = acc + head * dim;
#pragma omp simd
            for (int d = 0; d < dim; ++d) ah[d] += weight * vh[d];
        }
    }
}


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

/* Cascade: fold the attention over a shared prefix (its output `prior`, in the query's
 * dtype, and log-sum-exp `prior_lse`, per head) into this sequence's own part (acc, lse). */
static void merge_prior(const Problem *p, int64_t b, float *acc, const float *lse, float *row) {
    const int heads = p->num_heads, dim = p->head_dim;
    load_row(p->prior, b * heads * dim, p->q_dtype, heads * dim, row);
    for (int head = 0; head < heads; ++head) {
        const float own = lse[head], prior = p->prior_lse[b * heads + head];
        const float top = own > prior ? own : prior;
        const float w_own = expf(own - top), w_prior = expf(prior - top);
        const float norm = 1.0f / (w_own + w_prior);
        float *ah = acc + head * dim;
        const float *ph = row + head * dim;
        for (int d = 0; d < dim; ++d) ah[d] = (ah[d] * w_own + ph[d] * w_prior) * norm;
    }
}

/* Returns 0, or a negative number for arguments it cannot serve. */
int paged_decode_attention(const void *query, int64_t query_stride, void *out,
                           int64_t out_stride, int q_dtype, const int64_t *rows,
                           const void *key, const void *value, int kv_dtype,
                           const int64_t *block_tables, int64_t table_stride,
                           const int64_t *seq_lens, int64_t num_seqs, int num_heads,
                           int num_kv_heads, int head_dim, int block_size, float scale,
                           float k_scale, float v_scale, int64_t skip, const void *prior,
                           const float *prior_lse, int num_threads) {
    if (num_kv_heads <= 0 || num_heads % num_kv_heads || head_dim <= 0 || block_size <= 0 ||
        (block_size & (block_size - 1)))
        return -1;
    if (q_dtype == DT_E4M3 || kv_dtype < DT_F32 || kv_dtype > DT_E4M3) return -2;
    if (skip < 0 || skip % block_size || (skip > 0 && (!prior || !prior_lse))) return -5;
    const Problem problem = {query,     out,         query_stride,     out_stride,
                             q_dtype,   key,         value,            kv_dtype,
                             num_heads, num_kv_heads, head_dim,        block_size,
                             scale * k_scale, v_scale, skip ? prior : NULL, prior_lse};
    int64_t max_len = 1;
    for (int64_t b = 0; b < num_seqs; ++b) {
        if (seq_lens[b] <= skip) return -4; /* each sequence keeps a token of its own */
        if (seq_lens[b] - skip > max_len) max_len = seq_lens[b] - skip;
    }
    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
        const size_t hd = (size_t)num_heads * head_dim;
        float *scores = malloc(sizeof(float) * (size_t)num_heads * (size_t)max_len);
        float *q = malloc(sizeof(float) * hd), *acc = malloc(sizeof(float) * hd);
        float *row = malloc(sizeof(float) * hd), *lse = malloc(sizeof(float) * num_heads);
        const int ready = scores && q && acc && row && lse;
        failed = !ready;
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < num_seqs; ++b) {
            if (!ready) continue;
            /* The skipped prefix is whole blocks: the sequence's own part starts a block in. */
            const int64_t *table = block_tables + b * table_stride + skip / block_size;
            const int64_t len = seq_lens[b] - skip;
#if defined(__AVX512F__)
            if (head_dim % 16 == 0)
                attend_sequence_avx512(&problem, rows[b], table, len, scores, q, acc, lse);
            else
#endif
                attend_sequence(&problem, rows[b], table, len, scores, q, acc, lse, row);
            if (problem.prior) merge_prior(&problem, b, acc, lse, row);
            store_row(out, rows[b] * out_stride, q_dtype, (int)hd, acc);
        }
        free(scores);
        free(q);
        free(acc);
        free(row);
        free(lse);
    }
    return failed ? -3 : 0;
}

#include "paged_prefill.h" /* paged_prefill_attention: prefill chunks */
