/* The decoder's elementwise layers fused for the CPU: RMSNorm (alone or after the residual
 * add), SiLU-and-multiply and the rotary embedding, each one pass over its rows instead of
 * several torch ops.
 *
 * Each rounds where the torch reference (inference/model/layers/) rounds, so bfloat16
 * results match it: the residual add rounds its sum; RMSNorm normalises in float32,
 * rounds to the model dtype, then multiplies by the weight; SiLU rounds before the
 * multiply; rotary rounds each product and then their sum. Rows may be strided (a view of
 * a fused projection); the last dimension is contiguous. dtype: 0 float32, 1 bfloat16.
 * Rows are widened into float32 buffers first, so the arithmetic loops are plain float
 * loops the compiler vectorises. Built by build.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { DT_F32 = 0, DT_BF16 = 1 };

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* n values of `base` from element `at` on, as float32. */
static void widen(const void *base, int64_t at, int dtype, int n, float *dst) {
    if (dtype == DT_BF16) {
        const uint16_t *src = (const uint16_t *)base + at;
        uint32_t *out = (uint32_t *)dst;
        for (int i = 0; i < n; ++i) out[i] = (uint32_t)src[i] << 16;
    } else {
        memcpy(dst, (const float *)base + at, (size_t)n * sizeof(float));
    }
}

/* Round in place to what `dtype` holds (float32: nothing to do). */
static void round_to(float *x, int dtype, int n) {
    if (dtype != DT_BF16) return;
    uint32_t *bits = (uint32_t *)x;
    for (int i = 0; i < n; ++i) {
        const uint32_t b = bits[i];
        bits[i] = (b & 0x7fffffffu) > 0x7f800000u
                      ? (b | 0x400000u) & 0xffff0000u
                      : (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    }
}

static void narrow(const float *src, void *base, int64_t at, int dtype, int n) {
    if (dtype == DT_BF16) {
        uint16_t *out = (uint16_t *)base + at;
        for (int i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
    } else {
        memcpy((float *)base + at, src, (size_t)n * sizeof(float));
    }
}

/* row (n floats, already in `dtype`'s values) -> weight * dtype(row * rsqrt(mean(row^2) +
 * eps)), in place. w: the weight, widened. */
static void normalize_row(float *row, const float *w, int n, float eps, int dtype) {
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum += row[i] * row[i];
    const float scale = 1.0f / sqrtf(sum / (float)n + eps);
    for (int i = 0; i < n; ++i) row[i] *= scale;
    round_to(row, dtype, n);
    for (int i = 0; i < n; ++i) row[i] *= w[i];
}

/* out[r] = weight * dtype(x[r] * rsqrt(mean(x[r]^2) + eps)), out contiguous (rows, n). */
void rms_norm(const void *x, int64_t x_stride, const void *weight, void *out, int64_t rows,
              int n, float eps, int dtype, int num_threads) {
#pragma omp parallel num_threads(num_threads)
    {
        float *row = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
        if (row && w) widen(weight, 0, dtype, n, w);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            if (!row || !w) continue;
            widen(x, r * x_stride, dtype, n, row);
            normalize_row(row, w, n, eps, dtype);
            narrow(row, out, r * (int64_t)n, dtype, n);
        }
        free(row);
        free(w);
    }
}

/* The residual add before a norm, fused: residual[r] = dtype(x[r] + residual[r]) (in
 * place, as torch's add rounds it), then out[r] = rms_norm(residual[r]) as above. x
 * (rows, n) rows `x_stride` apart; residual and out contiguous (rows, n). */
void add_rms_norm(const void *x, int64_t x_stride, void *residual, const void *weight,
                  void *out, int64_t rows, int n, float eps, int dtype, int num_threads) {
#pragma omp parallel num_threads(num_threads)
    {
        float *row = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
        float *res = malloc(sizeof(float) * (size_t)n);
        if (row && w && res) widen(weight, 0, dtype, n, w);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            if (!row || !w || !res) continue;
            const int64_t at = r * (int64_t)n;
            widen(x, r * x_stride, dtype, n, row);
            widen(residual, at, dtype, n, res);
            for (int i = 0; i < n; ++i) row[i] += res[i];
            round_to(row, dtype, n);
            narrow(row, residual, at, dtype, n);
            normalize_row(row, w, n, eps, dtype);
            narrow(row, out, at, dtype, n);
        }
        free(row);
        free(w);
        free(res);
    }
}

