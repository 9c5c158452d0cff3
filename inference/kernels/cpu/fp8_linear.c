/* FP8 (e4m3) weight-only linear layer for the CPU: out = x @ dequantize(q, scale).T, the
 * weight read as one byte a value and widened in registers, never written out whole.
 *
 * x (M, K) bfloat16 rows (row stride x_stride, elements contiguous); q (N, K) e4m3 bytes;
 * scale (N,) float32 per row (groups == 0) or (N, groups) per row and group of group_size
 * columns (a multiple of 16); out (M, N) bfloat16, contiguous.
 *
 * Work is split over tiles of NT weight rows. A tile is widened once into a small bfloat16
 * buffer (exactly: e4m3 values fit bfloat16; grouped scales are applied in float32 first
 * and rounded once, as `dequantize_weight_fp8(...).to(bfloat16)` rounds), then every MT rows
 * of x are multiplied with it by AVX-512 BF16 dot products, float32 sums. Per-row scales
 * multiply the float32 sum. Built by build.py; `fp8_linear_available()` is 0 where the
 * processor or compiler lacks AVX-512 BF16, and the caller then uses torch.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#define HAVE_BF16 1
#else
#define HAVE_BF16 0
#endif

int fp8_linear_available(void) { return HAVE_BF16; }

#if HAVE_BF16
enum { NT = 4, MT = 4 };

/* 16 e4m3 bytes (fewer under `mask`) as float32: sign | exponent + 120 | mantissa for
 * normal values, m * 2^-9 for subnormal ones (exponent 0). No NaN is expected. */
static inline __m512 widen16(const uint8_t *src, __mmask16 mask) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, src));
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7f));
    const __m512i normal =
        _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0.001953125f));
    const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8));
    const __m512 value = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
}

/* 32 e4m3 bytes (fewer under `mask`) straight to bfloat16 bits, exactly: a normal value's
 * exponent and mantissa shift into place and the exponent moves by 127 - 7; subnormal
 * ones (exponent 0, m * 2^-9) come from `subnormal`, indexed by m. */
static inline __m512i widen32(const uint8_t *src, __mmask32 mask, __m512i subnormal) {
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, src));
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7f));
    const __m512i normal =
        _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
    const __mmask32 is_sub = _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8));
    const __m512i value =
        _mm512_mask_blend_epi16(is_sub, normal, _mm512_permutexvar_epi16(mag, subnormal));
    const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0x80)), 8);
    return _mm512_or_si512(value, sign);
}

/* Row r of q as bfloat16 into dst (k_padded values, zeros past K). */
static void widen_row(const uint8_t *q, const float *scale, int64_t r, int K, int k_padded,
                      int groups, int group_size, __m512i subnormal, uint16_t *dst) {
    const uint8_t *src = q + r * (int64_t)K;
    if (!groups) { /* per-row scale: applied to the sums later */
        for (int c = 0; c < k_padded; c += 32) {
            const int left = K - c;
            const __mmask32 mask = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
            _mm512_storeu_si512(dst + c, widen32(src + c, mask, subnormal));
        }
        return;
    }
    for (int c = 0; c < k_padded; c += 16) {
        const int left = K - c;
        const __mmask16 mask = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        __m512 value = widen16(src + c, mask);
        value = _mm512_mul_ps(value, _mm512_set1_ps(scale[r * groups + c / group_size]));
        _mm256_storeu_si256((__m256i *)(dst + c), (__m256i)_mm512_cvtneps_pbh(value));
    }
}

static inline uint16_t to_bf16(float f) { /* round to nearest even; sums are finite */
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* out rows m0.. (mt of them, a constant once inlined) x tile rows n0.. (nt of them). */
static inline __attribute__((always_inline)) void tile_product(
                         const uint16_t *x, int64_t x_stride, int64_t m0, const int mt,
                         const uint16_t *w, int k_padded, int K, int64_t n0, int nt,
                         const float *row_scale, uint16_t *out, int64_t N) {
    const uint16_t *rows[MT];
    for (int i = 0; i < mt; ++i) rows[i] = x + (m0 + i) * x_stride;
    __m512 acc[MT][NT];
    for (int i = 0; i < mt; ++i)
        for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int c = 0; c < k_padded; c += 32) {
        const int left = K - c;
        const __mmask32 mask = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
        __m512bh wv[NT];
        for (int j = 0; j < NT; ++j) wv[j] = (__m512bh)_mm512_loadu_si512(w + j * k_padded + c);
        for (int i = 0; i < mt; ++i) {
            const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, rows[i] + c);
            for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
        }
    }
    for (int i = 0; i < mt; ++i)
        for (int j = 0; j < nt; ++j) {
            float sum = _mm512_reduce_add_ps(acc[i][j]);
            if (row_scale) sum *= row_scale[n0 + j];
            out[(m0 + i) * N + n0 + j] = to_bf16(sum);
        }
}
#endif

/* Returns 0, or -1 where unavailable (see above) or out of memory. */
int fp8_linear(const void *x, int64_t x_stride, int64_t M, const uint8_t *q,
               const float *scale, int64_t N, int K, int groups, int group_size, void *out,
               int num_threads) {
#if HAVE_BF16
    const int k_padded = (K + 31) / 32 * 32;
    const int64_t tiles = (N + NT - 1) / NT;
    int failed = 0;
    uint16_t table[32] = {0};
    for (int m = 0; m < 8; ++m) { /* m * 2^-9 in bfloat16: exact, the top half of float32 */
        const float value = (float)m * 0.001953125f;
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        table[m] = (uint16_t)(bits >> 16);
    }
    const __m512i subnormal = _mm512_loadu_si512(table);
#pragma omp parallel num_threads(num_threads)
    {
        uint16_t *w = aligned_alloc(64, sizeof(uint16_t) * NT * (size_t)k_padded);
        if (!w) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tiles; ++t) {
            if (!w) continue;
            const int64_t n0 = t * NT;
            const int nt = N - n0 < NT ? (int)(N - n0) : NT;
            for (int j = 0; j < NT; ++j)
                if (j < nt)
                    widen_row(q, scale, n0 + j, K, k_padded, groups, group_size, subnormal,
                              w + j * k_padded);
                else
                    memset(w + j * k_padded, 0, sizeof(uint16_t) * (size_t)k_padded);
            const float *row_scale = groups ? NULL : scale;
            int64_t m0 = 0;
            for (; m0 + MT <= M; m0 += MT)
                tile_product(x, x_stride, m0, MT, w, k_padded, K, n0, nt, row_scale, out, N);
            switch (M - m0) { /* the last rows, each count its own specialised loop */
            case 3: tile_product(x, x_stride, m0, 3, w, k_padded, K, n0, nt, row_scale, out, N); break;
            case 2: tile_product(x, x_stride, m0, 2, w, k_padded, K, n0, nt, row_scale, out, N); break;
            case 1: tile_product(x, x_stride, m0, 1, w, k_padded, K, n0, nt, row_scale, out, N); break;
            default: break;
            }
        }
        free(w);
    }
    return failed ? -1 : 0;
#else
    (void)x, (void)x_stride, (void)M, (void)q, (void)scale, (void)N, (void)K, (void)groups;
    (void)group_size, (void)out, (void)num_threads;
    return -1;
#endif
}
