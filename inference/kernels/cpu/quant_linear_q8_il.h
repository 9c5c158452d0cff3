/* quant_linear_q8_il: the int8 path (quant_linear_q8) over 4- and 8-bit weights laid out
 * 16 rows interleaved, so that a vector's 16 lanes are 16 weight rows. The arithmetic is
 * quant_linear_q8's, x quantized by the same code; only the weight's layout and the order
 * of the float sums differ. Not a header of its own: quant_linear_q8.c includes it last
 * (build.py's cache key hashes it with the source that includes it).
 *
 * The file's layout (one row's 32 columns a block, 16 bytes: byte i column i in its low
 * nibble, 16 + i in its high one) makes a one-row kernel reduce each row's lanes at the end
 * of a tile and pay a per-row epilogue; with the rows in the lanes a block of 32 columns is
 * four 64-byte loads (4-bit; 8-bit eight), eight `vpdpbusd` and one epilogue for 16 rows, no
 * horizontal reduction (docs/engine.md, "Zen 4 again"). The layout, made by quant_linear.py's
 * `interleave_rows` from the file's (a 4-byte transpose):
 *   codes  [N / 16][blocks][steps][16] 32-bit lanes: lane r of step s is bytes 4s..4s+3 of
 *          row 16n + r's block (4-bit, 4 steps: columns 4s..4s+3 in the low nibbles,
 *          16+4s..19+4s in the high; 8-bit, 8 steps: columns 4s..4s+3)
 *   scale, offset  [N / 16][groups][16] float16: row 16n + r's, lane r
 * AVX512-VNNI multiplies a step's 16 rows in one vector; AVX2 (Q8_PATH 1) takes the same
 * layout as two halves of 8 rows (a 32-byte half of each 64-byte step), one half after the
 * other over the tile's blocks, its 8 lanes the half's rows: `vpmaddubsw` and `vpmaddwd`
 * for `vpdpbusd` (docs/engine.md, "AVX2: 16 rows interleaved too"). Taken with either and
 * N a multiple of 16 (else 1, and the layer keeps quant_linear_q8 over the file's layout). */

/* Rows of x a work item of the call takes (a multiple of IL_TILE_M). */
enum { IL_CHUNK = 64 };

#if Q8_PATH
enum { IL_ROWS = 16, IL_TILE_M = Q8_PATH == 2 ? 8 : 4 };

/* x as the tiles read it, quantized once a call straight into this layout: for each
 * IL_TILE_M rows of x (a tile's: 8 with VNNI, whose 32 registers hold 8 rows' sums; 4 with
 * AVX2), block by block, each row's 32 bytes of q in column order, then the rows' d and
 * centring a block and float sums a group. One pointer a kind then serves all of a tile's
 * rows; read from `activations` by row strides the tile's addresses took more registers
 * than x86 has, and the spills cost about as much as the arithmetic (docs/engine.md, "AVX2:
 * x packed"). The codes, d and sums are quantize_row's. The last tile's slots past row M
 * are left unwritten: a tile reads only its own rows. */
typedef struct {
    int8_t *q;      /* [tiles][blocks][IL_TILE_M][BLOCK] */
    float *d;       /* [tiles][blocks][IL_TILE_M] */
    int32_t *c;     /* [tiles][blocks][IL_TILE_M]: -z * the sum of the block's q */
    float *sum;     /* [tiles][groups][IL_TILE_M] */
} il_panel;

/* Row m of x into its tile's slot. */
static void il_quantize_row(const void *x, int64_t x_stride, int bf16, int K, int bits,
                            int group_size, int blocks, int groups, int64_t m, il_panel *p) {
    const int64_t t = m / IL_TILE_M;
    const int r = (int)(m % IL_TILE_M);
    for (int g = 0; g < groups; g++) p->sum[(t * groups + g) * IL_TILE_M + r] = 0.0f;
    for (int b = 0; b < blocks; b++) {
        const int64_t at = (t * blocks + b) * IL_TILE_M + r;
        int8_t *q = p->q + at * BLOCK;
        const int width = K - b * BLOCK < BLOCK ? K - b * BLOCK : BLOCK;
        quantize_x_block(x, bf16, m * x_stride + (int64_t)b * BLOCK, width, q, &p->d[at],
                         &p->sum[(t * groups + b * BLOCK / group_size) * IL_TILE_M + r]);
        int32_t total = 0;
        for (int i = 0; i < BLOCK; i++) total += q[i];
        p->c[at] = -(1 << (bits - 1)) * total;
    }
}

