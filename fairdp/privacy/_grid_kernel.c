/* The grid discrete Laplace mechanism's CPU release, fused with the Philox words it consumes.

   Bit for bit the NumPy path of fairdp/privacy/_mechanisms.py (_released_on_host): the same
   Philox4x64-10 words (blocks (c, draw, 0, 0) under the config's key, NumPy's layout), the same
   integer arithmetic on them, the same rounding of the input to the grid. One pass: a value's
   three words are computed in registers and never stored, where the NumPy path makes two dozen
   passes over cache-sized pieces.

   Only integer operations and two exact floating-point products (by powers of two) touch a
   value, so no compiler flag can change a result; -ffp-contract=off keeps it that way.

   Where the CPU has AVX2 (asked at run time, so one build serves every x86-64 machine), the
   release of four values at a time runs on the vector units while the scalar units compute the
   next words: Philox's 64 x 64-bit products keep the scalar multiplier busy, and the release
   done in scalar code competed with them for the same ports. */

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

/* V = searchsorted(v_cumulative, wv, right) continued from v: how many counts wv reaches. */
static inline int64_t v_from(int64_t v, uint64_t wv, const tables_t *tb) {
    while (v < tb->vmax && wv >= tb->v_cumulative[v]) v++;
    return v;
}

/* Z from a value's three words (zero and sign, V, U), as _released_on_host computes it. */
static inline int64_t noise_of(uint64_t wz, uint64_t wv, uint64_t wu, const tables_t *tb) {
    /* the first three of V's counts without a branch (V < 3 for 95% of words), the rest by a scan */
    int64_t v = (int64_t)(wv >= tb->v_cumulative[0]) + (wv >= tb->v_cumulative[1]) + (wv >= tb->v_cumulative[2]);
    if (__builtin_expect(v == 3, 0)) v = v_from(v, wv, tb);
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

/* The grid index of y = x * 2^g: trunc(y) as NumPy's astype(int64) gives it on x86-64
   (cvttsd2si: INT64_MIN for NaN, infinities and values out of range), clamped to [-L, L]. */
static inline int64_t grid_index(double y, int64_t bound) {
    const int64_t m = (y >= -9223372036854775808.0 && y < 9223372036854775808.0) ? (int64_t)y : INT64_MIN;
    return clip(m, -bound, bound);
}

/* The released grid point of one value: its index plus Z, clamped to [-N, N]. */
static inline int64_t released_index(double y, uint64_t wz, uint64_t wv, uint64_t wu, const tables_t *tb) {
    return clip(grid_index(y, tb->bound) + noise_of(wz, wv, wu, tb), -tb->clamp, tb->clamp);
}

#define CHUNK 64 /* values a chunk: its 192 words stay in the first-level cache */

/* The words of values i .. i + n - 1 of a chunk (n rounded up to four), split by role. */
static inline void chunk_words(uint64_t counter, int64_t n, uint64_t draw, uint64_t k0, uint64_t k1,
                               uint64_t *wz, uint64_t *wv, uint64_t *wu) {
    uint64_t w[12];
    for (int64_t j = 0; j < n; j += 4, counter += 3) {
        philox_three(counter + 1, draw, k0, k1, w);
        for (int q = 0; q < 4; q++) {
            wz[j + q] = w[3 * q];
            wv[j + q] = w[3 * q + 1];
            wu[j + q] = w[3 * q + 2];
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))

/* noise_of for four values, on the vector units: 64-bit lanes, unsigned order by flipped sign
   bits, U's bucket by a gather from the alias table. */
AVX2 static inline __m256i noise4(const uint64_t *wz, const uint64_t *wv, const uint64_t *wu,
                                  const tables_t *tb) {
    const __m256i sign = _mm256_set1_epi64x(INT64_MIN), one = _mm256_set1_epi64x(1);
    const __m256i z_words = _mm256_setr_epi64x((int64_t)wz[0], (int64_t)wz[3], (int64_t)wz[6], (int64_t)wz[9]);
    const __m256i u_words = _mm256_setr_epi64x((int64_t)wu[0], (int64_t)wu[3], (int64_t)wu[6], (int64_t)wu[9]);
    const __m256i v_words = _mm256_setr_epi64x((int64_t)wv[0], (int64_t)wv[3], (int64_t)wv[6], (int64_t)wv[9]);
    const __m256i v_flipped = _mm256_xor_si256(v_words, sign);
    __m256i v = _mm256_set1_epi64x(3);  /* 3 less one for each of the first three counts above wv */
    for (int i = 0; i < 3; i++)
        v = _mm256_add_epi64(v, _mm256_cmpgt_epi64(_mm256_set1_epi64x((int64_t)(tb->v_cumulative[i] ^ (uint64_t)INT64_MIN)), v_flipped));
    if (__builtin_expect(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(v, _mm256_set1_epi64x(3)))), 0)) {
        int64_t vs[4];
        _mm256_storeu_si256((__m256i *)vs, v);
        for (int q = 0; q < 4; q++) vs[q] = v_from(vs[q], wv[3 * q], tb);
        v = _mm256_loadu_si256((const __m256i *)vs);
    }
    const int bits = (int)tb->u_bits;
    const __m256i bucket = _mm256_srl_epi64(u_words, _mm_cvtsi32_si128(64 - bits));
    const int sh = 64 - bits;
    const __m256i entry = _mm256_setr_epi64x((int64_t)tb->u_table[wu[0] >> sh], (int64_t)tb->u_table[wu[3] >> sh],
                                             (int64_t)tb->u_table[wu[6] >> sh], (int64_t)tb->u_table[wu[9] >> sh]);
    const __m256i threshold = _mm256_srl_epi64(entry, _mm_cvtsi32_si128(bits));
    const __m256i below = _mm256_and_si256(u_words, _mm256_set1_epi64x((int64_t)((UINT64_C(1) << (64 - bits)) - 1)));
    const __m256i keep = _mm256_cmpgt_epi64(_mm256_xor_si256(threshold, sign), _mm256_xor_si256(below, sign));
    const __m256i alias = _mm256_and_si256(entry, _mm256_set1_epi64x((int64_t)((UINT64_C(1) << bits) - 1)));
    const __m256i u = _mm256_blendv_epi8(alias, bucket, keep);
    const __m256i magnitude = _mm256_add_epi64(_mm256_add_epi64(_mm256_mul_epu32(v, _mm256_set1_epi64x(tb->t)), u), one);
    const __m256i negative = _mm256_cmpeq_epi64(_mm256_and_si256(z_words, one), _mm256_setzero_si256());
    const __m256i z = _mm256_sub_epi64(_mm256_xor_si256(magnitude, negative), negative);
    /* (wz >> 1) and the zero threshold are below 2^63: the signed order is theirs */
    const __m256i is_zero = _mm256_cmpgt_epi64(_mm256_set1_epi64x((int64_t)tb->zero), _mm256_srli_epi64(z_words, 1));
    return _mm256_andnot_si256(is_zero, z);
}

