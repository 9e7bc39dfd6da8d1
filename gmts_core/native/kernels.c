/* GMTS Explorer's CPU kernels, compiled by gmts_core/native/build.py (`gmts native build`).
 *
 * gmts_row_sums      the sums the token statistics are made of (gmts_core/stats/softmax_terms.py),
 *                    from two reads of each float32 or bfloat16 logit and no writes: a top-k pass
 *                    (block maxima, then the few blocks that can hold a top-k value), then one
 *                    exponentiation pass over u = (z - r) / tau accumulated in double.
 * gmts_attend_one    one query per (row, key/value head) over that entry's cached keys and values
 *                    (the sampler's decoding step): scores, softmax, weighted sum, in float32.
 * gmts_rms_norm      RMSNorm of float32 rows (the fused decoding step's norms).
 * gmts_silu_mul      silu(gate) * up from the gated MLP's gate-and-up projection.
 * gmts_rotary_attend one decoding step's attention: keys rotated and written with the values into
 *                    the cache at one slot, then each rotated query over its group's keys (each
 *                    row from its own first slot, for prompts of different lengths).
 * gmts_categorical   one categorical draw per row as torch.multinomial(p, 1) makes it on CPU,
 *                    from the same uniforms, with the rows it cannot decide flagged.
 * gmts_linear_rows   x @ w^T (+ bias) (+ y) for a few rows of x: a decoding step's projections and
 *                    LM head, each weight read from memory once per step (AVX2 with FMA only).
 *
 * Plain C99, no Python or torch headers: the caller passes data pointers and strides.
 * Not built with -ffast-math: NaN and infinities propagate as in torch, so the callers'
 * finiteness checks still see them; built with -ffp-contract=off: no a * b + c becomes an FMA,
 * whose single rounding would give other last bits on CPUs with FMA than on those without.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#define BLOCK 128
#define MAX_K 128
#define MAX_D 512 /* head width gmts_attend_one takes */

/* exp(x) in float32 for the vectorizer: Cody-Waite range reduction and the Cephes polynomial
 * (about 1 ulp); x < -104 gives 0, as expf does in float32 (the result would be below the
 * smallest subnormal), and NaN stays NaN. The power of two is applied in two halves, so a
 * subnormal result is formed without an overflowing exponent field. */
static inline float exp_f(float x) {
    const float lo = -104.0f;
    float xc = x >= lo ? x : lo; /* NaN too: an int conversion of NaN below would be undefined */
    xc = xc > 88.0f ? 88.0f : xc;
    float n = __builtin_rintf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float r2 = r * r;
    float poly = 1.9875691500e-4f;
    poly = poly * r + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    poly = poly * r2 + r + 1.0f;
    int32_t ni = (int32_t)n;
    int32_t half = ni / 2;
    union { int32_t i; float f; } s1, s2;
    s1.i = (half + 127) << 23;
    s2.i = (ni - half + 127) << 23;
    float out = poly * s1.f * s2.f;
    out = x < lo ? 0.0f : out;
    out = x > 88.7228f ? INFINITY : out;
    return x != x ? x : out;
}

static inline float bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = ((uint32_t)h) << 16;
    return v.f;
}

/* one row's values [lo, hi) as float32 into buf (bfloat16 converted; float32 copied) */
static inline const float *row_block(const void *row, int dtype, int64_t lo, int64_t n,
                                     float *buf) {
    if (dtype == 0) return (const float *)row + lo;
    const uint16_t *h = (const uint16_t *)row + lo;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) buf[i] = bf16_to_f32(h[i]);
    return buf;
}

/* insert (value, id) into the descending list of count entries (capacity k); ties keep the
 * earlier (lower) id first */
static inline void insert_top(float *vals, int64_t *ids, int *count, int k, float x, int64_t id) {
    int pos = *count < k ? *count : k - 1;
    if (*count == k && !(x > vals[k - 1])) return;
    while (pos > 0 && x > vals[pos - 1]) {
        vals[pos] = vals[pos - 1];
        ids[pos] = ids[pos - 1];
        pos--;
    }
    vals[pos] = x;
    ids[pos] = id;
    if (*count < k) (*count)++;
}

