/* A measurement, not the engine's kernel: how fast a one-row int8 GEMV over 4-bit weights
 * runs when the weights are stored 16 rows interleaved (each 32-bit lane of a vector one
 * weight row's 4 bytes of x's block), against the numbers bench_quant_stream.py gives the
 * engine's kernel (quant_linear_q8.c, which reads the file's row-major blocks: one row's
 * 32 columns a step, a horizontal reduction and per-row epilogue per tile). The prototype
 * the engine's own interleaved kernel (quant_linear_q8_il.h, timed by bench_quant_stream.py
 * --interleaved) was built from; kept to measure the layout alone on another processor.
 *
 * The arithmetic is the engine's int8 path: x quantized per block of 32 (scale amax / 127,
 * round to nearest even), integer dot products of the codes (0..15, unsigned) with it
 * (VPDPBUSD), then per block y += scale * sx * dot + offset * sum(x). Per 16 weight rows
 * and block of 32 columns the layout holds 4 x 64 bytes of codes (vector s: columns 8s..8s+3
 * in the low nibbles, 8s+4..8s+7 in the high ones) and 64 bytes of float16 scales (16) and
 * offsets (16). The program checks its result against a plain-C reference first.
 * Built for AVX-512 VNNI only; SmolLM2-135M's four layer shapes, 30 layers.
 *
 *     gcc -O3 -march=native -fopenmp scripts/bench_interleaved_q4.c -o /tmp/il
 *     OMP_WAIT_POLICY=active /tmp/il 2        # threads; JSON on stdout
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LAYERS 30

typedef struct {
    int rows, cols, blocks;
    uint8_t *codes; /* [rows / 16][blocks][4][64] */
    uint16_t *dm;   /* [rows / 16][blocks][32]: 16 scales, then 16 offsets */
    uint8_t *plain; /* [rows][cols]: each code, for the reference */
} weight;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static weight make(int rows, int cols) {
    weight w = {rows, cols, cols / 32, NULL, NULL, NULL};
    w.codes = aligned_alloc(64, (size_t)rows * cols / 2);
    w.dm = aligned_alloc(64, (size_t)rows / 16 * w.blocks * 64);
    w.plain = malloc((size_t)rows * cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++) w.plain[i] = (uint8_t)(rand() & 15);
    for (int b = 0; b < rows / 16; b++)
        for (int j = 0; j < w.blocks; j++) {
            uint8_t *c = w.codes + ((size_t)b * w.blocks + j) * 256;
            for (int s = 0; s < 4; s++)
                for (int r = 0; r < 16; r++)
                    for (int t = 0; t < 4; t++) {
                        const uint8_t *row = w.plain + (size_t)(b * 16 + r) * cols + j * 32 + 8 * s;
                        c[s * 64 + r * 4 + t] = (uint8_t)(row[t] | row[4 + t] << 4);
                    }
            uint16_t *h = w.dm + ((size_t)b * w.blocks + j) * 32;
            for (int r = 0; r < 32; r++) /* float16 in [1/1024, 2): sign and exponent fixed */
                h[r] = (uint16_t)(0x1000 + (rand() & 0x2fff));
        }
    return w;
}

typedef struct {
    int8_t q[1536];
    float sx[48], sum[48];
} quantized;

static void quantize(const float *x, int cols, quantized *out) {
    for (int j = 0; j < cols / 32; j++) {
        float amax = 0, sum = 0;
        for (int k = 0; k < 32; k++) {
            amax = fmaxf(amax, fabsf(x[j * 32 + k]));
            sum += x[j * 32 + k];
        }
        const float scale = amax / 127, inverse = amax > 0 ? 127 / amax : 0;
        for (int k = 0; k < 32; k++)
            out->q[j * 32 + k] = (int8_t)nearbyintf(x[j * 32 + k] * inverse);
        out->sx[j] = scale;
        out->sum[j] = sum;
    }
}

