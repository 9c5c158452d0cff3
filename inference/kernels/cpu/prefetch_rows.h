/* Software prefetch of a weight's rows ahead of the group-quantized matmuls: the int8 kernel
 * at any number of rows of x, the exact kernel at one (a decode step at batch 1).
 *
 * A decode step reads each weight once, about 100 MB for the demo model, and the
 * one-row kernels do little arithmetic a byte: on a Zen 4 EPYC the hardware prefetchers
 * alone kept the 30 layers and the vocabulary streaming at about 17 GB/s of the 34 GB/s
 * the machine reads; asking for the rows about 2 KiB ahead took them to about 31 GB/s
 * (docs/engine.md, "Zen 4: prefetching the weight rows"). A prefetch is a hint: it never faults,
 * and rows past the end are not asked for.
 *
 * Included by the kernels' sources (build.py's cache key hashes it with them).
 */
#ifndef PREFETCH_ROWS_H
#define PREFETCH_ROWS_H

#include <stdint.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

/* How far ahead of the rows being multiplied the codes are asked for. */
enum { PREFETCH_BYTES = 2048 };

/* The rows ahead that PREFETCH_BYTES of codes make (at least one). */
static inline int64_t prefetch_distance(int64_t row_bytes) {
    return row_bytes >= PREFETCH_BYTES ? 1 : PREFETCH_BYTES / row_bytes;
}

/* Ask for rows [first, first + count) of an array of `rows` rows of `row_bytes` bytes. */
static inline void prefetch_rows(const void *base, int64_t row_bytes, int64_t first, int64_t count,
                                 int64_t rows) {
#if defined(__SSE__)
    if (first >= rows) return;
    if (first + count > rows) count = rows - first;
    const uintptr_t start = (uintptr_t)base + (uintptr_t)(first * row_bytes);
    const uintptr_t end = start + (uintptr_t)(count * row_bytes);
    for (uintptr_t line = start & ~(uintptr_t)63; line < end; line += 64)
        _mm_prefetch((const char *)line, _MM_HINT_T0);
#else
    (void)base, (void)row_bytes, (void)first, (void)count, (void)rows;
#endif
}

#endif