/* gate_up rows [gate | up] (2n wide) -> out (rows, n) = silu(gate) * up. */
void silu_and_mul(const void *gate_up, int64_t stride, void *out, int64_t rows, int n,
                  int dtype, int num_threads) {
#pragma omp parallel num_threads(num_threads)
    {
        float *gate = malloc(sizeof(float) * (size_t)n), *up = malloc(sizeof(float) * (size_t)n);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            if (!gate || !up) continue;
            widen(gate_up, r * stride, dtype, n, gate);
            widen(gate_up, r * stride + n, dtype, n, up);
            for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + expf(-gate[i]));
            round_to(gate, dtype, n);
            for (int i = 0; i < n; ++i) gate[i] *= up[i];
            narrow(gate, out, r * (int64_t)n, dtype, n);
        }
        free(gate);
        free(up);
    }
}

/* x (tokens, heads, dim) half-split layout, rows `stride` apart, heads contiguous; cos and
 * sin (tokens, dim / 2) contiguous; out (tokens, heads, dim) contiguous. */
void rotary(const void *x, int64_t stride, const void *cos, const void *sin, void *out,
            int64_t tokens, int heads, int dim, int dtype, int num_threads) {
    const int half = dim / 2, width = heads * dim;
#pragma omp parallel num_threads(num_threads)
    {
        float *row = malloc(sizeof(float) * (size_t)width);
        float *res = malloc(sizeof(float) * (size_t)width);
        float *cs = malloc(sizeof(float) * (size_t)dim), *tmp = malloc(sizeof(float) * (size_t)dim);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tokens; ++t) {
            if (!row || !res || !cs || !tmp) continue;
            widen(x, t * stride, dtype, width, row);
            widen(cos, t * half, dtype, half, cs);
            widen(sin, t * half, dtype, half, cs + half);
            const float *c = cs, *s = cs + half;
            for (int h = 0; h < heads; ++h) {
                const float *x1 = row + h * dim, *x2 = x1 + half;
                float *o1 = res + h * dim, *o2 = o1 + half;
                /* Each product rounds, then their sum rounds (torch's three ops). */
                for (int i = 0; i < half; ++i) {
                    o1[i] = x1[i] * c[i];
                    tmp[i] = x2[i] * s[i];
                    o2[i] = x2[i] * c[i];
                    tmp[half + i] = x1[i] * s[i];
                }
                round_to(o1, dtype, dim); /* o1 and o2 are adjacent: one call rounds both */
                round_to(tmp, dtype, dim);
                for (int i = 0; i < half; ++i) {
                    o1[i] -= tmp[i];
                    o2[i] += tmp[half + i];
                }
            }
            narrow(res, out, t * (int64_t)width, dtype, width);
        }
        free(row);
        free(res);
        free(cs);
        free(tmp);
    }
}

/* One e4m3fn byte as float32 (exact): sign, 4 exponent bits (bias 7), 3 mantissa bits;
 * exponent 0 is subnormal (m * 2^-9), 0x7f / 0xff are NaN and there are no infinities. */
static inline float e4m3_value(uint8_t b) {
    const uint32_t sign = (uint32_t)(b & 0x80) << 24, e = (b >> 3) & 15u, m = b & 7u;
    const uint32_t bits = sign | ((e + 120u) << 23) | (m << 20);
    float normal;
    memcpy(&normal, &bits, sizeof normal);
    const float sub = (float)m * 0.001953125f;
    const float value = e ? normal : (sign ? -sub : sub);
    return (e == 15u && m == 7u) ? NAN : value;
}

/* out (rows, cols) = e4m3 q (rows, cols) times its scale, rounded once to `dtype`, as
 * `q.float() * scale` then `.to(dtype)` does. scale: (rows, groups) float32, the group of
 * column c being c / group_size; NULL for a plain conversion. */
void fp8_dequantize(const uint8_t *q, const float *scale, int64_t rows, int cols, int groups,
                    int group_size, void *out, int dtype, int num_threads) {
#pragma omp parallel num_threads(num_threads)
    {
        float *row = malloc(sizeof(float) * (size_t)cols);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            if (!row) continue;
            const uint8_t *src = q + r * (int64_t)cols;
            for (int c = 0; c < cols; ++c) row[c] = e4m3_value(src[c]);
            if (scale) {
                const float *s = scale + r * (int64_t)groups;
                for (int g = 0; g * group_size < cols; ++g) {
                    const int end = (g + 1) * group_size < cols ? (g + 1) * group_size : cols;
                    for (int c = g * group_size; c < end; ++c) row[c] *= s[g];
                }
            }
            narrow(row, out, r * (int64_t)cols, dtype, cols);
        }
        free(row);
    }
}