static void gemv(const weight *w, const float *x, float *out) {
    quantized xq;
    quantize(x, w->cols, &xq);
    const __m512i low = _mm512_set1_epi8(0x0f);
    const int blocks = w->blocks;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < w->rows / 16; b++) {
        const uint8_t *c = w->codes + (size_t)b * blocks * 256;
        const uint16_t *dm = w->dm + (size_t)b * blocks * 32;
        __m512 acc = _mm512_setzero_ps();
        for (int j = 0; j < blocks; j++) {
            const int32_t *x4 = (const int32_t *)(xq.q + j * 32);
            __m512i dot = _mm512_setzero_si512();
            for (int s = 0; s < 4; s++) {
                const __m512i v = _mm512_load_si512((const void *)(c + j * 256 + s * 64));
                const __m512i lo = _mm512_and_si512(v, low);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                dot = _mm512_dpbusd_epi32(dot, lo, _mm512_set1_epi32(x4[2 * s]));
                dot = _mm512_dpbusd_epi32(dot, hi, _mm512_set1_epi32(x4[2 * s + 1]));
            }
            const __m512i h = _mm512_load_si512((const void *)(dm + j * 32));
            const __m512 scale = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
            const __m512 offset = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
            const __m512 step = _mm512_mul_ps(scale, _mm512_set1_ps(xq.sx[j]));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), step, acc);
            acc = _mm512_fmadd_ps(offset, _mm512_set1_ps(xq.sum[j]), acc);
        }
        _mm512_storeu_ps(out + b * 16, acc);
    }
}

static float half(uint16_t h) { return _cvtsh_ss(h); }

/* The same sum in plain C, from the row-major codes: the largest relative error. */
static double check(const weight *w, const float *x, const float *got) {
    quantized xq;
    quantize(x, w->cols, &xq);
    double worst = 0;
    for (int r = 0; r < w->rows; r++) {
        double y = 0, size = 0;
        for (int j = 0; j < w->blocks; j++) {
            long dot = 0;
            const uint8_t *row = w->plain + (size_t)r * w->cols + j * 32;
            for (int k = 0; k < 32; k++) dot += (long)row[k] * xq.q[j * 32 + k];
            const uint16_t *h = w->dm + ((size_t)(r / 16) * w->blocks + j) * 32;
            const double term = half(h[r % 16]) * (double)xq.sx[j] * dot;
            const double bias = half(h[16 + r % 16]) * (double)xq.sum[j];
            y += term + bias;
            size += fabs(term) + fabs(bias);
        }
        worst = fmax(worst, fabs(got[r] - y) / (size > 0 ? size : 1));
    }
    return worst;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    omp_set_num_threads(threads);
    const int shapes[4][2] = {{960, 576}, {576, 576}, {3072, 576}, {576, 1536}};
    const char *names[4] = {"qkv", "o", "gate_up", "down"};
    static weight layers[LAYERS][4];
    srand(1);
    for (int l = 0; l < LAYERS; l++)
        for (int s = 0; s < 4; s++) layers[l][s] = make(shapes[s][0], shapes[s][1]);
    float x[1536], out[3072];
    for (int i = 0; i < 1536; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
    double worst = 0;
    for (int s = 0; s < 4; s++) {
        gemv(&layers[1][s], x, out);
        worst = fmax(worst, check(&layers[1][s], x, out));
    }
    if (worst > 1e-5) {
        fprintf(stderr, "wrong result: relative error %g\n", worst);
        return 1;
    }
    printf("{\"benchmark\": \"interleaved-q4-gemv\", \"threads\": %d, \"unit\": \"microseconds\", "
           "\"max_relative_error\": %.2g, \"warm_a_call\": {", threads, worst);
    for (int s = 0; s < 4; s++) { /* one layer's weight again and again: in cache */
        double best = 1e9;
        for (int r = 0; r < 300; r++) {
            const double t = now();
            gemv(&layers[0][s], x, out);
            best = fmin(best, now() - t);
        }
        printf("%s\"%s\": %.1f", s ? ", " : "", names[s], best * 1e6);
    }
    double bytes = 0, best = 1e9;
    for (int s = 0; s < 4; s++) /* 4-bit codes, a scale and an offset a block */
        bytes += (double)LAYERS * shapes[s][0] * shapes[s][1] * (0.5 + 4.0 / 32);
    for (int r = 0; r < 15; r++) { /* 30 layers' distinct weights in a row: from memory */
        const double t = now();
        for (int l = 0; l < LAYERS; l++)
            for (int s = 0; s < 4; s++) gemv(&layers[l][s], x, out);
        best = fmin(best, now() - t);
    }
    printf("}, \"layers\": %.1f, \"layers_bytes\": %.0f, \"layers_gb_s\": %.1f}\n",
           best * 1e6, bytes, bytes / best / 1e9);
    return 0;
}