static void top_k_row(const void *row, int dtype, int64_t vocab, int k, float *vals,
                      int64_t *ids) {
    float buf[BLOCK];
    int count = 0;
    for (int i = 0; i < k; i++) {
        vals[i] = -INFINITY;
        ids[i] = 0;
    }
    for (int64_t lo = 0; lo < vocab; lo += BLOCK) {
        int64_t n = vocab - lo < BLOCK ? vocab - lo : BLOCK;
        const float *z = row_block(row, dtype, lo, n, buf);
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int64_t i = 0; i < n; i++) m = z[i] > m ? z[i] : m;
        if (count == k && !(m > vals[k - 1])) continue;
        for (int64_t i = 0; i < n; i++) {
            if (count < k || z[i] > vals[k - 1]) insert_top(vals, ids, &count, k, z[i], lo + i);
        }
    }
    /* rows with NaN or fewer finite values than k: fill the list with the first ids not in
     * it (their values as they are), so every id is valid */
    for (int64_t id = 0; count < k && id < vocab; id++) {
        int seen = 0;
        for (int i = 0; i < count; i++) seen |= ids[i] == id;
        if (seen) continue;
        float b;
        vals[count] = *row_block(row, dtype, id, 1, &b);
        ids[count++] = id;
    }
}

/* sums over [lo, hi) of e = exp(u), e^2 and e u with u = (z - ref) / tau (no division at
 * tau = 1). With guard, a -inf logit (e = 0) adds 0 to the sum of e u instead of
 * 0 * -inf = NaN; the guard costs the loop its speed, so rows are summed without it first and
 * again with it only where that gave NaN from -inf logits alone. */
static void sum_range(const void *row, int dtype, int64_t lo, int64_t hi, float ref, float tau,
                      int guard, double *s, double *q, double *p) {
    float buf[BLOCK];
    double ss = 0.0, qq = 0.0, pp = 0.0;
    for (int64_t b = lo; b < hi; b += BLOCK) {
        int64_t n = hi - b < BLOCK ? hi - b : BLOCK;
        const float *z = row_block(row, dtype, b, n, buf);
        if (guard) {
            for (int64_t i = 0; i < n; i++) {
                float u = tau == 1.0f ? z[i] - ref : (z[i] - ref) / tau;
                double ed = (double)exp_f(u);
                ss += ed;
                qq += ed * ed;
                pp += ed > 0.0 ? ed * (double)u : 0.0;
            }
        } else if (tau == 1.0f) {
#pragma omp simd reduction(+ : ss, qq, pp)
            for (int64_t i = 0; i < n; i++) {
                float u = z[i] - ref;
                double ed = (double)exp_f(u);
                ss += ed;
                qq += ed * ed;
                pp += ed * (double)u;
            }
        } else {
#pragma omp simd reduction(+ : ss, qq, pp)
            for (int64_t i = 0; i < n; i++) {
                float u = (z[i] - ref) / tau;
                double ed = (double)exp_f(u);
                ss += ed;
                qq += ed * ed;
                pp += ed * (double)u;
            }
        }
    }
    *s += ss;
    *q += qq;
    *p += pp;
}

/* the three sums of one row over the tokens other than a and y (first = min, second = max) */
static void row_rest(const void *row, int dtype, int64_t vocab, int64_t a, int64_t y, float ref,
                     float tau, int guard, double *s, double *q, double *p) {
    int64_t first = a < y ? a : y, second = a < y ? y : a;
    *s = *q = *p = 0.0;
    sum_range(row, dtype, 0, first, ref, tau, guard, s, q, p);
    if (second != first) sum_range(row, dtype, first + 1, second, ref, tau, guard, s, q, p);
    sum_range(row, dtype, second + 1, vocab, ref, tau, guard, s, q, p);
}

