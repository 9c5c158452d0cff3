/* Paged attention for prefill chunks on the CPU: many query tokens per sequence, each
 * attending causally to its context, read from the paged pools in place.
 *
 * Not a header of its own: paged_decode.c includes it after the helpers it shares
 * (`Problem`, `load_row`, `load16`, `store_row`, `slot_of`), and build.py's cache key
 * hashes it with that source.
 *
 * One work item is a tile of PF_QT query tokens of one sequence and one KV head, with the
 * query heads of that KV head (a GQA group): PF_QT * group rows. Keys and values go by in
 * tiles of PF_KT tokens, laid out once for all the rows, and each row keeps a running
 * maximum, sum and output (the online softmax of flash attention): no scores for the whole
 * context. Rows before a key tile skip it (causal), and the tile's keys past a row's
 * position are masked.
 *
 * AVX-512 only (paged_prefill_available() says 0 elsewhere, and the caller keeps torch's
 * path). Here pf_tile, for any dtype: float32 products, a row at a time with the tile's
 * keys in the lanes (transposed, so a row's 16 scores are one vector), four rows' scores
 * at a time in two chains each. bf16 queries over a bf16 or FP8 pool, where the processor
 * has AVX-512 BF16: paged_prefill_bf16.h, 16 rows in the lanes. head_dim a multiple of 16
 * (bf16: 32), up to 128. */

enum { PF_QT = 32, PF_KT = 16, PF_MAX_DIM = 128, PF_MAX_GROUP = 32 };
#define PF_MASKED (-1e30f) /* a score no key reaches; finite, as -ffast-math assumes */

#if defined(__AVX512F__)
#define PF_AVAILABLE 1

typedef struct {
    float *o, *m, *l; /* rows x head_dim outputs (bf16: transposed), running maxima, sums */
    float *q;         /* rows x head_dim: the queries as float (bf16: the rows' pairs) */
    float *kt;        /* head_dim x 16: the key tile, transposed (bf16: an FP8 tile's rows) */
    float *v;         /* 16 x head_dim: the value tile (bf16: pairs of keys) */
} pf_scratch;

/* e^x lane by lane (x <= 0 here): 2^n * 2^f with f in [-1/2, 1/2], 2^f by Cephes'
 * degree-6 exp2f polynomial (relative error under 2e-7); below e^-87, about 1e-38. */
static inline __m512 pf_exp512(__m512 x) {
    const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)),
                                   _mm512_set1_ps(1.44269504f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 y = _mm512_set1_ps(1.535336188319500e-4f);
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.339887440266574e-3f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(9.618437357674640e-3f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(5.550332471162809e-2f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.402264791363012e-1f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(6.931472028550421e-1f));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* One row's online-softmax step over a key tile: its 16 dot products scaled and masked
 * past `valid`, the running maximum m and sum l moved on. Returns the tile's weights (0
 * past valid); *corr is what the row's output so far is to be multiplied by. */
static inline __m512 pf_softmax_step(__m512 dots, int valid, float scale, float *m, float *l,
                                     float *corr) {
    const __mmask16 live = (__mmask16)((1u << valid) - 1u);
    const __m512 score =
        _mm512_mask_mul_ps(_mm512_set1_ps(PF_MASKED), live, dots, _mm512_set1_ps(scale));
    const float before = *m, tile_top = _mm512_mask_reduce_max_ps(live, score);
    const float top = tile_top > before ? tile_top : before;
    const __m512 e =
        _mm512_maskz_mov_ps(live, pf_exp512(_mm512_sub_ps(score, _mm512_set1_ps(top))));
    *corr = top > before ? expf(before - top) : 1.0f;
    *l = *l * *corr + _mm512_reduce_add_ps(e);
    *m = top;
    return e;
}

/* The rows' outputs, divided by their sums (and scaled by the value scale), stored. */
static void pf_store(const Problem *p, int64_t start, int64_t first, int rows, int h,
                     const pf_scratch *s) {
    const int dim = p->head_dim, group = p->num_heads / p->num_kv_heads;
    for (int r = 0; r < rows; ++r) {
        const int64_t token = start + first + r / group;
        float *o = s->o + (int64_t)r * dim;
        const __m512 norm = _mm512_set1_ps(p->v_scale / s->l[r]);
        for (int d = 0; d < dim; d += 16)
            _mm512_store_ps(o + d, _mm512_mul_ps(_mm512_load_ps(o + d), norm));
        store_row(p->out, token * p->out_stride + (int64_t)(h * group + r % group) * dim,
                  p->q_dtype, dim, o);
    }
}

/* o = o * corr + the value tile (16 x C * 16 floats) weighed by w, over `valid` keys, in
 * two chains (C a constant once inlined: the accumulators stay in registers). */
static inline __attribute__((always_inline)) void pf_weigh(float *o, const float *w,
                                                           const float *v, int valid,
                                                           float corr, const int C) {
    __m512 acc[PF_MAX_DIM / 16], odd[PF_MAX_DIM / 16];
    for (int c = 0; c < C; ++c) {
        acc[c] = _mm512_mul_ps(_mm512_load_ps(o + 16 * c), _mm512_set1_ps(corr));
        odd[c] = _mm512_setzero_ps();
    }
    int j = 0;
    for (; j + 1 < valid; j += 2) {
        const float *v0 = v + (int64_t)j * C * 16, *v1 = v0 + C * 16;
        for (int c = 0; c < C; ++c) {
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), _mm512_load_ps(v0 + 16 * c), acc[c]);
            odd[c] = _mm512_fmadd_ps(_mm512_set1_ps(w[j + 1]), _mm512_load_ps(v1 + 16 * c), odd[c]);
        }
    }
    if (j < valid)
        for (int c = 0; c < C; ++c)
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(w[j]),
                                     _mm512_load_ps(v + (int64_t)j * C * 16 + 16 * c), acc[c]);
    for (int c = 0; c < C; ++c) _mm512_store_ps(o + 16 * c, _mm512_add_ps(acc[c], odd[c]));
}

