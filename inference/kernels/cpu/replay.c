/* Replays a run of recorded kernel calls (inference/kernels/cpu/recording.py) in one call
 * from Python: a decode step's few hundred calls then cost no ctypes conversion and no
 * GIL hand-over each.
 *
 * Each call is the function's address, its kind (which prototype it has, below) and its
 * arguments in order, the float ones in `f` and all others (pointers, integers) in `i`.
 * recording.py's REPLAY_KINDS holds each kind's argument pattern, which a test compares
 * with build.py's SIGNATURES: a kernel whose parameters change must change here too.
 *
 * Returns 0, or 1 + the index of the first call that reported a failure (after which
 * nothing more runs); the layer kernels report none.
 */
#include <stdint.h>

enum { MAX_INTS = 24, MAX_FLOATS = 4 };

typedef struct {
    void *fn;
    int64_t kind;
    int64_t i[MAX_INTS];
    float f[MAX_FLOATS];
} kernel_call;

enum {
    RMS_NORM = 0,
    ADD_RMS_NORM = 1,
    SILU_AND_MUL = 2,
    ROTARY = 3,
    STORE_KV = 4,
    PAGED_DECODE = 5,
    QUANT_LINEAR = 6, /* quant_linear, quant_linear_q8 and quant_linear_q8_il: one prototype */
};

typedef void (*rms_norm_fn)(const void *, int64_t, const void *, void *, int64_t, int, float, int,
                            int);
typedef void (*add_rms_norm_fn)(const void *, int64_t, void *, const void *, void *, int64_t, int,
                                float, int, int);
typedef void (*silu_and_mul_fn)(const void *, int64_t, void *, int64_t, int, int, int);
typedef void (*rotary_fn)(const void *, int64_t, const void *, const void *, void *, int64_t, int,
                          int, int, int);
typedef int (*store_kv_fn)(const void *, int64_t, const void *, int64_t, int, void *, void *, int,
                           const int64_t *, int64_t, int, int64_t, float, float, int);
typedef int (*paged_decode_fn)(const void *, int64_t, void *, int64_t, int, const int64_t *,
                               const void *, const void *, int, const int64_t *, int64_t,
                               const int64_t *, int64_t, int, int, int, int, float, float, float,
                               int64_t, const void *, const float *, int);
typedef int (*quant_linear_fn)(const void *, int64_t, int, int64_t, const uint8_t *,
                               const uint16_t *, const uint16_t *, int64_t, int, int, int, void *,
                               int);

#define P(k) ((void *)(intptr_t)i[k])

int replay_calls(const kernel_call *calls, int64_t count) {
    for (int64_t n = 0; n < count; n++) {
        const kernel_call *c = calls + n;
        const int64_t *i = c->i;
        const float *f = c->f;
        int status = 0;
        switch (c->kind) {
        case RMS_NORM:
            ((rms_norm_fn)c->fn)(P(0), i[1], P(2), P(3), i[4], (int)i[5], f[0], (int)i[6],
                                 (int)i[7]);
            break;
        case ADD_RMS_NORM:
            ((add_rms_norm_fn)c->fn)(P(0), i[1], P(2), P(3), P(4), i[5], (int)i[6], f[0],
                                     (int)i[7], (int)i[8]);
            break;
        case SILU_AND_MUL:
            ((silu_and_mul_fn)c->fn)(P(0), i[1], P(2), i[3], (int)i[4], (int)i[5], (int)i[6]);
            break;
        case ROTARY:
            ((rotary_fn)c->fn)(P(0), i[1], P(2), P(3), P(4), i[5], (int)i[6], (int)i[7],
                               (int)i[8], (int)i[9]);
            break;
        case STORE_KV:
            status = ((store_kv_fn)c->fn)(P(0), i[1], P(2), i[3], (int)i[4], P(5), P(6),
                                          (int)i[7], P(8), i[9], (int)i[10], i[11], f[0], f[1],
                                          (int)i[12]);
            break;
        case PAGED_DECODE:
            status = ((paged_decode_fn)c->fn)(
                P(0), i[1], P(2), i[3], (int)i[4], P(5), P(6), P(7), (int)i[8], P(9), i[10],
                P(11), i[12], (int)i[13], (int)i[14], (int)i[15], (int)i[16], f[0], f[1], f[2],
                i[17], P(18), P(19), (int)i[20]);
            break;
        case QUANT_LINEAR:
            status = ((quant_linear_fn)c->fn)(P(0), i[1], (int)i[2], i[3], P(4), P(5), P(6), i[7],
                                              (int)i[8], (int)i[9], (int)i[10], P(11), (int)i[12]);
            break;
        default:
            status = -1;
        }
        if (status) return (int)(n + 1);
    }
    return 0;
}