/* Rows [row0, row1) of logits (row r at base + r * row_stride elements, each vocab long and
 * contiguous; dtype 0 = float32, 1 = bfloat16). Per row: the top k logits and their ids (most
 * probable first, ties by lower id), the target's logit, and over the tokens other than the
 * top one and the target the sums s = sum e, q = sum e^2, p = sum e u, where
 * u = (z - r) / tau and r is the runner-up's logit (the second entry of the top list; k >= 2),
 * or the top logit where the runner-up's is -inf.
 * Returns 0, or 1 when an argument is out of range (nothing written then). */
int gmts_row_sums(const void *base, int dtype, int64_t row0, int64_t row1, int64_t vocab,
                  int64_t row_stride, const int64_t *targets, float tau, int k, float *top_vals,
                  int64_t *top_ids, float *target_logit, double *s, double *q, double *p) {
    if (k < 2 || k > MAX_K || k > vocab || (dtype != 0 && dtype != 1)) return 1;
    for (int64_t r = row0; r < row1; r++)
        if (targets[r] < 0 || targets[r] >= vocab) return 1;
    size_t width = dtype == 0 ? 4 : 2;
    for (int64_t r = row0; r < row1; r++) {
        const char *row = (const char *)base + (size_t)r * (size_t)row_stride * width;
        float *vals = top_vals + r * k;
        int64_t *ids = top_ids + r * k;
        top_k_row(row, dtype, vocab, k, vals, ids);
        float b;
        target_logit[r] = *row_block(row, dtype, targets[r], 1, &b);
        /* the runner-up, or the top logit where it is the only finite one (then every other
         * e is 0 and the row's sums are 0: exact statistics, not (-inf) - (-inf) = NaN) */
        float ref = vals[1] > -INFINITY ? vals[1] : vals[0];
        double ss, qq, pp;
        row_rest(row, dtype, vocab, ids[0], targets[r], ref, tau, 0, &ss, &qq, &pp);
        if (isnan(pp) && !isnan(ss)) /* -inf logits, no NaN ones: the guarded sum */
            row_rest(row, dtype, vocab, ids[0], targets[r], ref, tau, 1, &ss, &qq, &pp);
        s[r] = ss;
        q[r] = qq;
        p[r] = pp;
    }
    return 0;
}

/* one (entry, head): scores over t keys, softmax, weighted sum of the values into o (accumulated
 * in a local array). Each dot product is summed as a tree, each level one vector add: the
 * compiler may not reorder a float sum itself (no -ffast-math), and a serial sum of d products
 * costs d dependent additions. */
static inline void attend_entry(const float *restrict qv, const float *restrict k,
                                const float *restrict v, int64_t d, int64_t t,
                                float *restrict scores, float *restrict o) {
    int64_t j;
    for (j = 0; j < t; j++) {
        float prod[MAX_D];
        const float *kj = k + j * d;
#pragma omp simd
        for (int64_t c = 0; c < d; c++) prod[c] = qv[c] * kj[c];
        int64_t width = d;
        while (width > 1 && width % 2 == 0) {
            width /= 2;
#pragma omp simd
            for (int64_t c = 0; c < width; c++) prod[c] += prod[c + width];
        }
        float acc = prod[0];
        for (int64_t c = 1; c < width; c++) acc += prod[c];
        scores[j] = acc;
    }
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (j = 0; j < t; j++) m = scores[j] > m ? scores[j] : m;
    float total = 0.0f;
#pragma omp simd reduction(+ : total)
    for (j = 0; j < t; j++) {
        float e = exp_f(scores[j] - m);
        scores[j] = e;
        total += e;
    }
    float acc[MAX_D];
    for (int64_t c = 0; c < d; c++) acc[c] = 0.0f;
    for (j = 0; j < t; j++) {
        float w = scores[j];
#pragma omp simd
        for (int64_t c = 0; c < d; c++) acc[c] += w * v[j * d + c];
    }
    float inv = 1.0f / total;
    for (int64_t c = 0; c < d; c++) o[c] = acc[c] * inv;
}