/* One item in float32, any pool dtype: query tokens first .. first + count - 1 of a chunk
 * whose rows start at `start` (token first's position in its sequence: pos0), KV head h,
 * over the context `table`. */
static void pf_tile(const Problem *p, const int64_t *table, int64_t start, int64_t first,
                    int count, int64_t pos0, int h, const pf_scratch *s) {
    const int dim = p->head_dim, group = p->num_heads / p->num_kv_heads;
    const int width = p->num_kv_heads * dim, rows = count * group;
    for (int r = 0; r < rows; ++r) {
        const int64_t token = start + first + r / group;
        load_row(p->query, token * p->query_stride + (int64_t)(h * group + r % group) * dim,
                 p->q_dtype, dim, s->q + (int64_t)r * dim);
        memset(s->o + (int64_t)r * dim, 0, sizeof(float) * (size_t)dim);
        s->m[r] = PF_MASKED;
        s->l[r] = 0.0f;
    }
    const int64_t last = pos0 + count - 1;
    for (int64_t t0 = 0; t0 <= last; t0 += PF_KT) {
        const int n = last + 1 - t0 < PF_KT ? (int)(last + 1 - t0) : PF_KT;
        for (int j = 0; j < PF_KT; ++j) {
            float *vj = s->v + (int64_t)j * dim;
            const int64_t at = j < n ? slot_of(table, t0 + j, p->block_size) * width + h * dim : 0;
            for (int d = 0; d < dim; d += 16) {
                const __m512 k = j < n ? load16(p->key, at + d, p->kv_dtype) : _mm512_setzero_ps();
                _mm512_store_ps(vj + d, j < n ? load16(p->value, at + d, p->kv_dtype) : k);
                float lanes[16];
                _mm512_storeu_ps(lanes, k);
                for (int i = 0; i < 16; ++i) s->kt[(d + i) * PF_KT + j] = lanes[i];
            }
        }
        const int r0 = t0 > pos0 ? (int)(t0 - pos0) * group : 0; /* rows before: none */
        for (int r = r0; r < rows; r += 4) {
            const int live_rows = rows - r < 4 ? rows - r : 4;
            const float *qr[4];
            for (int i = 0; i < 4; ++i) qr[i] = s->q + (int64_t)(r + (i < live_rows ? i : 0)) * dim;
            __m512 even[4], odd[4];
            for (int i = 0; i < 4; ++i) even[i] = odd[i] = _mm512_setzero_ps();
            for (int d = 0; d < dim; d += 2) {
                const __m512 k0 = _mm512_load_ps(s->kt + d * PF_KT);
                const __m512 k1 = _mm512_load_ps(s->kt + (d + 1) * PF_KT);
                for (int i = 0; i < 4; ++i) {
                    even[i] = _mm512_fmadd_ps(_mm512_set1_ps(qr[i][d]), k0, even[i]);
                    odd[i] = _mm512_fmadd_ps(_mm512_set1_ps(qr[i][d + 1]), k1, odd[i]);
                }
            }
            for (int i = 0; i < live_rows; ++i) {
                const int row = r + i;
                const int64_t pos = pos0 + row / group;
                const int valid = pos - t0 + 1 < n ? (int)(pos - t0 + 1) : n;
                float corr, w[PF_KT] __attribute__((aligned(64)));
                _mm512_store_ps(w, pf_softmax_step(_mm512_add_ps(even[i], odd[i]), valid,
                                                   p->q_scale, &s->m[row], &s->l[row], &corr));
                float *o = s->o + (int64_t)row * dim;
                switch (dim / 16) { /* a constant for pf_weigh's loops */
                case 2: pf_weigh(o, w, s->v, valid, corr, 2); break;
                case 4: pf_weigh(o, w, s->v, valid, corr, 4); break;
                case 8: pf_weigh(o, w, s->v, valid, corr, 8); break;
                default: pf_weigh(o, w, s->v, valid, corr, dim / 16); break;
                }
            }
        }
    }
    pf_store(p, start, first, rows, h, s);
}

