/* The grid discrete Laplace mechanism's CPU release, fused with the Philox words it consumes.

   Bit for bit the NumPy path of fairdp/privacy/_mechanisms.py (_released_on_host): the same
   Philox4x64-10 words (blocks (c, draw, 0, 0) under the config's key, NumPy's layout), the same
   integer arithmetic on them, the same rounding of the input to the grid. One pass: a value's
   three words are computed in registers and never stored, where the NumPy path makes two dozen
   passes over cache-sized pieces.

   Only integer operations and two exact floating-point products (by powers of two) touch a
   value, so no compiler flag can change a result; -ffp-contract=off keeps it that way. */

#include <math.h>
#include <stdint.h>

typedef unsigned __int128 u128;

#define PHILOX_M0 0xD2E7470EE14C6C93ULL
#define PHILOX_M1 0xCA5A826395121157ULL
#define PHILOX_W0 0x9E3779B97F4A7C15ULL
#define PHILOX_W1 0xBB67AE8584CAA73BULL

/* One Philox4x64-10 round of a block held in (x0, x1, x2, x3) under round key (k0, k1). */
#define PHILOX_ROUND(x0, x1, x2, x3, k0, k1)                                                      \
    do {                                                                                          \
        const u128 p0 = (u128)(x0) * PHILOX_M0, p1 = (u128)(x2) * PHILOX_M1;                      \
        const uint64_t hi0 = (uint64_t)(p0 >> 64), lo0 = (uint64_t)p0;                            \
        (x0) = (uint64_t)(p1 >> 64) ^ (x1) ^ (k0);                                                \
        (x1) = (uint64_t)p1;                                                                      \
        (x2) = hi0 ^ (x3) ^ (k1);                                                                 \
        (x3) = lo0;                                                                               \
    } while (0)

/* Philox4x64-10 (fairdp/_philox.py's philox4x64) of the three counters (c, c1, 0, 0),
   (c + 1, c1, 0, 0), (c + 2, c1, 0, 0) under key (k0, k1), into w[0..11]: the 12 words of four
   values. The three blocks are independent chains of ten multiply rounds; written side by side
   the core overlaps their multiplies (29 cycles a block here, against about 50 one at a time). */
static inline void philox_three(uint64_t c, uint64_t c1, uint64_t k0, uint64_t k1, uint64_t *w) {
    uint64_t a0 = c, a1 = c1, a2 = 0, a3 = 0;
    uint64_t b0 = c + 1, b1 = c1, b2 = 0, b3 = 0;
    uint64_t d0 = c + 2, d1 = c1, d2 = 0, d3 = 0;
    for (int r = 0; r < 10; r++) {
        PHILOX_ROUND(a0, a1, a2, a3, k0, k1);
        PHILOX_ROUND(b0, b1, b2, b3, k0, k1);
        PHILOX_ROUND(d0, d1, d2, d3, k0, k1);
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    w[0] = a0; w[1] = a1; w[2] = a2; w[3] = a3;
    w[4] = b0; w[5] = b1; w[6] = b2; w[7] = b3;
    w[8] = d0; w[9] = d1; w[10] = d2; w[11] = d3;
}

typedef struct {
    const uint64_t *v_cumulative; /* V's cumulative counts, ascending */
    int64_t vmax;
    const uint64_t *u_table;      /* the mechanism's packed alias table: threshold << bits | alias */
    int64_t u_bits;
    uint64_t zero;                /* Z = 0 iff the word's top 63 bits are below it */
    int64_t t, bound, clamp;
} tables_t;

/* Z from a value's three words (zero and sign, V, U), as _released_on_host computes it. */
static inline int64_t noise_of(uint64_t wz, uint64_t wv, uint64_t wu, const tables_t *tb) {
    /* V = searchsorted(v_cumulative, wv, right): how many counts wv reaches. The first three
       without a branch (V < 3 for 95% of words), the rest by a scan. */
    int64_t v = (int64_t)(wv >= tb->v_cumulative[0]) + (wv >= tb->v_cumulative[1]) + (wv >= tb->v_cumulative[2]);
    if (__builtin_expect(v == 3, 0))
        while (v < tb->vmax && wv >= tb->v_cumulative[v]) v++;
    const int bits = (int)tb->u_bits;
    const uint64_t bucket = wu >> (64 - bits);
    const uint64_t entry = tb->u_table[bucket];
    const uint64_t low = (UINT64_C(1) << (64 - bits)) - 1;
    /* the selections below are masks, not branches: U's coin, the sign and Z = 0 are random */
    const uint64_t keep = -(uint64_t)((wu & low) < (entry >> bits));
    const uint64_t u = (bucket & keep) | (entry & ((UINT64_C(1) << bits) - 1) & ~keep);
    const int64_t magnitude = v * tb->t + (int64_t)u + 1;
    const int64_t negative = -(int64_t)((wz & 1) == 0);
    const int64_t nonzero = -(int64_t)((wz >> 1) >= tb->zero);
    return ((magnitude ^ negative) - negative) & nonzero;
}

static inline int64_t clip(int64_t m, int64_t lo, int64_t hi) {
    return m < lo ? lo : (m > hi ? hi : m);
}

/* trunc(y) as NumPy's astype(int64) gives it on x86-64 (cvttsd2si): the truncation toward zero
   where it fits, else the "integer indefinite" INT64_MIN (NaN, infinities, out of range). */
static inline int64_t to_int64(double y) {
    return (y >= -9223372036854775808.0 && y < 9223372036854775808.0) ? (int64_t)y : INT64_MIN;
}

#define CHUNK 64 /* values a chunk: its 192 words stay in the first-level cache */

#define RELEASE(NAME, REAL)                                                                        \
void NAME(uint64_t k0, uint64_t k1, uint64_t draw, int64_t first, int64_t n, const REAL *x,      \
          REAL *out, const uint64_t *v_cumulative, int64_t vmax, const uint64_t *u_table,         \
          int64_t u_bits, uint64_t zero, int64_t t, int64_t bound, int64_t clamp, REAL scale_up,  \
          REAL gamma) {                                                                           \
    const tables_t tb = {v_cumulative, vmax, u_table, u_bits, zero, t, bound, clamp};             \
    /* values first.. (first a multiple of 4): four values take three blocks. A chunk's words   \
       are made first, then its values: two loops of independent work (the multiplies' chains,  \
       then the table loads), each overlapped by the core, where one loop interleaving them     \
       waits on each block before its values. */                                                \
    uint64_t counter = (uint64_t)(first / 4) * 3;                                                 \
    uint64_t w[3 * CHUNK];                                                                        \
    for (int64_t i = 0; i < n; i += CHUNK) {                                                      \
        const int64_t end = n - i < CHUNK ? n - i : CHUNK;                                        \
        for (int64_t j = 0; j < end; j += 4, counter += 3)                                        \
            philox_three(counter + 1, draw, k0, k1, w + 3 * j);                                   \
        for (int64_t j = 0; j < end; j++) {                                                       \
            const int64_t z = noise_of(w[3 * j], w[3 * j + 1], w[3 * j + 2], &tb);                \
            const REAL y = x[i + j] * scale_up; /* a power of two: exact, as NumPy computes it */ \
            int64_t m = clip(to_int64((double)y), -bound, bound);                                 \
            m = clip(m + z, -clamp, clamp);                                                       \
            out[i + j] = (REAL)((double)m * (double)gamma);                                       \
        }                                                                                         \
    }                                                                                             \
}

RELEASE(grid_release_f32, float)
RELEASE(grid_release_f64, double)