/* attend_entry with the common head widths as constants (loops of a fixed length, unrolled and
 * vectorized by the compiler) */
static void attend(const float *qv, const float *k, const float *v, int64_t d, int64_t t,
                   float *scores, float *o) {
    switch (d) {
    case 16: attend_entry(qv, k, v, 16, t, scores, o); break;
    case 32: attend_entry(qv, k, v, 32, t, scores, o); break;
    case 64: attend_entry(qv, k, v, 64, t, scores, o); break;
    case 128: attend_entry(qv, k, v, 128, t, scores, o); break;
    default: attend_entry(qv, k, v, d, t, scores, o);
    }
}

/* One query per entry: entries [0, n) of q (n, g, d) each attend over t cached keys and values
 * of their own (entry i's key j at keys + i * stride + j * d; the same for values), the
 * attention scaling already in q; out (n, g, d). Returns 0, or 1 when t or d exceeds the
 * buffers (the caller then uses its own path). */
int gmts_attend_one(const float *q, const float *keys, const float *values, int64_t n, int64_t g,
                    int64_t d, int64_t t, int64_t stride, float *out) {
    enum { MAX_T = 8192 };
    float scores[MAX_T];
    if (t > MAX_T || t < 1 || d > MAX_D || d < 1) return 1;
    for (int64_t i = 0; i < n; i++) {
        const float *k = keys + i * stride, *v = values + i * stride;
        for (int64_t h = 0; h < g; h++) {
            const float *qv = q + (i * g + h) * d;
            float *o = out + (i * g + h) * d;
            attend(qv, k, v, d, t, scores, o);
        }
    }
    return 0;
}

/* RMSNorm of n rows of d values: out = w * x / sqrt(mean(x^2) + eps), in float32 (the norm of
 * Llama and Qwen2 for float32 models); w may be NULL (no weight). */
void gmts_rms_norm(const float *x, const float *w, int64_t n, int64_t d, float eps, float *out) {
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d;
        float *oi = out + i * d;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < d; c++) ss += xi[c] * xi[c];
        float scale = 1.0f / sqrtf(ss / (float)d + eps);
        if (w == 0) {
#pragma omp simd
            for (int64_t c = 0; c < d; c++) oi[c] = xi[c] * scale;
        } else {
#pragma omp simd
            for (int64_t c = 0; c < d; c++) oi[c] = w[c] * (xi[c] * scale);
        }
    }
}

/* The gated MLP's activation: gate_up (n, 2 * m) holds the gate then the up projection of each
 * row; out (n, m) = silu(gate) * up with silu(x) = x / (1 + exp(-x)). */
void gmts_silu_mul(const float *gate_up, int64_t n, int64_t m, float *out) {
    for (int64_t i = 0; i < n; i++) {
        const float *g = gate_up + i * 2 * m, *u = g + m;
        float *o = out + i * m;
#pragma omp simd
        for (int64_t c = 0; c < m; c++) {
            float x = g[c];
            o[c] = x / (1.0f + exp_f(-x)) * u[c];
        }
    }
}

/* x rotated by the rotary embedding at one position: x cos + rotate_half(x) sin, with
 * rotate_half(x) = (-x[h:], x[:h]) and h = d / 2, times scale */
static inline void rotate(const float *restrict x, const float *restrict cos_t,
                          const float *restrict sin_t, int64_t d, float scale,
                          float *restrict out) {
    int64_t h = d / 2;
#pragma omp simd
    for (int64_t c = 0; c < h; c++) out[c] = (x[c] * cos_t[c] - x[c + h] * sin_t[c]) * scale;
#pragma omp simd
    for (int64_t c = h; c < d; c++) out[c] = (x[c] * cos_t[c] + x[c - h] * sin_t[c]) * scale;
}