#include "paged_prefill_bf16.h" /* pf_tile_bf16, where the processor has bf16 dots */
#else
#define PF_AVAILABLE 0
#endif

/* 1 where this build has the kernel (AVX-512), else 0: the caller keeps torch's path. */
int paged_prefill_available(void) { return PF_AVAILABLE; }

/* Prefill chunks: chunk c is seqs[4c .. 4c+3] = (its row of block_tables, its first row of
 * query/out, its query length, its context length), the chunk's queries being the last
 * positions of the context. Returns 0, or a negative number for arguments it cannot serve
 * (-5: a build without the kernel). scale * k_scale scales the scores, v_scale the output
 * (FP8 pools; 1 otherwise). */
int paged_prefill_attention(const void *query, int64_t query_stride, void *out,
                            int64_t out_stride, int q_dtype, int64_t num_tokens,
                            const void *key, const void *value, int kv_dtype,
                            const int64_t *block_tables, int64_t table_rows,
                            int64_t table_stride, const int64_t *seqs, int64_t num_chunks,
                            int num_heads, int num_kv_heads, int head_dim, int block_size,
                            float scale, float k_scale, float v_scale, int num_threads) {
    if (num_kv_heads <= 0 || num_heads % num_kv_heads || num_heads / num_kv_heads > PF_MAX_GROUP ||
        head_dim <= 0 || head_dim % 16 || head_dim > PF_MAX_DIM || block_size <= 0 ||
        (block_size & (block_size - 1)))
        return -1;
    if (q_dtype == DT_E4M3 || q_dtype < DT_F32 || q_dtype > DT_E4M3 || kv_dtype < DT_F32 ||
        kv_dtype > DT_E4M3)
        return -2;
    int64_t items = 0;
    for (int64_t c = 0; c < num_chunks; ++c) {
        const int64_t *chunk = seqs + 4 * c;
        if (chunk[0] < 0 || chunk[0] >= table_rows || chunk[1] < 0 || chunk[2] <= 0 ||
            chunk[1] + chunk[2] > num_tokens || chunk[3] < chunk[2] ||
            chunk[3] > table_stride * block_size)
            return -4;
        items += (chunk[2] + PF_QT - 1) / PF_QT;
    }
#if PF_AVAILABLE
    items *= num_kv_heads;
    const Problem problem = {query,     out,          query_stride, out_stride,
                             q_dtype,   key,          value,        kv_dtype,
                             num_heads, num_kv_heads, head_dim,     block_size,
                             scale * k_scale, v_scale, NULL, NULL};
    const size_t rows = (size_t)PF_QT * (num_heads / num_kv_heads), dim = (size_t)head_dim;
    const int bf16 = q_dtype == DT_BF16 && (kv_dtype == DT_BF16 || kv_dtype == DT_E4M3) &&
                     head_dim % 32 == 0;
    (void)bf16; /* without bf16 dots, pf_tile serves every dtype */
    int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
    {
        pf_scratch s;
        s.q = aligned_alloc(64, sizeof(float) * rows * dim);
        s.o = aligned_alloc(64, sizeof(float) * rows * dim);
        s.m = malloc(sizeof(float) * rows);
        s.l = malloc(sizeof(float) * rows);
        s.kt = aligned_alloc(64, sizeof(float) * PF_KT * dim);
        s.v = aligned_alloc(64, sizeof(float) * PF_KT * dim);
        const int ready = s.q && s.o && s.m && s.l && s.kt && s.v;
        failed = !ready;
        /* Items in reverse: the last tiles of each chunk, with the most context, go first,
         * so the threads run out of work together. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = (int64_t)items - 1; item >= 0; --item) {
            if (!ready) continue;
            int64_t at = item / num_kv_heads;
            const int h = (int)(item % num_kv_heads);
            int64_t c = 0;
            for (;; ++c) { /* the chunk and tile of this item */
                const int64_t tiles = (seqs[4 * c + 2] + PF_QT - 1) / PF_QT;
                if (at < tiles) break;
                at -= tiles;
            }
            const int64_t *chunk = seqs + 4 * c;
            const int64_t first = at * PF_QT;
            const int count = chunk[2] - first < PF_QT ? (int)(chunk[2] - first) : PF_QT;
            const int64_t *table = block_tables + chunk[0] * table_stride;
            const int64_t pos0 = chunk[3] - chunk[2] + first;
#if defined(PF_HAS_BF16)
            if (bf16) pf_tile_bf16(&problem, table, chunk[1], first, count, pos0, h, &s);
            else
#endif
                pf_tile(&problem, table, chunk[1], first, count, pos0, h, &s);
        }
        free(s.q);
        free(s.o);
        free(s.m);
        free(s.l);
        free(s.kt);
        free(s.v);
    }
    return failed ? -3 : 0;
#else
    (void)query, (void)query_stride, (void)out, (void)out_stride, (void)key, (void)value;
    (void)block_tables, (void)scale, (void)k_scale, (void)v_scale, (void)num_threads;
    (void)items;
    return -5;
#endif
}
