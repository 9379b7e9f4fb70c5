/* JSON validation and typed values for the columnar scanner: strings (SSE2), numbers, values
 * skipped and checked. Part of _kscan.c (included once, there). */
#ifndef TRACEKIT_KSCAN_JSON_H
#define TRACEKIT_KSCAN_JSON_H

typedef unsigned char uc;

#define MAX_DEPTH 64
#define N_INT_ARGS 8
#define N_STR_ARGS 3

/* ------------------------------------------------------------------------------------------ */
/* Validation                                                                                 */

static inline const uc *ws(const uc *s, const uc *e) {
    while (s < e && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++;
    return s;
}

/* After a member's or an element's value: 1 with *sp past the ',' and its spaces (another one
 * follows), 0 with *sp past `close` (the object or array ends), -1 at anything else or at the
 * end of the input. */
static inline int after_value(const uc **sp, const uc *e, uc close) {
    const uc *s = ws(*sp, e);
    if (s >= e) return -1;
    if (*s == ',') {
        *sp = ws(s + 1, e);
        return 1;
    }
    if (*s != close) return -1;
    *sp = s + 1;
    return 0;
}

static int hexval(uc c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A UTF-8 sequence starting at s (s[0] >= 0x80): its length, or 0 when invalid (overlong,
 * surrogate, beyond U+10FFFF, truncated). */
static int utf8_len(const uc *s, const uc *e) {
    uc c = s[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (e - s >= 2 && (s[1] & 0xC0) == 0x80) return 2;
        return 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (e - s < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (e - s < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

/* s points at the opening quote. Returns the position after the closing quote, or NULL.
 * *escaped is set when the string holds a backslash escape. */
static inline uint64_t load8(const uc *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Nonzero when one of the 8 bytes of w is '"', '\\', below 0x20 or from 0x80: the bytes a string
 * scan must look at one by one (SWAR; false positives only make it look). */
static inline uint64_t special8(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return ((q - ONES) & ~q) | ((b - ONES) & ~b) | (w - ONES * 0x20) | w;
}

/* The first byte in [s, e) that a string scan must look at ('"', '\\', below 0x20, from 0x80),
 * or e. SSE2 16 bytes at a time where there is SSE2, else SWAR 8 at a time. */
static inline const uc *find_special(const uc *s, const uc *e) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    const __m128i ctrl = _mm_set1_epi8(0x1F);
    while (e - s >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)s);
        __m128i m = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash));
        m = _mm_or_si128(m, _mm_cmpeq_epi8(_mm_min_epu8(v, ctrl), v)); /* v <= 0x1F */
        int mask = _mm_movemask_epi8(m) | _mm_movemask_epi8(v);          /* | v >= 0x80 */
        if (mask) return s + __builtin_ctz((unsigned)mask);
        s += 16;
    }
#endif
    while (e - s >= 8 && !(special8(load8(s)) & HIGHS)) s += 8;
    while (s < e && *s >= 0x20 && *s < 0x80 && *s != '"' && *s != '\\') s++;
    return s;
}

static const uc *scan_string(const uc *s, const uc *e, int *escaped) {
    s++;
    *escaped = 0;
    for (;;) {
        s = find_special(s, e);
        if (s >= e) return NULL;
        uc c = *s;
        if (c == '"') return s + 1;
        if (c < 0x20) return NULL;
        if (c == '\\') {
            *escaped = 1;
            if (s + 1 >= e) return NULL;
            uc d = s[1];
            if (d == 'u') {
                if (s + 6 > e) return NULL;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(s[k]);
                    if (h < 0) return NULL;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return NULL; /* surrogates: the other reader's */
                s += 6;
            } else if (d == '"' || d == '\\' || d == '/' || d == 'b' || d == 'f' || d == 'n' ||
                       d == 'r' || d == 't') {
                s += 2;
            } else {
                return NULL;
            }
            continue;
        }
        int n = utf8_len(s, e); /* c >= 0x80 */
        if (!n) return NULL;
        s += n;
    }
}

/* A JSON number. Returns the end or NULL. */
typedef struct {
    int is_int;      /* no fraction, no exponent */
    int ndigits;     /* digits of the integer part */
    int nfrac;       /* digits of the fraction */
    int has_exp;
    int neg;
    uint64_t mant;   /* integer and fraction digits as one integer, when ndigits + nfrac <= 19 */
} NumInfo;

static const uc *scan_number(const uc *s, const uc *e, NumInfo *ni) {
    ni->neg = 0;
    ni->ndigits = ni->nfrac = ni->has_exp = 0;
    ni->mant = 0;
    if (s < e && *s == '-') {
        ni->neg = 1;
        s++;
    }
    if (s >= e) return NULL;
    if (*s == '0') {
        s++;
        ni->ndigits = 1;
    } else if (*s >= '1' && *s <= '9') {
        while (s < e && *s >= '0' && *s <= '9') {
            if (ni->ndigits < 19) ni->mant = ni->mant * 10 + (uint64_t)(*s - '0');
            ni->ndigits++;
            s++;
        }
    } else {
        return NULL;
    }
    if (s < e && *s == '.') {
        s++;
        const uc *f = s;
        while (s < e && *s >= '0' && *s <= '9') {
            if (ni->ndigits + ni->nfrac < 19) ni->mant = ni->mant * 10 + (uint64_t)(*s - '0');
            ni->nfrac++;
            s++;
        }
        if (s == f) return NULL;
    }
    if (s < e && (*s == 'e' || *s == 'E')) {
        ni->has_exp = 1;
        s++;
        if (s < e && (*s == '+' || *s == '-')) s++;
        const uc *x = s;
        while (s < e && *s >= '0' && *s <= '9') s++;
        if (s == x || s - x > 4) return NULL; /* no digits; or an exponent far past a double's */
    }
    ni->is_int = !ni->nfrac && !ni->has_exp;
    if (ni->ndigits + ni->nfrac > 400) return NULL;
    return s;
}

static const uc *skip_value(const uc *s, const uc *e, int depth);

static const uc *skip_container(const uc *s, const uc *e, int depth) {
    uc close = (*s == '{') ? '}' : ']';
    int obj = (*s == '{');
    if (depth >= MAX_DEPTH) return NULL;
    s = ws(s + 1, e);
    if (s < e && *s == close) return s + 1;
    for (;;) {
        int esc;
        if (obj) {
            if (s >= e || *s != '"') return NULL;
            s = scan_string(s, e, &esc);
            if (!s) return NULL;
            s = ws(s, e);
            if (s >= e || *s != ':') return NULL;
            s = ws(s + 1, e);
        }
        s = skip_value(s, e, depth + 1);
        if (!s) return NULL;
        int next = after_value(&s, e, close);
        if (next < 0) return NULL;
        if (!next) return s;
    }
}

static const uc *skip_value(const uc *s, const uc *e, int depth) {
    if (s >= e) return NULL;
    int esc;
    NumInfo ni;
    switch (*s) {
    case '"':
        return scan_string(s, e, &esc);
    case '{':
    case '[':
        return skip_container(s, e, depth);
    case 't':
        return (e - s >= 4 && memcmp(s, "true", 4) == 0) ? s + 4 : NULL;
    case 'f':
        return (e - s >= 5 && memcmp(s, "false", 5) == 0) ? s + 5 : NULL;
    case 'n':
        return (e - s >= 4 && memcmp(s, "null", 4) == 0) ? s + 4 : NULL;
    default:
        return scan_number(s, e, &ni);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Typed values                                                                               */

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#define TWO53 9007199254740992ULL

/* kind: 0 null, 1 int, 2 float. Returns the end, or NULL to decline. `max_int` bounds ints. */
static const uc *typed_number(const uc *s, const uc *e, int *kind, int64_t *iv, double *dv,
                              uint64_t max_int) {
    if (s < e && *s == 'n') {
        if (e - s >= 4 && memcmp(s, "null", 4) == 0) {
            *kind = 0;
            return s + 4;
        }
        return NULL;
    }
    if (s >= e || !(*s == '-' || (*s >= '0' && *s <= '9'))) return NULL;
    NumInfo ni;
    const uc *end = scan_number(s, e, &ni);
    if (!end) return NULL;
    if (ni.is_int) {
        if (ni.ndigits > 18 || ni.mant >= max_int) return NULL;
        *kind = 1;
        *iv = ni.neg ? -(int64_t)ni.mant : (int64_t)ni.mant;
        return end;
    }
    *kind = 2;
    if (!ni.has_exp && ni.ndigits + ni.nfrac <= 15 && ni.nfrac <= 22) {
        double d = (double)ni.mant / POW10[ni.nfrac]; /* exact operands: correctly rounded */
        *dv = ni.neg ? -d : d;
        return end;
    }
    char buf[512];
    Py_ssize_t len = end - s;
    if (len >= (Py_ssize_t)sizeof(buf)) return NULL;
    memcpy(buf, s, (size_t)len);
    buf[len] = 0;
    char *stop;
    double d = strtod(buf, &stop);
    if (stop != buf + len || !(d - d == 0.0)) return NULL; /* not all read, or inf */
    *dv = d;
    return end;
}

#endif