/* One decoding step's attention for n rows from their projections qkv (n, (hq + 2 kv) d):
 * each key/value head's key rotated and written with the value at slot pos of the cache
 * buffers (n, kv, length, d), then each query head (rotated, times scaling) attends over its
 * row's filled slots of its group's head (hq / kv query heads per group); out (n, hq * d).
 * cos_t and sin_t are the rotary tables, position p's row at + p * d. starts is NULL (every row
 * starts at slot 0: slot s holds position s) or each row's first slot (a shorter prompt right-
 * aligned in a batch of longer ones: slot s holds position s - starts[i]); row i's new key and
 * query are rotated at position pos - starts[i] and it attends over slots starts[i]..pos.
 * Returns 0, or 1 when a size or start is out of the buffers' range (nothing is written). */
int gmts_rotary_attend(const float *qkv, int64_t n, int64_t hq, int64_t kv, int64_t d,
                       const float *cos_t, const float *sin_t, float scaling, float *key_buf,
                       float *value_buf, int64_t length, int64_t pos, const int64_t *starts,
                       float *out, int threads) {
    enum { MAX_T = 8192 };
    if (pos + 1 > MAX_T || pos >= length || d > MAX_D || d % 2 || kv < 1 || hq % kv) return 1;
    if (starts != 0)
        for (int64_t i = 0; i < n; i++)
            if (starts[i] < 0 || starts[i] > pos) return 1;
    int64_t g = hq / kv, width = (hq + 2 * kv) * d;
    (void)threads; /* unused where built without OpenMP */
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && n > 1)
    for (int64_t i = 0; i < n; i++) {
        float scores[MAX_T], qrot[MAX_D];
        const float *row = qkv + i * width;
        int64_t first = starts == 0 ? 0 : starts[i];
        const float *cos_i = cos_t + (pos - first) * d, *sin_i = sin_t + (pos - first) * d;
        for (int64_t j = 0; j < kv; j++) {
            float *k = key_buf + (i * kv + j) * length * d;
            float *v = value_buf + (i * kv + j) * length * d;
            rotate(row + (hq + j) * d, cos_i, sin_i, d, 1.0f, k + pos * d);
            memcpy(v + pos * d, row + (hq + kv + j) * d, (size_t)d * sizeof(float));
            for (int64_t h = 0; h < g; h++) {
                int64_t head = j * g + h;
                rotate(row + head * d, cos_i, sin_i, d, scaling, qrot);
                float *o = out + i * hq * d + head * d;
                attend(qrot, k + first * d, v + first * d, d, pos + 1 - first, scores, o);
            }
        }
    }
    return 0;
}

/* log(x) in double for x in (0, 1] (no zero, infinity or NaN), for the vectorizer: x = m 2^e with
 * m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(f), f = (m - 1) / (m + 1), |f| < 0.1716, by its
 * series to f^23 (the next term is below 1e-19 of the sum), plus e log 2. Within a few units of
 * 1e-16 of libm's log. */
