/* The first pass of a search at 100k entries: every row's int8 code dotted with an
 * int16 query, summed in int32 (exact: no rounding, the same sums on every CPU).
 *
 * Compiled on first use by halo_weave/memory/scan.py.  On x86-64 the function is built
 * three times (x86-64-v4: AVX-512; v3: AVX2; plain x86-64) and the loader picks the one this CPU
 * runs (GCC's and Clang's target_clones); elsewhere it is built once, for the target.
 * A row of 64 codes is one AVX-512 or two AVX2 loads; the loops have constant bounds
 * for the two widths the index uses, so the compiler unrolls them into multiply-adds.
 */
#include <stdint.h>

#if defined(__x86_64__) && defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
#define HALO_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HALO_CLONES
#endif

/* Row i of the pass is codes row ROW(i): i itself, or rows[i] for a chosen few. */
#define HALO_ROWS(width, ROW)                                          \
    for (int64_t i = 0; i < n; i++) {                                  \
        const int8_t *row = codes + (ROW) * (width);                   \
        int32_t acc = 0;                                               \
        for (int j = 0; j < (width); j++)                              \
            acc += (int32_t)row[j] * (int32_t)query[j];                \
        out[i] = acc;                                                  \
    }

#define HALO_WIDTHS(ROW)                                               \
    if (width == 64) {                                                 \
        HALO_ROWS(64, ROW)                                             \
    } else if (width == 32) {                                          \
        HALO_ROWS(32, ROW)                                             \
    } else {                                                           \
        HALO_ROWS(width, ROW)                                          \
    }

/* out[i] = codes[i] . query for the n rows of codes (n x width, row-major). */
HALO_CLONES void halo_weave_scan(const int8_t *codes, int64_t n, int64_t width,
                                 const int16_t *query, int32_t *out)
{
    HALO_WIDTHS(i)
}

/* out[i] = codes[rows[i]] . query for n row numbers (each below the codes' rows). */
HALO_CLONES void halo_weave_scan_rows(const int8_t *codes, const int64_t *rows, int64_t n,
                                      int64_t width, const int16_t *query, int32_t *out)
{
    HALO_WIDTHS(rows[i])
}

/* The numbers of the rows whose score is at least threshold, ascending, into out (room
 * for n); returns how many.  Branch-free: every row is written, the count moves on
 * only for those kept. */
int64_t halo_weave_at_least(const int32_t *scores, int64_t n, int32_t threshold, int64_t *out)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        out[kept] = i;
        kept += scores[i] >= threshold;
    }
    return kept;
}