/* x's M rows into a panel (one allocation: free(p->q)); 0, or 2 where it failed. */
static int il_quantize(const void *x, int64_t x_stride, int bf16, int64_t M, int K, int bits,
                       int group_size, int blocks, int groups, int threads, il_panel *p) {
    const int64_t rows = (M + IL_TILE_M - 1) / IL_TILE_M * IL_TILE_M;
    const size_t q_bytes = (size_t)(rows * blocks * BLOCK), block_values = (size_t)(rows * blocks);
    p->q = malloc(q_bytes + (2 * block_values + (size_t)(rows * groups)) * 4);
    if (p->q == NULL) return 2;
    p->d = (float *)(p->q + q_bytes);
    p->c = (int32_t *)(p->d + block_values);
    p->sum = (float *)(p->c + block_values);
    /* a decode step's few rows in the calling thread: a parallel region costs its set-up */
#pragma omp parallel for schedule(static) num_threads(threads) if (M >= 4)
    for (int64_t m = 0; m < M; m++)
        il_quantize_row(x, x_stride, bf16, K, bits, group_size, blocks, groups, m, p);
    return 0;
}

#endif

#if Q8_PATH == 2
/* 16 sums to out[at ..], as `store` rounds them (bfloat16: to nearest even, NaN quiet). */
static inline void store16(void *out, int bf16, int64_t at, __m512 v) {
    if (!bf16) {
        _mm512_storeu_ps((float *)out + at, v);
        return;
    }
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i half = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
    const __m512i rounded = _mm512_add_epi32(bits, half);
    const __m512i nan = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
    const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i top = _mm512_srli_epi32(_mm512_mask_blend_epi32(is_nan, rounded, nan), 16);
    _mm256_storeu_si256((__m256i *)((uint16_t *)out + at), _mm512_cvtepi32_epi16(top));
}

/* Rows IL_TILE_M t .. + MT - 1 of x (tile t of the panel) times one block of 16 weight
 * rows: acc[m] their 16 sums. BITS 4: a block's 16 bytes a row are 4 steps of 4 bytes, each
 * lane's low nibbles columns 4s.. and high ones 16 + 4s..; BITS 8: its 32 bytes are 8
 * steps of 4 columns. Each integer dot starts from the row's centring. As the AVX2 tile,
 * one flat loop over the blocks (each taking its group's scales), then the offsets. */
static inline __attribute__((always_inline)) void il_tile(
    const il_panel *p, int64_t t, int MT, const uint8_t *codes, const uint16_t *scale,
    const uint16_t *offset, int blocks, int groups, int group_blocks, int BITS,
    __m512 acc[IL_TILE_M]) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    const __m512 z = _mm512_set1_ps(BITS == 4 ? 8.0f : 128.0f);
    const int steps = BITS == 4 ? 4 : 8, block_bytes = 16 * BLOCK * BITS / 8;
    const int8_t *q = p->q + t * blocks * IL_TILE_M * BLOCK;
    const float *d = p->d + t * blocks * IL_TILE_M;
    const int32_t *c = p->c + t * blocks * IL_TILE_M;
    const float *sum = p->sum + t * groups * IL_TILE_M;
    for (int m = 0; m < MT; m++) acc[m] = _mm512_setzero_ps();
    /* the offsets are read after the blocks: asked for now, a decode step's tile (read
     * from memory) finds them in cache */
    prefetch_rows(offset, groups * 16 * 2, 0, 1, 1);
    const uint16_t *group_scale = scale;
    for (int b = 0, left = group_blocks; b < blocks; b++) {
        const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)group_scale));
        if (--left == 0) {
            group_scale += 16;
            left = group_blocks;
        }
        const uint8_t *block = codes + (int64_t)b * block_bytes;
        for (int line = 0; line < block_bytes; line += 64) /* 2 KiB on: prefetch_rows.h */
            _mm_prefetch((const char *)(block + PREFETCH_BYTES + line), _MM_HINT_T0);
        __m512i dot[IL_TILE_M];
        for (int m = 0; m < MT; m++) dot[m] = _mm512_set1_epi32(c[m]);
        for (int step = 0; step < steps; step++) {
            const __m512i v = _mm512_loadu_si512((const void *)(block + step * 64));
            if (BITS == 4) {
                const __m512i lo = _mm512_and_si512(v, low);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                for (int m = 0; m < MT; m++) {
                    int32_t x_lo, x_hi;
                    memcpy(&x_lo, q + m * BLOCK + 4 * step, 4);
                    memcpy(&x_hi, q + m * BLOCK + 16 + 4 * step, 4);
                    dot[m] = _mm512_dpbusd_epi32(dot[m], lo, _mm512_set1_epi32(x_lo));
                    dot[m] = _mm512_dpbusd_epi32(dot[m], hi, _mm512_set1_epi32(x_hi));
                }
            } else {
                for (int m = 0; m < MT; m++) {
                    int32_t x4;
                    memcpy(&x4, q + m * BLOCK + 4 * step, 4);
                    dot[m] = _mm512_dpbusd_epi32(dot[m], v, _mm512_set1_epi32(x4));
                }
            }
        }
        for (int m = 0; m < MT; m++)
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[m]),
                                     _mm512_mul_ps(s, _mm512_set1_ps(d[m])), acc[m]);
        q += IL_TILE_M * BLOCK;
        d += IL_TILE_M;
        c += IL_TILE_M;
    }
    /* the offsets, with the centring's z * scale, times x's float sum over the group */
    for (int g = 0; g < groups; g++) {
        const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(scale + g * 16)));
        const __m512 o = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(offset + g * 16)));
        const __m512 oz = _mm512_fmadd_ps(s, z, o);
        for (int m = 0; m < MT; m++)
            acc[m] = _mm512_fmadd_ps(oz, _mm512_set1_ps(sum[g * IL_TILE_M + m]), acc[m]);
    }
}