static inline double log_unit(double x) {
    union { double d; uint64_t i; } b;
    b.d = x;
    int64_t e = (int64_t)((b.i >> 52) & 0x7ff) - 1023;
    b.i = (b.i & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
    double m = b.d;
    int big = m > 1.4142135623730951;
    m = big ? m * 0.5 : m;
    e = big ? e + 1 : e;
    double f = (m - 1.0) / (m + 1.0), f2 = f * f;
    double s = 1.0 / 23;
    s = s * f2 + 1.0 / 21;
    s = s * f2 + 1.0 / 19;
    s = s * f2 + 1.0 / 17;
    s = s * f2 + 1.0 / 15;
    s = s * f2 + 1.0 / 13;
    s = s * f2 + 1.0 / 11;
    s = s * f2 + 1.0 / 9;
    s = s * f2 + 1.0 / 7;
    s = s * f2 + 1.0 / 5;
    s = s * f2 + 1.0 / 3;
    return (double)e * 0.69314718055994530942 + 2.0 * (f + f * f2 * s);
}

/* One draw per row of n rows of v float32 weights p (contiguous, finite, non-negative): the
 * argmax over j of p_j / q_j with q_j = -log1p(-u_j) rounded to float32, exponential_(1)'s
 * variate from the uniform u_j (u float64 (n, v), from torch.rand), which is how
 * torch.multinomial(p, 1) draws on CPU. q is formed with log_unit(1 - u) (1 - u is exact),
 * which may round to a float one ulp from libm's; that moves a ratio by 2^-22 at most, so a row
 * is decided only when its largest ratio exceeds the second by the factor 1 + margin, and is
 * flagged (uncertain[i] = 1; the caller redraws it with libm) otherwise, or when a u is 0.
 * Only the few ratios that can matter are formed: as u <= -log1p(-u) <= u / (1 - u), a first
 * pass (a multiply and a divide per weight, no logarithm) finds b = max p (1 - u) / u, a lower
 * bound of the largest ratio, and the second computes p / q only where p >= c u, with
 * c = b / ((1 + 2^-16) (1 + margin)). Any other ratio is below p / u (1 + 2^-21) < c (1 + 2^-21)
 * < largest / (1 + margin), the roundings of q and of the division included, so it can neither
 * be the argmax nor come within the margin of it: the draw and the flag are those of all the
 * ratios. That holds while the ratios are finite: where c >= 2^126 (huge weights over small
 * variates, whose float ratios may overflow to inf and tie), every ratio is formed. out: (n,) token ids. Rows are split over ``threads``. */
void gmts_categorical(const float *p, const double *u, int64_t n, int64_t v, float margin,
                      int64_t *out, uint8_t *uncertain, int threads) {
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && n > 1)
    for (int64_t i = 0; i < n; i++) {
        const float *pi = p + i * v;
        const double *ui = u + i * v;
        int zero = 0;
        double bound = 0.0;
#pragma omp simd reduction(max : bound) reduction(| : zero)
        for (int64_t j = 0; j < v; j++) {
            double uj = ui[j];
            zero |= uj == 0.0;
            double low = uj > 0.0 ? (double)pi[j] * (1.0 - uj) / uj : 0.0;
            bound = low > bound ? low : bound;
        }
        double cut = bound / ((1.0 + 0x1p-16) * (1.0 + (double)margin));
        /* ratios from about 2^128 round to inf in float, the largest and a skipped one alike,
         * and tie there: with a cut that high (or an infinite weight), all ratios are formed */
        if (!(cut < 0x1p126)) cut = 0.0;
        int64_t arg = v;
        float best = -INFINITY, second = -INFINITY;
        for (int64_t j = 0; j < v; j++) {
            if (!((double)pi[j] >= cut * ui[j])) continue; /* below the cut (or NaN) */
            double x = ui[j] == 0.0 ? 0.5 : 1.0 - ui[j];
            float q = (float)(-log_unit(x));
            float r = pi[j] / q;
            if (r > best) {
                second = best;
                best = r;
                arg = j;
            } else if (r > second) {
                second = r;
            }
        }
        out[i] = arg < v ? arg : 0;
        uncertain[i] = (uint8_t)(zero || arg == v || !(best > second * (1.0f + margin)));
    }
}

/* y (m, n) = x (m, k) @ w (n, k)^T, plus bias (n) if not NULL, plus y's own values if
 * accumulate: a decoding step's projections, whose few rows (m: the batch's answers) make a
 * matrix product a pass over the weights. Each output is one weight row's dot product with one
 * x row, summed in 8 lanes over k (fused multiply-adds), the lanes then added pairwise, the
 * k % 8 last products added in order, then the bias, then y's value: the same bits whatever m,
 * the tiling or the thread count. The weights are taken in tiles of LIN_COLS rows (contiguous
 * in w), each multiplied by the x rows two at a time from the level-1 cache while the next tile
 * is prefetched, one cache line per step of the inner loop; the tiles are split over threads.
 * Returns 0, or 1 for an empty shape, or 2 where the CPU lacks AVX2 or FMA (nothing written:
 * the caller uses torch's product). The FMAs are explicit intrinsics, not contractions of the
 * compiler: -ffp-contract=off leaves them as they are, and a CPU without them gets return 2. */
