/* Paged attention for decode steps on the CPU: one query token per sequence, read straight
 * from the paged KV pools through the block tables, with no gathered copy of the context.
 *
 * Layouts (all contiguous, element strides):
 *   query, out     (T, num_heads, head_dim), rows `*_stride` elements apart; a decode's
 *                  row is rows[b]
 *   key, value     (num_blocks, block_size, num_kv_heads, head_dim)
 *   block_tables   (num_seqs, table_stride) int64
 * One work item (OpenMP, dynamic) is one sequence and all its heads, or, with few
 * sequences for the threads, a part of a long context (see paged_decode_splits); the
 * query heads of one KV head (a GQA group) share each key and value row. Scores are kept
 * for the whole context, then a softmax and one pass over the values: two reads, K then V,
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

#include "paged_decode_avx512.h" /* attend_sequence_avx512(): the vector path */

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

/* Splitting a context over the threads (flash-decoding). With few sequences for the
 * threads (one person's request alone, or 3 on 2 threads, where one thread would take two
 * sequences and the other one), each sequence's own context is cut into parts of whole
 * blocks, each part's attention (output and log-sum-exp per head) is a work item, and the
 * parts are folded together as the cascade folds its prefix. A part is at least
 * SPLIT_MIN_TOKENS long: below that a second thread's wake-up and the fold cost about what
 * they save. */
enum { SPLIT_MIN_TOKENS = 128 };

/* The parts each sequence's context is cut into (1: not split), for num_seqs sequences the
 * longest of whose own contexts is max_len tokens: as many as give every thread the same
 * number of parts (num_threads / gcd(num_seqs, num_threads)), fewer where a part would be
 * under SPLIT_MIN_TOKENS, and none from 4 sequences a thread on, where the last round's
 * idle threads are a small part of the call. */
int paged_decode_splits(int64_t num_seqs, int64_t max_len, int num_threads) {
    if (num_seqs <= 0 || num_threads <= 1 || num_seqs >= 4 * (int64_t)num_threads) return 1;
    int64_t a = num_seqs, b = num_threads;
    while (b) { /* a becomes gcd(num_seqs, num_threads) */
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    const int64_t wanted = num_threads / a, most = max_len / SPLIT_MIN_TOKENS;
    return (int)(wanted < most ? wanted : most > 1 ? most : 1);
}

/* Tokens in each part of a context of `len` cut into `splits`: whole blocks. The last
 * parts of a short context may be empty. */
static int64_t part_tokens(int64_t len, int splits, int block_size) {
    const int64_t blocks = (len + block_size - 1) / block_size;
    return (blocks + splits - 1) / splits * block_size;
}

/* Fold the first `count` parts (each heads * dim outputs, then heads log-sum-exps,
 * `stride` floats apart) into acc and lse. */
static void merge_parts(const Problem *p, const float *parts, int count, int64_t stride,
                        float *acc, float *lse) {
    const int heads = p->num_heads, dim = p->head_dim, hd = heads * dim;
    for (int head = 0; head < heads; ++head) {
        float top = parts[hd + head];
        for (int s = 1; s < count; ++s) {
            const float l = parts[s * stride + hd + head];
            top = l > top ? l : top;
        }
        float total = 0.0f;
        float *ah = acc + head * dim;
        memset(ah, 0, sizeof(float) * (size_t)dim);
        for (int s = 0; s < count; ++s) {
            const float *part = parts + s * stride;
            const float w = expf(part[hd + head] - top);
            total += w;
            for (int d = 0; d < dim; ++d) ah[d] += w * part[head * dim + d];
        }
        const float norm = 1.0f / total;
        for (int d = 0; d < dim; ++d) ah[d] *= norm;
        lse[head] = top + logf(total);
    }
}

static void attend(const Problem *p, int64_t row, const int64_t *table, int64_t len,
                   float *scores, float *q, float *acc, float *lse, float *kv_row) {
#if defined(__AVX512F__)
    if (p->head_dim % 16 == 0) {
        attend_sequence_avx512(p, row, table, len, scores, q, acc, lse);
        return;
    }
#endif
    attend_sequence(p, row, table, len, scores, q, acc, lse, kv_row);
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
    const size_t hd = (size_t)num_heads * head_dim;
    const int splits = paged_decode_splits(num_seqs, max_len, num_threads);
    const int64_t items = num_seqs * splits, stride = (int64_t)(hd + num_heads);
    float *parts = splits > 1 ? malloc(sizeof(float) * (size_t)(items * stride)) : NULL;
    if (splits > 1 && !parts) return -3;
    const int team = items < num_threads ? (int)items : num_threads;
    int failed = 0;
#pragma omp parallel num_threads(team) reduction(| : failed) if (team > 1)
    {
        const int64_t most = splits > 1 ? part_tokens(max_len, splits, block_size) : max_len;
        float *scores = malloc(sizeof(float) * (size_t)num_heads * (size_t)most);
        float *q = malloc(sizeof(float) * hd), *acc = malloc(sizeof(float) * hd);
        float *row = malloc(sizeof(float) * hd), *lse = malloc(sizeof(float) * num_heads);
        const int ready = scores && q && acc && row && lse;
        failed = !ready;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < items; ++i) {
            const int64_t b = i / splits, len = seq_lens[b] - skip;
            const int64_t part = splits > 1 ? part_tokens(len, splits, block_size) : len;
            const int64_t first = (i % splits) * part;
            if (!ready || first >= len) continue;
            /* The skipped prefix is whole blocks: the sequence's own part starts a block in. */
            const int64_t *table = block_tables + b * table_stride + (skip + first) / block_size;
            const int64_t n = len - first < part ? len - first : part;
            float *own = splits > 1 ? parts + i * stride : acc;
            attend(&problem, rows[b], table, n, scores, q, own, splits > 1 ? own + hd : lse, row);
            if (splits > 1) continue;
            if (problem.prior) merge_prior(&problem, b, acc, lse, row);
            store_row(out, rows[b] * out_stride, q_dtype, (int)hd, acc);
        }
        if (splits > 1) {
#pragma omp for schedule(static)
            for (int64_t b = 0; b < num_seqs; ++b) {
                if (!ready) continue;
                const int64_t len = seq_lens[b] - skip;
                const int64_t part = part_tokens(len, splits, block_size);
                const int count = (int)((len + part - 1) / part);
                merge_parts(&problem, parts + b * splits * stride, count, stride, acc, lse);
                if (problem.prior) merge_prior(&problem, b, acc, lse, row);
                store_row(out, rows[b] * out_stride, q_dtype, (int)hd, acc);
            }
        }
        free(scores);
        free(q);
        free(acc);
        free(row);
        free(lse);
    }
    free(parts);
    return failed ? -3 : 0;
}

#include "paged_prefill.h" /* paged_prefill_attention: prefill chunks */