/* Rows IL_TILE_M t .. + mt - 1 (mt <= IL_TILE_M) of x times a block of 16 weight rows,
 * stored from out[at] (row stride N). */
static void il_rows(const il_panel *p, int64_t t, int mt, const uint8_t *codes,
                    const uint16_t *scale, const uint16_t *offset, int blocks, int groups,
                    int group_blocks, int bits, void *out, int bf16, int64_t at, int64_t N) {
    __m512 acc[IL_TILE_M];
#define IL(MT) \
    do { \
        if (bits == 4) \
            il_tile(p, t, MT, codes, scale, offset, blocks, groups, group_blocks, 4, acc); \
        else \
            il_tile(p, t, MT, codes, scale, offset, blocks, groups, group_blocks, 8, acc); \
    } while (0)
    switch (mt) {
    case 1: IL(1); break;
    case 2: IL(2); break;
    case 3: IL(3); break;
    case 4: IL(4); break;
    case 5: IL(5); break;
    case 6: IL(6); break;
    case 7: IL(7); break;
    default: IL(8); break;
    }
#undef IL
    for (int m = 0; m < mt; m++) store16(out, bf16, at + m * N, acc[m]);
}
#elif Q8_PATH == 1
enum { IL_HALF = 8 };

/* 8 sums to out[at ..], as `store` rounds them (bfloat16: to nearest even, NaN quiet). */
static inline void store8(void *out, int bf16, int64_t at, __m256 v) {
    if (!bf16) {
        _mm256_storeu_ps((float *)out + at, v);
        return;
    }
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    const __m256i nan = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i top = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, nan, is_nan), 16);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(top),
                                            _mm256_extracti128_si256(top, 1));
    _mm_storeu_si128((__m128i *)((uint16_t *)out + at), packed);
}

/* Rows 4t .. 4t + MT - 1 of x (tile t of the panel) times HALVES halves (from rows
 * 8 * half on) of a block of 16 weight rows: acc[m][h] their sums, 8 a half. 4-bit: each
 * lane's 4 bytes are 8 codes, their low nibbles times 4 bytes of q and their high ones
 * times 4 more (`vpmaddubsw`: pairs of products in 16 bits, at most 2 * 15 * 127 each), a
 * block's 8 such pair sums added in 16 bits (at most 30,480: no overflow), then widened by
 * `vpmaddwd` and centred. 8-bit: each code less 128 is signed and multiplies as |w| times
 * q with w's sign (quant_linear_q8's AVX2 trick, a pair sum at most 2 * 128 * 127),
 * widened at each step; that is the centred dot. The empty asm statements keep each sum in
 * its register where it is added: without them GCC reassociates a block's additions into
 * trees whose partial sums spill (about 1.5x the time at 4 rows). */