/* The four released indices, as int32 (|o| <= N < 2^24), from grid indices m (int32) and Z. */
AVX2 static inline __m128i released4(__m128i m, __m256i z, const tables_t *tb) {
    const __m256i o = _mm256_add_epi64(_mm256_cvtepi32_epi64(m), z);  /* |o| < 2^25: int32 lanes hold it */
    const __m128i o32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(o, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    const __m128i n = _mm_set1_epi32((int32_t)tb->clamp);
    return _mm_max_epi32(_mm_min_epi32(o32, n), _mm_sub_epi32(_mm_setzero_si128(), n));
}

/* grid_index for four float32 or float64 products y, as int32: clamping to the integer L
   before truncating gives trunc's clamp; where y is NaN or beyond +-2^63, NumPy's INT64_MIN,
   clamped: -L. */
AVX2 static inline __m128i grid_index4_f32(const float *x, float scale_up, int64_t bound) {
    const __m128 y = _mm_mul_ps(_mm_loadu_ps(x), _mm_set1_ps(scale_up));
    const __m128 fits = _mm_and_ps(_mm_cmpge_ps(y, _mm_set1_ps(-0x1p63f)), _mm_cmplt_ps(y, _mm_set1_ps(0x1p63f)));
    const __m128 l = _mm_set1_ps((float)bound);
    const __m128i m = _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(y, _mm_sub_ps(_mm_setzero_ps(), l)), l));
    return _mm_blendv_epi8(_mm_set1_epi32((int32_t)-bound), m, _mm_castps_si128(fits));
}

AVX2 static inline __m128i grid_index4_f64(const double *x, double scale_up, int64_t bound) {
    const __m256d y = _mm256_mul_pd(_mm256_loadu_pd(x), _mm256_set1_pd(scale_up));
    const __m256d fits = _mm256_and_pd(_mm256_cmp_pd(y, _mm256_set1_pd(-0x1p63), _CMP_GE_OQ),
                                       _mm256_cmp_pd(y, _mm256_set1_pd(0x1p63), _CMP_LT_OQ));
    const __m256d l = _mm256_set1_pd((double)bound);
    const __m128i m = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(y, _mm256_sub_pd(_mm256_setzero_pd(), l)), l));
    const __m128i fits32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(fits),
                                                                             _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    return _mm_blendv_epi8(_mm_set1_epi32((int32_t)-bound), m, fits32);
}

