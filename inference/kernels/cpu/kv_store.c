/* A step's KV cache write on the CPU (what vLLM calls reshape_and_cache): each new token's
 * keys and values into its slot of the paged pools, in one call for both, instead of the
 * torch path's conversion and index_copy_ per pool.
 *
 * key, value     (T, width) rows `*_stride` elements apart (width: kv_heads * head_dim)
 * pools          (num_slots, width) contiguous: (num_blocks, block_size, kv_heads, head_dim)
 * slots          (T,) int64; a negative slot (padding) is skipped
 * A pool in the keys' dtype gets a copy of each row. An e4m3fn pool gets what
 * inference/kernels/kv_cache.py's to_cache_dtype gives, bit for bit: the quotient x / scale
 * worked in double and rounded once to float32 (scale 1: x itself), clamped to +-448 and
 * rounded to the nearest e4m3fn value, ties to even; NaN stays NaN. Built without
 * -ffast-math (build.py), which would turn the division into a reciprocal's product and
 * drop the NaN checks. Built by build.py.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2, DT_E4M3 = 3 };

static const float E4M3_MAX = 448.0f;

static inline int element_size(int dtype) {
    return dtype == DT_F32 ? 4 : dtype == DT_E4M3 ? 1 : 2;
}

static inline float load_one(const void *row, int i, int dtype) {
    if (dtype == DT_BF16) {
        const uint32_t bits = (uint32_t)((const uint16_t *)row)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    if (dtype == DT_F16) return (float)((const _Float16 *)row)[i];
    return ((const float *)row)[i];
}

/* A float32 in [-448, 448] (or NaN) as the nearest e4m3fn byte, ties to even. */
static inline uint8_t to_e4m3(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    const uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
    const float a = fabsf(f);
    if (isnan(f)) return sign | 0x7fu;
    if (a < 0.015625f) /* below 2^-6: a multiple of 2^-9; 8 of them is the least normal */
        return sign | (uint8_t)nearbyintf(a * 512.0f);
    memcpy(&bits, &a, sizeof bits);
    /* Keep 3 of the 23 mantissa bits, ties to even; a carry moves into the exponent. */
    const uint32_t rounded = bits + 0x7ffffu + ((bits >> 20) & 1u);
    return sign | (uint8_t)((rounded - (120u << 23)) >> 20); /* exponent bias 127 -> 7 */
}

/* One token's row of n values into an e4m3fn pool row. */
static void encode_row(const void *src, int dtype, int n, float scale, uint8_t *dst) {
    const double divisor = (double)scale;
    for (int i = 0; i < n; ++i) {
        float x = load_one(src, i, dtype);
        if (scale != 1.0f) x = (float)((double)x / divisor);
        if (x > E4M3_MAX) x = E4M3_MAX;
        else if (x < -E4M3_MAX) x = -E4M3_MAX;
        dst[i] = to_e4m3(x);
    }
}

/* Returns 0; -1 for a slot past the pools (nothing written), -2 for dtypes it does not
 * take. */
int store_kv(const void *key, int64_t key_stride, const void *value, int64_t value_stride,
             int src_dtype, void *key_cache, void *value_cache, int kv_dtype,
             const int64_t *slots, int64_t num_tokens, int width, int64_t num_slots,
             float k_scale, float v_scale, int num_threads) {
    if (src_dtype == DT_E4M3 || src_dtype < DT_F32 || src_dtype > DT_E4M3) return -2;
    if (kv_dtype != src_dtype && kv_dtype != DT_E4M3) return -2;
    for (int64_t t = 0; t < num_tokens; ++t)
        if (slots[t] >= num_slots) return -1;
    const int in_size = element_size(src_dtype), out_size = element_size(kv_dtype);
    const size_t row_bytes = (size_t)width * (size_t)out_size;
#pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t t = 0; t < num_tokens; ++t) {
        const int64_t slot = slots[t];
        if (slot < 0) continue;
        const char *k = (const char *)key + t * key_stride * in_size;
        const char *v = (const char *)value + t * value_stride * in_size;
        char *k_dst = (char *)key_cache + slot * (int64_t)row_bytes;
        char *v_dst = (char *)value_cache + slot * (int64_t)row_bytes;
        if (kv_dtype == DT_E4M3) {
            encode_row(k, src_dtype, width, k_scale, (uint8_t *)k_dst);
            encode_row(v, src_dtype, width, v_scale, (uint8_t *)v_dst);
        } else {
            memcpy(k_dst, k, row_bytes);
            memcpy(v_dst, v, row_bytes);
        }
    }
    return 0;
}