static inline __attribute__((always_inline)) void il_tile(
    const il_panel *p, int64_t t, int MT, const uint8_t *codes, const uint16_t *scale,
    const uint16_t *offset, int blocks, int groups, int group_blocks, int BITS, int half,
    int HALVES, __m256 acc[IL_TILE_M][2]) {
    const __m256i low = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8((char)0x80);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 z = _mm256_set1_ps(BITS == 4 ? 8.0f : 128.0f);
    const int steps = BITS == 4 ? 4 : 8, block_bytes = 16 * BLOCK * BITS / 8;
    const int8_t *q = p->q + t * blocks * IL_TILE_M * BLOCK;
    const float *d = p->d + t * blocks * IL_TILE_M;
    const int32_t *c = p->c + t * blocks * IL_TILE_M;
    const float *sum = p->sum + t * groups * IL_TILE_M;
    for (int m = 0; m < MT; m++)
        for (int h = 0; h < HALVES; h++) acc[m][h] = _mm256_setzero_ps();
    /* one flat loop over the blocks, each taking its group's scales (a loop a group around
     * it cost a block's arithmetic again in address updates at 32-column groups), then the
     * offsets a group */
    if (half == 0) prefetch_rows(offset, groups * 16 * 2, 0, 1, 1); /* as VNNI's */
    const uint16_t *group_scale = scale + half * IL_HALF;
    for (int b = 0, left = group_blocks; b < blocks; b++) {
        __m256 s[2];
        for (int h = 0; h < HALVES; h++)
            s[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(group_scale + h * IL_HALF)));
        if (--left == 0) {
            group_scale += 16;
            left = group_blocks;
        }
        const uint8_t *block = codes + (int64_t)b * block_bytes;
        for (int line = 0; half == 0 && line < block_bytes; line += 64) /* 2 KiB on */
            _mm_prefetch((const char *)(block + PREFETCH_BYTES + line), _MM_HINT_T0);
        __m256i dot[IL_TILE_M][2];
        if (BITS == 4) {
            __m256i pairs[IL_TILE_M][2];
            for (int m = 0; m < MT; m++)
                for (int h = 0; h < HALVES; h++) pairs[m][h] = _mm256_setzero_si256();
            for (int step = 0; step < 4; step++) {
                __m256i lo[2], hi[2];
                for (int h = 0; h < HALVES; h++) {
                    const __m256i v = _mm256_loadu_si256(
                        (const __m256i *)(block + step * 64 + (half + h) * 32));
                    lo[h] = _mm256_and_si256(v, low);
                    hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                }
                for (int m = 0; m < MT; m++) {
                    int32_t x_lo, x_hi;
                    memcpy(&x_lo, q + m * BLOCK + 4 * step, 4);
                    memcpy(&x_hi, q + m * BLOCK + 16 + 4 * step, 4);
                    const __m256i q_lo = _mm256_set1_epi32(x_lo), q_hi = _mm256_set1_epi32(x_hi);
                    for (int h = 0; h < HALVES; h++) {
                        pairs[m][h] = _mm256_add_epi16(
                            pairs[m][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], q_lo),
                                                          _mm256_maddubs_epi16(hi[h], q_hi)));
                        __asm__("" : "+x"(pairs[m][h]));
                    }
                }
            }
            for (int m = 0; m < MT; m++) {
                const __m256i centre = _mm256_set1_epi32(c[m]);
                for (int h = 0; h < HALVES; h++)
                    dot[m][h] = _mm256_add_epi32(_mm256_madd_epi16(pairs[m][h], ones), centre);
            }
        } else {
            for (int m = 0; m < MT; m++)
                for (int h = 0; h < HALVES; h++) dot[m][h] = _mm256_setzero_si256();
            for (int step = 0; step < steps; step++) {
                __m256i w[2], magnitude[2];
                for (int h = 0; h < HALVES; h++) {
                    w[h] = _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i *)(block + step * 64 + (half + h) * 32)),
                        flip);
                    magnitude[h] = _mm256_abs_epi8(w[h]);
                }
                for (int m = 0; m < MT; m++) {
                    int32_t x4;
                    memcpy(&x4, q + m * BLOCK + 4 * step, 4);
                    const __m256i x = _mm256_set1_epi32(x4);
                    for (int h = 0; h < HALVES; h++) {
                        dot[m][h] = _mm256_add_epi32(
                            dot[m][h], _mm256_madd_epi16(_mm256_maddubs_epi16(
                                                             magnitude[h], _mm256_sign_epi8(x, w[h])),
                                                         ones));
                        __asm__("" : "+x"(dot[m][h]));
                    }
                }
            }
        }
        for (int m = 0; m < MT; m++) {
            const __m256 dm = _mm256_set1_ps(d[m]);
            for (int h = 0; h < HALVES; h++)
                acc[m][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[m][h]), _mm256_mul_ps(s[h], dm),
                                            acc[m][h]);
        }
        q += IL_TILE_M * BLOCK;
        d += IL_TILE_M;
        c += IL_TILE_M;
    }
    /* the offsets, with the centring's z * scale, times x's float sum over the group */
    for (int g = 0; g < groups; g++)
        for (int h = 0; h < HALVES; h++) {
            const int64_t at = g * 16 + (half + h) * IL_HALF;
            const __m256 oz =
                _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scale + at))), z,
                                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(offset + at))));
            for (int m = 0; m < MT; m++)
                acc[m][h] = _mm256_fmadd_ps(oz, _mm256_set1_ps(sum[g * IL_TILE_M + m]), acc[m][h]);
        }
}