/* A chunk's words and release, software-pipelined: the words of the next four values (scalar
   multiplies) are made beside the release of the last four (vector units), so the two overlap
   instead of taking turns. Returns how many values it released (whole fours). */
#define RELEASE_SIMD(NAME, REAL, INDEX4, STORE4)                                                    \
AVX2 static int64_t NAME(uint64_t counter, int64_t n, uint64_t draw, uint64_t k0, uint64_t k1,     \
                         const REAL *x, REAL *out, uint64_t *wz, uint64_t *wv, uint64_t *wu,       \
                         const tables_t *tb, REAL scale_up, REAL gamma) {                          \
    const int64_t whole = n & ~(int64_t)3;                                                         \
    uint64_t w[12];                                                                                \
    for (int64_t j = 0; j < whole; j += 4, counter += 3) {                                         \
        philox_three(counter + 1, draw, k0, k1, w);                                                \
        const __m128i o = released4(INDEX4(x + j, scale_up, tb->bound), noise4(w, w + 1, w + 2, tb), tb); \
        STORE4(out + j, o, gamma);                                                                 \
    }                                                                                              \
    if (whole < n) chunk_words(counter, n - whole, draw, k0, k1, wz + whole, wv + whole, wu + whole); \
    return whole;                                                                                  \
}

AVX2 static inline void store4_f32(float *out, __m128i o, float gamma) {
    _mm_storeu_ps(out, _mm_mul_ps(_mm_cvtepi32_ps(o), _mm_set1_ps(gamma)));  /* exact: |o| < 2^24 */
}

AVX2 static inline void store4_f64(double *out, __m128i o, double gamma) {
    _mm256_storeu_pd(out, _mm256_mul_pd(_mm256_cvtepi32_pd(o), _mm256_set1_pd(gamma)));
}

RELEASE_SIMD(release_simd_f32, float, grid_index4_f32, store4_f32)
RELEASE_SIMD(release_simd_f64, double, grid_index4_f64, store4_f64)

int grid_simd_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
#else
#define release_simd_f32(counter, n, draw, k0, k1, x, out, wz, wv, wu, tb, s, g) 0
#define release_simd_f64(counter, n, draw, k0, k1, x, out, wz, wv, wu, tb, s, g) 0

int grid_simd_supported(void) { return 0; }
#endif

/* The release of n values of one config's row from value `first` on (a multiple of 4) of its
   draw `draw` under key (k0, k1). `simd`: use the vector path (the caller has asked
   grid_simd_supported); it holds for tables whose bound and clamp lie below 2^24, as every
   table fairdp builds does, and the scalar path serves any other. */
#define RELEASE(NAME, REAL, SIMD)                                                                  \
void NAME(uint64_t k0, uint64_t k1, uint64_t draw, int64_t first, int64_t n, const REAL *x,      \
          REAL *out, const uint64_t *v_cumulative, int64_t vmax, const uint64_t *u_table,         \
          int64_t u_bits, uint64_t zero, int64_t t, int64_t bound, int64_t clamp, REAL scale_up,  \
          REAL gamma, int simd) {                                                                 \
    const tables_t tb = {v_cumulative, vmax, u_table, u_bits, zero, t, bound, clamp};             \
    simd = simd && bound < (1 << 24) && clamp < (1 << 24);                                        \
    uint64_t wz[CHUNK], wv[CHUNK], wu[CHUNK];                                                     \
    uint64_t counter = (uint64_t)(first / 4) * 3;                                                 \
    for (int64_t i = 0; i < n; i += CHUNK) {                                                      \
        const int64_t end = n - i < CHUNK ? n - i : CHUNK;                                        \
        int64_t j = 0;                                                                            \
        if (simd)                                                                                 \
            j = SIMD(counter, end, draw, k0, k1, x + i, out + i, wz, wv, wu, &tb, scale_up, gamma); \
        else                                                                                      \
            chunk_words(counter, end, draw, k0, k1, wz, wv, wu);                                  \
        counter += (uint64_t)((end + 3) / 4) * 3;                                                 \
        for (; j < end; j++) {                                                                    \
            const REAL y = x[i + j] * scale_up; /* a power of two: exact, as NumPy computes it */ \
            const int64_t o = released_index((double)y, wz[j], wv[j], wu[j], &tb);                \
            out[i + j] = (REAL)((double)o * (double)gamma);                                       \
        }                                                                                         \
    }                                                                                             \
}

RELEASE(grid_release_f32, float, release_simd_f32)
RELEASE(grid_release_f64, double, release_simd_f64)