#if defined(__AVX2__) && defined(__FMA__)
enum { LIN_ROWS = 2, LIN_COLS = 5 };

static inline float lane_sum(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

int gmts_linear_rows(const float *x, int64_t m, int64_t k, const float *w, int64_t n,
                     const float *bias, float *y, int accumulate, int threads) {
    if (m < 1 || n < 1 || k < 1) return 1;
    int64_t tiles = (n + LIN_COLS - 1) / LIN_COLS, body = k - k % 8;
    int64_t passes = (m + LIN_ROWS - 1) / LIN_ROWS, steps = passes * (body / 8);
    /* cache lines of the next tile to prefetch per inner step, so that all are asked for
     * within the current tile's work */
    int64_t lines = (int64_t)LIN_COLS * k * (int64_t)sizeof(float) / 64 + 1;
    int64_t per_step = steps > 0 ? (lines + steps - 1) / steps : 0;
    (void)threads; /* unused where built without OpenMP */
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && tiles > 1)
    for (int64_t b = 0; b < tiles; b++) {
        int64_t j0 = b * LIN_COLS, cols = n - j0 < LIN_COLS ? n - j0 : LIN_COLS;
        const float *wr[LIN_COLS];
        for (int c = 0; c < LIN_COLS; c++) wr[c] = w + (j0 + (c < cols ? c : 0)) * k;
        const char *next = (const char *)(w + (j0 + cols) * k);
        const char *next_end = (const char *)(w + (j0 + cols + LIN_COLS < n ? j0 + cols + LIN_COLS : n) * k);
        for (int64_t i = 0; i < m; i += LIN_ROWS) {
            int64_t rows = m - i < LIN_ROWS ? m - i : LIN_ROWS;
            const float *x0 = x + i * k, *x1 = x + (i + rows - 1) * k;
            __m256 a0[LIN_COLS], a1[LIN_COLS];
            for (int c = 0; c < LIN_COLS; c++) a0[c] = a1[c] = _mm256_setzero_ps();
            for (int64_t t = 0; t < body; t += 8) {
                for (int64_t p = 0; p < per_step && next < next_end; p++, next += 64)
                    _mm_prefetch(next, _MM_HINT_T0);
                __m256 v0 = _mm256_loadu_ps(x0 + t), v1 = _mm256_loadu_ps(x1 + t);
                for (int c = 0; c < LIN_COLS; c++) {
                    __m256 wv = _mm256_loadu_ps(wr[c] + t);
                    a0[c] = _mm256_fmadd_ps(v0, wv, a0[c]);
                    a1[c] = _mm256_fmadd_ps(v1, wv, a1[c]);
                }
            }
            for (int64_t r = 0; r < rows; r++) {
                const float *xi = r == 0 ? x0 : x1;
                float *yi = y + (i + r) * n + j0;
                for (int64_t c = 0; c < cols; c++) {
                    float s = lane_sum(r == 0 ? a0[c] : a1[c]);
                    for (int64_t t = body; t < k; t++) s += xi[t] * wr[c][t];
                    if (bias) s += bias[j0 + c];
                    yi[c] = accumulate ? yi[c] + s : s;
                }
            }
        }
    }
    return 0;
}
#else
int gmts_linear_rows(const float *x, int64_t m, int64_t k, const float *w, int64_t n,
                     const float *bias, float *y, int accumulate, int threads) {
    (void)x, (void)m, (void)k, (void)w, (void)n, (void)bias, (void)y, (void)accumulate;
    (void)threads;
    return 2;
}
#endif