/* As the VNNI path's il_rows, over the panel's tile t: one row of x takes both halves of
 * the 16 rows in one pass (each step's 64 bytes, q read once for both), more rows one half
 * after the other (the tile's registers would not hold both halves' sums). */
static void il_rows(const il_panel *p, int64_t t, int mt, const uint8_t *codes,
                    const uint16_t *scale, const uint16_t *offset, int blocks, int groups,
                    int group_blocks, int bits, void *out, int bf16, int64_t at, int64_t N) {
    __m256 acc[IL_TILE_M][2];
#define IL(MT, BITS, HALF, HALVES) il_tile(p, t, MT, codes, scale, offset, blocks, groups, \
                                           group_blocks, BITS, HALF, HALVES, acc)
    if (mt == 1) {
        if (bits == 4) IL(1, 4, 0, 2);
        else IL(1, 8, 0, 2);
        store8(out, bf16, at, acc[0][0]);
        store8(out, bf16, at + IL_HALF, acc[0][1]);
        return;
    }
    for (int half = 0; half < 2; half++) {
        if (bits == 4) {
            if (mt == 4) IL(4, 4, half, 1);
            else if (mt == 3) IL(3, 4, half, 1);
            else IL(2, 4, half, 1);
        } else {
            if (mt == 4) IL(4, 8, half, 1);
            else if (mt == 3) IL(3, 8, half, 1);
            else IL(2, 8, half, 1);
        }
        for (int m = 0; m < mt; m++) store8(out, bf16, at + m * N + half * IL_HALF, acc[m][0]);
    }
#undef IL
}
#endif

int quant_linear_q8_il(const void *x, int64_t x_stride, int x_bf16, int64_t M,
                       const uint8_t *codes, const uint16_t *scale, const uint16_t *offset,
                       int64_t N, int K, int bits, int group_size, void *out, int threads) {
#if Q8_PATH
    if (!(M > 0 && N > 0 && N % IL_ROWS == 0 && K > 0 && (bits == 4 || bits == 8) &&
          group_size > 0 && group_size % BLOCK == 0))
        return 1;
    const int blocks = (K + BLOCK - 1) / BLOCK, group_blocks = group_size / BLOCK;
    const int groups = (K + group_size - 1) / group_size;
    const int64_t tiles = N / IL_ROWS, chunks = (M + IL_CHUNK - 1) / IL_CHUNK;
    il_panel panel;
    const int failed =
        il_quantize(x, x_stride, x_bf16, M, K, bits, group_size, blocks, groups, threads, &panel);
    /* a work item: a tile of 16 weight rows times up to IL_CHUNK rows of x, so that a
     * prompt's rows spread over the threads as well as the weight's tiles; a thread's items
     * run chunk by chunk, its chunk of x (IL_CHUNK K bytes, 4-8x a weight tile's) staying
     * in cache while the weight's tiles pass (1.1-1.25x at 1,024-2,048 rows on a Zen 4) */
#pragma omp parallel for schedule(static) num_threads(threads) if (!failed)
    for (int64_t item = 0; item < tiles * chunks; item++) {
        if (failed) continue;
        const int64_t chunk = item / tiles, n = item % tiles;
        const uint8_t *tile_codes = codes + n * blocks * (16 * BLOCK * bits / 8);
        const uint16_t *tile_scale = scale + n * groups * 16;
        const uint16_t *tile_offset = offset + n * groups * 16;
        const int64_t m_end = (chunk + 1) * IL_CHUNK < M ? (chunk + 1) * IL_CHUNK : M;
        for (int64_t m0 = chunk * IL_CHUNK; m0 < m_end; m0 += IL_TILE_M) {
            const int mt = m_end - m0 < IL_TILE_M ? (int)(m_end - m0) : IL_TILE_M;
            il_rows(&panel, m0 / IL_TILE_M, mt, tile_codes, tile_scale, tile_offset,
                    blocks, groups, group_blocks, bits, out, x_bf16, m0 * N + n * IL_ROWS, N);
        }
    }
    free(panel.q);
    return failed;
#else
    (void)x, (void)x_stride, (void)x_bf16, (void)M, (void)codes, (void)scale, (void)offset;
    (void)N, (void)K, (void)bits, (void)group_size, (void)out, (void)threads;
    return 1;
#endif
}
