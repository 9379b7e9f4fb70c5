/* Columnar scanner for Kineto `traceEvents` (the native path of `tracekit.store.kineto`).
 *
 * One pass over the JSON bytes of the events array turns a batch of events into column buffers
 * (dictionary codes, numbers, the args text) with no Python object per event. It is strict: it
 * validates every byte it passes (JSON grammar, UTF-8, nesting) and *declines* (returns None)
 * wherever the general msgspec reader (`fallback.py`) could give anything but the typed result
 * it would give here: an escape in a key or in a string kept as a column, a value of another
 * JSON type than the typed `Event`/`Args` structs take, a duplicate key, an integer too long
 * for its column, a lone surrogate. The caller then reads the whole file with that reader, so
 * both paths give identical tables (tests/unit/store/test_store_kineto_native.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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
        s = ws(s, e);
        if (s >= e) return NULL;
        if (*s == ',') {
            s = ws(s + 1, e);
            continue;
        }
        if (*s == close) return s + 1;
        return NULL;
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

/* ------------------------------------------------------------------------------------------ */
/* Interning: strings (spans of the input) -> codes in first-seen order, per batch.           */

typedef struct {
    Py_ssize_t cap, n;
    int32_t *slots; /* code + 1; 0 = empty */
    uint64_t *hashes;
    const uc **ptrs;
    Py_ssize_t *lens;
    PyObject *list;
} Interner;

static int interner_init(Interner *t) {
    t->cap = 1024;
    t->n = 0;
    t->slots = calloc((size_t)t->cap, sizeof(int32_t));
    t->hashes = malloc(sizeof(uint64_t) * (size_t)t->cap);
    t->ptrs = malloc(sizeof(uc *) * (size_t)t->cap);
    t->lens = malloc(sizeof(Py_ssize_t) * (size_t)t->cap);
    t->list = PyList_New(0);
    return (t->slots && t->hashes && t->ptrs && t->lens && t->list) ? 0 : -1;
}

static void interner_free(Interner *t) {
    free(t->slots);
    free(t->hashes);
    free(t->ptrs);
    free(t->lens);
    Py_XDECREF(t->list);
}

static inline uint64_t hash_bytes(const uc *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h = (h ^ load8(p + i)) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    if (i < n) memcpy(&tail, p + i, (size_t)(n - i));
    h = (h ^ tail) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 32);
}

static int interner_grow(Interner *t) {
    Py_ssize_t cap = t->cap * 2;
    int32_t *slots = calloc((size_t)cap, sizeof(int32_t));
    uint64_t *hashes = realloc(t->hashes, sizeof(uint64_t) * (size_t)cap);
    if (hashes) t->hashes = hashes;
    const uc **ptrs = realloc(t->ptrs, sizeof(uc *) * (size_t)cap);
    if (ptrs) t->ptrs = ptrs;
    Py_ssize_t *lens = realloc(t->lens, sizeof(Py_ssize_t) * (size_t)cap);
    if (lens) t->lens = lens;
    if (!slots || !hashes || !ptrs || !lens) {
        free(slots);
        return -1;
    }
    for (Py_ssize_t c = 0; c < t->n; c++) {
        Py_ssize_t i = (Py_ssize_t)(t->hashes[c] & (uint64_t)(cap - 1));
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = (int32_t)(c + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* The code of the string p[0:n] (UTF-8, already validated, no escapes); -2 on error. */
static int32_t intern(Interner *t, const uc *p, Py_ssize_t n) {
    uint64_t h = hash_bytes(p, n);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->slots[i]) {
        int32_t c = t->slots[i] - 1;
        if (t->hashes[c] == h && t->lens[c] == n && memcmp(t->ptrs[c], p, (size_t)n) == 0)
            return c;
        i = (i + 1) & (t->cap - 1);
    }
    if (t->n >= INT32_MAX - 1) {
        PyErr_NoMemory();
        return -2;
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (!s) return -2;
    int r = PyList_Append(t->list, s);
    Py_DECREF(s);
    if (r < 0) return -2;
    int32_t c = (int32_t)t->n++;
    t->slots[i] = c + 1;
    t->hashes[c] = h;
    t->ptrs[c] = p;
    t->lens[c] = n;
    if (t->n * 2 > t->cap && interner_grow(t) < 0) {
        PyErr_NoMemory();
        return -2;
    }
    return c;
}

/* ------------------------------------------------------------------------------------------ */
/* Columns of one batch                                                                       */

static const char *INT_ARG_KEYS[N_INT_ARGS] = {"stream", "correlation", "External id", "device",
                                               "cbid", "In msg nelems", "Group size", "bytes"};
static const int INT_ARG_IS32[N_INT_ARGS] = {0, 0, 0, 0, 1, 0, 1, 0};
static const char *STR_ARG_KEYS[N_STR_ARGS] = {"Collective name", "dtype", "Process Group Name"};

/* The column buffers are bytes objects from the start (filled in place, shrunk to the rows
 * read, handed to Python without a copy). */
enum {
    B_PH, B_CAT, B_NAME, B_TS_KIND, B_DUR_KIND, B_PID_KIND, B_TID_KIND, B_HAS_ARGS, B_TS_I,
    B_DUR_I, B_PID, B_TID, B_TS_F, B_DUR_F, B_ARG_I, B_ARG_OK = B_ARG_I + N_INT_ARGS,
    B_ARG_S = B_ARG_OK + N_INT_ARGS, B_OFFSETS = B_ARG_S + N_STR_ARGS, B_TEXT, N_BUFS
};

typedef struct {
    Py_ssize_t cap, n;
    int32_t *ph, *cat, *name;
    uint8_t *ts_kind, *dur_kind, *pid_kind, *tid_kind, *has_args;
    int64_t *ts_i, *dur_i, *pid, *tid;
    double *ts_f, *dur_f;
    int64_t *arg_i[N_INT_ARGS];
    uint8_t *arg_ok[N_INT_ARGS];
    int32_t *arg_s[N_STR_ARGS];
    int64_t *offsets; /* n + 1 */
    char *text;
    Py_ssize_t text_len, text_cap;
    PyObject *bufs[N_BUFS];
    Py_ssize_t sizes[N_BUFS]; /* bytes a row */
    Interner t_ph, t_cat, t_name, t_pid, t_tid, t_str[N_STR_ARGS];
} Batch;

static void *buf_new(Batch *b, int id, Py_ssize_t size, Py_ssize_t rows) {
    b->sizes[id] = size;
    b->bufs[id] = PyBytes_FromStringAndSize(NULL, size * rows);
    return b->bufs[id] ? PyBytes_AS_STRING(b->bufs[id]) : NULL;
}

/* The buffer `id` shrunk to `len` bytes, handed over (a new reference), or NULL. */
static PyObject *buf_take(Batch *b, int id, Py_ssize_t len) {
    if (_PyBytes_Resize(&b->bufs[id], len) < 0) return NULL;
    PyObject *o = b->bufs[id];
    b->bufs[id] = NULL;
    return o;
}

#define ALLOC(field, id, type) (b->field = buf_new(b, id, sizeof(type), cap)) == NULL

static int batch_init(Batch *b, Py_ssize_t cap) {
    memset(b, 0, sizeof(*b));
    b->cap = cap;
    if (ALLOC(ph, B_PH, int32_t) || ALLOC(cat, B_CAT, int32_t) || ALLOC(name, B_NAME, int32_t) ||
        ALLOC(ts_kind, B_TS_KIND, uint8_t) || ALLOC(dur_kind, B_DUR_KIND, uint8_t) ||
        ALLOC(pid_kind, B_PID_KIND, uint8_t) || ALLOC(tid_kind, B_TID_KIND, uint8_t) ||
        ALLOC(has_args, B_HAS_ARGS, uint8_t) || ALLOC(ts_i, B_TS_I, int64_t) ||
        ALLOC(dur_i, B_DUR_I, int64_t) || ALLOC(pid, B_PID, int64_t) ||
        ALLOC(tid, B_TID, int64_t) || ALLOC(ts_f, B_TS_F, double) ||
        ALLOC(dur_f, B_DUR_F, double))
        return -1;
    for (int k = 0; k < N_INT_ARGS; k++)
        if (ALLOC(arg_i[k], B_ARG_I + k, int64_t) || ALLOC(arg_ok[k], B_ARG_OK + k, uint8_t))
            return -1;
    for (int k = 0; k < N_STR_ARGS; k++)
        if (ALLOC(arg_s[k], B_ARG_S + k, int32_t)) return -1;
    if (!(b->offsets = buf_new(b, B_OFFSETS, 8, cap + 1))) return -1;
    b->text_cap = 1 << 16;
    if (!(b->text = buf_new(b, B_TEXT, 1, b->text_cap))) return -1;
    b->offsets[0] = 0;
    if (interner_init(&b->t_ph) || interner_init(&b->t_cat) || interner_init(&b->t_name) ||
        interner_init(&b->t_pid) || interner_init(&b->t_tid))
        return -1;
    for (int k = 0; k < N_STR_ARGS; k++)
        if (interner_init(&b->t_str[k])) return -1;
    return 0;
}

static void batch_free(Batch *b) {
    for (int i = 0; i < N_BUFS; i++) Py_XDECREF(b->bufs[i]);
    interner_free(&b->t_ph), interner_free(&b->t_cat), interner_free(&b->t_name);
    interner_free(&b->t_pid), interner_free(&b->t_tid);
    for (int k = 0; k < N_STR_ARGS; k++) interner_free(&b->t_str[k]);
}

static int text_append(Batch *b, const uc *p, Py_ssize_t n) {
    if (b->text_len + n + 1 > b->text_cap) {
        Py_ssize_t cap = b->text_cap;
        while (b->text_len + n + 1 > cap) cap *= 2;
        if (_PyBytes_Resize(&b->bufs[B_TEXT], cap) < 0) return -1;
        b->text = PyBytes_AS_STRING(b->bufs[B_TEXT]);
        b->text_cap = cap;
    }
    memcpy(b->text + b->text_len, p, (size_t)n);
    b->text_len += n;
    b->text[b->text_len++] = '\n';
    return 0;
}

/* Status of the parse helpers: OK, DECLINE (the caller returns None), ERR (a Python error). */
enum { OK = 0, DECLINE = 1, ERR = 2 };

static inline int key_is(const uc *k, Py_ssize_t n, const char *lit) {
    return (Py_ssize_t)strlen(lit) == n && memcmp(k, lit, (size_t)n) == 0;
}

/* A string value (no escape) interned, or null (-1) when `nullable`. */
static const uc *string_code(const uc *s, const uc *e, Interner *t, int nullable, int32_t *code,
                             int *status) {
    if (s < e && *s == 'n' && nullable) {
        if (e - s >= 4 && memcmp(s, "null", 4) == 0) {
            *code = -1;
            return s + 4;
        }
        return NULL;
    }
    if (s >= e || *s != '"') return NULL;
    int esc;
    const uc *end = scan_string(s, e, &esc);
    if (!end || esc) return NULL;
    int32_t c = intern(t, s + 1, end - s - 2);
    if (c == -2) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return NULL;
        }
        *status = ERR;
        return NULL;
    }
    *code = c;
    return end;
}

/* pid/tid: an int, a string (interned; kind 3, value = code), or null. */
static const uc *pid_value(const uc *s, const uc *e, Interner *t, uint8_t *kind, int64_t *v,
                          int *status) {
    if (s < e && *s == '"') {
        int32_t c;
        const uc *end = string_code(s, e, t, 0, &c, status);
        if (!end) return NULL;
        *kind = 3;
        *v = c;
        return end;
    }
    int k;
    double d;
    const uc *end = typed_number(s, e, &k, v, &d, (uint64_t)1 << 62);
    if (!end || k == 2) return NULL; /* a float pid: the typed struct takes int | str only */
    *kind = (uint8_t)k;
    if (!k) *v = 0;
    return end;
}

/* The index of a typed args key (ints, then strings), or -1. */
static int arg_key(const uc *key, Py_ssize_t n) {
    static Py_ssize_t lens[N_INT_ARGS + N_STR_ARGS];
    if (!lens[0]) {
        for (int k = 0; k < N_INT_ARGS; k++) lens[k] = (Py_ssize_t)strlen(INT_ARG_KEYS[k]);
        for (int k = 0; k < N_STR_ARGS; k++)
            lens[N_INT_ARGS + k] = (Py_ssize_t)strlen(STR_ARG_KEYS[k]);
    }
    for (int k = 0; k < N_INT_ARGS + N_STR_ARGS; k++) {
        if (lens[k] != n) continue;
        const char *lit = k < N_INT_ARGS ? INT_ARG_KEYS[k] : STR_ARG_KEYS[k - N_INT_ARGS];
        if (memcmp(key, lit, (size_t)n) == 0) return k;
    }
    return -1;
}

/* The args object of a kept event: the typed fields, the rest validated and skipped. */
static const uc *parse_args(const uc *s, const uc *e, Batch *b, Py_ssize_t row, int *status) {
    for (int k = 0; k < N_INT_ARGS; k++) b->arg_ok[k][row] = 0, b->arg_i[k][row] = 0;
    for (int k = 0; k < N_STR_ARGS; k++) b->arg_s[k][row] = -1;
    if (s >= e || *s != '{') return NULL;
    unsigned seen = 0;
    s = ws(s + 1, e);
    if (s < e && *s == '}') return s + 1;
    for (;;) {
        int esc;
        if (s >= e || *s != '"') return NULL;
        const uc *kend = scan_string(s, e, &esc);
        if (!kend || esc) return NULL;
        const uc *key = s + 1;
        Py_ssize_t klen = kend - s - 2;
        s = ws(kend, e);
        if (s >= e || *s != ':') return NULL;
        s = ws(s + 1, e);
        int k = arg_key(key, klen), matched = k >= 0;
        if (matched) {
            if (seen & (1u << k)) return NULL; /* a duplicate key */
            seen |= 1u << k;
        }
        if (matched && k < N_INT_ARGS) {
            int kind;
            int64_t v = 0;
            double d;
            s = typed_number(s, e, &kind, &v, &d, (uint64_t)1 << 63);
            if (!s || kind == 2) return NULL; /* a float: the typed Args take ints only */
            if (kind == 1 && INT_ARG_IS32[k] && (v < INT32_MIN || v > INT32_MAX)) kind = 0;
            b->arg_ok[k][row] = (uint8_t)kind;
            b->arg_i[k][row] = kind ? v : 0;
        } else if (matched) {
            k -= N_INT_ARGS;
            s = string_code(s, e, &b->t_str[k], 1, &b->arg_s[k][row], status);
        }
        if (!matched) s = skip_value(s, e, 2);
        if (!s) return NULL;
        s = ws(s, e);
        if (s >= e) return NULL;
        if (*s == ',') {
            s = ws(s + 1, e);
            continue;
        }
        if (*s == '}') return s + 1;
        return NULL;
    }
}

enum { K_PH, K_CAT, K_NAME, K_TS, K_DUR, K_PID, K_TID, K_ARGS, K_OTHER };

static int event_key(const uc *k, Py_ssize_t n) {
    switch (n) {
    case 2:
        if (k[0] == 'p' && k[1] == 'h') return K_PH;
        if (k[0] == 't' && k[1] == 's') return K_TS;
        return K_OTHER;
    case 3:
        if (!memcmp(k, "cat", 3)) return K_CAT;
        if (!memcmp(k, "dur", 3)) return K_DUR;
        if (!memcmp(k, "pid", 3)) return K_PID;
        if (!memcmp(k, "tid", 3)) return K_TID;
        return K_OTHER;
    case 4:
        if (!memcmp(k, "name", 4)) return K_NAME;
        if (!memcmp(k, "args", 4)) return K_ARGS;
        return K_OTHER;
    default:
        return K_OTHER;
    }
}

static const char *GRAPH_PREFIXES[] = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"};

static int is_graph_name(const uc *p, Py_ssize_t n) {
    if (n < 13 || (p[0] != 'c' && p[0] != 'h')) return 0;
    for (int i = 0; i < 3; i++) {
        Py_ssize_t m = (Py_ssize_t)strlen(GRAPH_PREFIXES[i]);
        if (n >= m && memcmp(p, GRAPH_PREFIXES[i], (size_t)m) == 0) return 1;
    }
    return 0;
}

static inline int is_kept_ph(const uc *v, const uc *vend) {
    if (vend - v != 3) return 0;
    uc p = v[1];
    return p == 'X' || p == 'i' || p == 'I' || p == 'C';
}

static int set_no_args(Batch *b, Py_ssize_t r) {
    for (int k = 0; k < N_INT_ARGS; k++) b->arg_ok[k][r] = 0, b->arg_i[k][r] = 0;
    for (int k = 0; k < N_STR_ARGS; k++) b->arg_s[k][r] = -1;
    b->has_args[r] = 0;
    return text_append(b, (const uc *)"{}", 2);
}

/* One event object at s, read in one pass. Fills row b->n when it is kept (ph X/i/I/C) and
 * `columns`. `graph` (may be NULL) collects (start, end) of the args of graph launches.
 * Returns the end or NULL (declined, or *status = ERR). */
static const uc *parse_event(const uc *base, const uc *s, const uc *e, Batch *b, PyObject *graph,
                             int columns, int *status) {
    if (s >= e || *s != '{') return NULL;
    const uc *span[K_OTHER]; /* where each known value starts and ends */
    const uc *vend[K_OTHER];
    memset(span, 0, sizeof(span));
    Py_ssize_t r = b->n;
    int kept = 0, args_done = 0, esc;
    int nkind[2] = {0, 0};
    int64_t nint[2] = {0, 0};
    double nflt[2] = {0.0, 0.0};
    s = ws(s + 1, e);
    if (s < e && *s == '}') {
        s++;
    } else {
        for (;;) {
            if (s >= e || *s != '"') return NULL;
            const uc *kend = scan_string(s, e, &esc);
            if (!kend || esc) return NULL;
            int k = event_key(s + 1, kend - s - 2);
            s = ws(kend, e);
            if (s >= e || *s != ':') return NULL;
            s = ws(s + 1, e);
            const uc *v = s;
            if (s >= e) return NULL;
            if (k != K_OTHER && span[k]) return NULL; /* a duplicate key */
            switch (k) {
            case K_PH:
            case K_NAME:
            case K_CAT: /* strings without escapes (cat may be null) */
                if (k == K_CAT && *s == 'n') {
                    s = (e - s >= 4 && memcmp(s, "null", 4) == 0) ? s + 4 : NULL;
                } else {
                    if (*s != '"') return NULL;
                    s = scan_string(s, e, &esc);
                    if (s && esc) return NULL;
                }
                if (s && k == K_PH) kept = is_kept_ph(v, s);
                break;
            case K_TS:
            case K_DUR:
                s = typed_number(s, e, &nkind[k - K_TS], &nint[k - K_TS], &nflt[k - K_TS], TWO53);
                break;
            case K_PID:
            case K_TID:
                if (*s == '"') {
                    s = scan_string(s, e, &esc);
                    if (s && esc) return NULL;
                } else {
                    int kind;
                    int64_t iv;
                    double dv;
                    s = typed_number(s, e, &kind, &iv, &dv, (uint64_t)1 << 62);
                    if (s && kind == 2) return NULL; /* the typed struct takes int | str only */
                }
                break;
            case K_ARGS:
                if (columns && kept) { /* ph came first (as kineto writes it): one pass */
                    s = parse_args(s, e, b, r, status);
                    args_done = 1;
                } else {
                    s = skip_value(s, e, 1);
                }
                break;
            default:
                s = skip_value(s, e, 1);
            }
            if (!s) return NULL;
            if (k != K_OTHER) {
                span[k] = v;
                vend[k] = s;
            }
            s = ws(s, e);
            if (s >= e) return NULL;
            if (*s == ',') {
                s = ws(s + 1, e);
                continue;
            }
            if (*s == '}') {
                s++;
                break;
            }
            return NULL;
        }
    }
    if (graph && span[K_NAME] && span[K_ARGS] &&
        is_graph_name(span[K_NAME] + 1, vend[K_NAME] - span[K_NAME] - 2)) {
        PyObject *t = Py_BuildValue("(nn)", (Py_ssize_t)(span[K_ARGS] - base),
                                    (Py_ssize_t)(vend[K_ARGS] - base));
        if (!t || PyList_Append(graph, t) < 0) {
            Py_XDECREF(t);
            *status = ERR;
            return NULL;
        }
        Py_DECREF(t);
    }
    if (!kept || !columns) return s;
    b->ts_kind[r] = (uint8_t)nkind[0], b->ts_i[r] = nint[0], b->ts_f[r] = nflt[0];
    b->dur_kind[r] = (uint8_t)nkind[1], b->dur_i[r] = nint[1], b->dur_f[r] = nflt[1];
    for (int k = K_PID; k <= K_TID; k++) {
        uint8_t pk = 0;
        int64_t pv = 0;
        if (span[k] && !pid_value(span[k], vend[k], k == K_PID ? &b->t_pid : &b->t_tid, &pk, &pv,
                                  status))
            return NULL;
        (k == K_PID ? b->pid_kind : b->tid_kind)[r] = pk;
        (k == K_PID ? b->pid : b->tid)[r] = pv;
    }
    if (span[K_CAT] && *span[K_CAT] == '"') {
        if (!string_code(span[K_CAT], vend[K_CAT], &b->t_cat, 0, &b->cat[r], status)) return NULL;
    } else {
        b->cat[r] = -1;
    }
    if (span[K_NAME]) {
        if (!string_code(span[K_NAME], vend[K_NAME], &b->t_name, 0, &b->name[r], status))
            return NULL;
    } else if ((b->name[r] = intern(&b->t_name, (const uc *)"", 0)) == -2) {
        *status = ERR;
        return NULL;
    }
    if (!string_code(span[K_PH], vend[K_PH], &b->t_ph, 0, &b->ph[r], status)) return NULL;
    int fail;
    if (span[K_ARGS]) {
        if (!args_done && !parse_args(span[K_ARGS], vend[K_ARGS], b, r, status)) return NULL;
        b->has_args[r] = 1;
        fail = text_append(b, span[K_ARGS], vend[K_ARGS] - span[K_ARGS]);
    } else {
        fail = set_no_args(b, r);
    }
    if (fail) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        *status = ERR;
        return NULL;
    }
    b->offsets[r + 1] = b->text_len;
    b->n++;
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Python entry points                                                                        */

static PyObject *batch_result(Batch *b) {
    Py_ssize_t n = b->n;
    PyObject *cols = PyDict_New(), *ints = PyTuple_New(N_INT_ARGS * 2);
    PyObject *strs = PyTuple_New(N_STR_ARGS * 2);
    if (!cols || !ints || !strs) goto fail;
    static const char *names[] = {"ph", "cat", "name", "ts_kind", "dur_kind", "pid_kind",
                                  "tid_kind", "has_args", "ts_i", "dur_i", "pid", "tid", "ts_f",
                                  "dur_f"};
    for (int i = 0; i <= B_DUR_F; i++) {
        PyObject *o = buf_take(b, i, n * b->sizes[i]);
        if (!o || PyDict_SetItemString(cols, names[i], o) < 0) {
            Py_XDECREF(o);
            goto fail;
        }
        Py_DECREF(o);
    }
    for (int k = 0; k < N_INT_ARGS; k++) {
        PyObject *v = buf_take(b, B_ARG_I + k, n * 8);
        if (!v) goto fail;
        PyTuple_SET_ITEM(ints, 2 * k, v);
        PyObject *ok = buf_take(b, B_ARG_OK + k, n);
        if (!ok) goto fail;
        PyTuple_SET_ITEM(ints, 2 * k + 1, ok);
    }
    for (int k = 0; k < N_STR_ARGS; k++) {
        PyObject *c = buf_take(b, B_ARG_S + k, n * 4);
        if (!c) goto fail;
        PyTuple_SET_ITEM(strs, 2 * k, c);
        Py_INCREF(b->t_str[k].list);
        PyTuple_SET_ITEM(strs, 2 * k + 1, b->t_str[k].list);
    }
    PyObject *extra = Py_BuildValue(
        "{s:n,s:O,s:O,s:O,s:O,s:O,s:N,s:N,s:N,s:N}", "n", n, "ph_values", b->t_ph.list,
        "cat_values", b->t_cat.list, "name_values", b->t_name.list, "pid_values", b->t_pid.list,
        "tid_values", b->t_tid.list, "offsets", buf_take(b, B_OFFSETS, (n + 1) * 8), "text",
        buf_take(b, B_TEXT, b->text_len), "int_args", ints, "str_args", strs);
    ints = strs = NULL;
    if (!extra || PyDict_Update(cols, extra) < 0) {
        Py_XDECREF(extra);
        goto fail;
    }
    Py_DECREF(extra);
    return cols;
fail:
    Py_XDECREF(cols);
    Py_XDECREF(ints);
    Py_XDECREF(strs);
    return NULL;
}

/* scan(data, pos, end, max_events, graph_only) -> None (decline) or
 *   (next_pos, done, n_raw, columns-dict or None, graph-spans or None)
 * `pos` is just after the array's '[' or after an element's ','; `end` the array's end. */
static PyObject *kscan_scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos, end, max_events;
    int graph_only;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnp", &buf, &pos, &end, &max_events, &graph_only)) return NULL;
    PyObject *result = NULL, *graph = NULL;
    Batch b;
    int ok_init = batch_init(&b, graph_only ? 1 : max_events) == 0;
    if (!ok_init || end > buf.len || pos < 0 || pos > end || max_events <= 0) {
        if (!ok_init) PyErr_NoMemory();
        else PyErr_SetString(PyExc_ValueError, "bad scan bounds");
        goto done;
    }
    if (graph_only && !(graph = PyList_New(0))) goto done;
    const uc *base = (const uc *)buf.buf, *e = base + end, *s = ws(base + pos, e);
    Py_ssize_t n_raw = 0;
    int status = OK, finished = 0;
    if (s < e && *s == ']') {
        finished = 1;
        s++;
    }
    while (!finished && n_raw < max_events) {
        if (graph_only) b.n = 0;
        const uc *next = parse_event(base, s, e, &b, graph, !graph_only, &status);
        if (!next) {
            if (status == ERR) goto done;
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        n_raw++;
        s = ws(next, e);
        if (s < e && *s == ',') {
            s = ws(s + 1, e);
            if (s < e && *s == ']') break; /* a trailing comma: not JSON */
            continue;
        }
        if (s < e && *s == ']') {
            finished = 1;
            s++;
            break;
        }
        break;
    }
    if (!finished && (s >= e || *s != '{')) { /* neither another element nor the end */
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    PyObject *cols = Py_None;
    Py_INCREF(cols);
    if (!graph_only) {
        Py_DECREF(cols);
        cols = batch_result(&b);
        if (!cols) goto done;
    }
    result = Py_BuildValue("(niNNO)", (Py_ssize_t)(s - base), finished, PyLong_FromSsize_t(n_raw),
                           cols, graph ? graph : Py_None);
done:
    Py_XDECREF(graph);
    batch_free(&b);
    PyBuffer_Release(&buf);
    return result;
}

/* skip(data, pos, end) -> the end of the JSON value at pos (strictly validated), or -1. */
static PyObject *kscan_skip(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos, end;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &pos, &end)) return NULL;
    Py_ssize_t out = -1;
    if (pos >= 0 && pos <= end && end <= buf.len) {
        const uc *base = (const uc *)buf.buf;
        const uc *r = skip_value(base + pos, base + end, 0);
        if (r) out = r - base;
    }
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(out);
}

/* The end of the array or object at s: brackets matched outside strings, nothing validated
 * (the events array is validated by `scan` as it is read). NULL when unbalanced. */
static const uc *fast_skip(const uc *s, const uc *e) {
    Py_ssize_t depth = 0;
    while (s < e) {
        uc c = *s;
        if (c == '"') {
            s++;
            for (;;) {
                const uc *q = memchr(s, '"', (size_t)(e - s));
                if (!q) return NULL;
                const uc *k = q;
                while (k > s && k[-1] == '\\') k--;
                s = q + 1;
                if (((q - k) & 1) == 0) break; /* an even run of backslashes: the closing quote */
            }
            continue;
        }
        if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (--depth == 0) return s + 1;
        }
        s++;
    }
    return NULL;
}

/* Append (key, start, end) to `out`: 0, or -1 (declined: not UTF-8), or -2 (a Python error). */
static int append_key(PyObject *out, const uc *base, const uc *key, Py_ssize_t klen, const uc *v,
                      const uc *vend) {
    PyObject *k = PyUnicode_DecodeUTF8((const char *)key, klen, "strict");
    if (!k) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -2;
        PyErr_Clear();
        return -1;
    }
    PyObject *t = Py_BuildValue("(Nnn)", k, (Py_ssize_t)(v - base), (Py_ssize_t)(vend - base));
    if (!t || PyList_Append(out, t) < 0) {
        Py_XDECREF(t);
        return -2;
    }
    Py_DECREF(t);
    return 0;
}

/* The keys after the events array, when `close` (a ']') ends it: `close` then
 * (, "key": value)* } and only whitespace to the end, every value validated. Appends the keys
 * to `out` and returns 0; 1 when this ']' is not the end; -2 on a Python error. */
static int tail_keys(PyObject *out, const uc *base, const uc *close, const uc *e) {
    const uc *s = ws(close + 1, e);
    for (;;) {
        if (s >= e) return 1;
        if (*s == '}') return ws(s + 1, e) == e ? 0 : 1;
        if (*s != ',') return 1;
        s = ws(s + 1, e);
        int esc;
        if (s >= e || *s != '"') return 1;
        const uc *kend = scan_string(s, e, &esc);
        if (!kend || esc) return 1;
        const uc *key = s + 1;
        Py_ssize_t klen = kend - s - 2;
        s = ws(kend, e);
        if (s >= e || *s != ':') return 1;
        const uc *v = ws(s + 1, e);
        s = skip_value(v, e, 0);
        if (!s) return 1;
        int r = append_key(out, base, key, klen, v, s);
        if (r) return r == -2 ? -2 : 1;
        s = ws(s, e);
    }
}

/* The events array at `open` ends at the last ']' after which the rest of the file is a valid
 * tail of the top-level object (usually a few keys): found from the end, so the array itself
 * is not walked twice (`scan` checks it ends there). Appends the tail keys to `out`; returns
 * the position after that ']', NULL when no candidate fits (`*err` set on a Python error). */
static const uc *events_end(PyObject *out, const uc *base, const uc *open, const uc *e, int *err) {
    const uc *p = e;
    Py_ssize_t before = PyList_GET_SIZE(out);
    for (int tries = 0; tries < 64; tries++) {
        const uc *q = p;
        while (q > open && *(q - 1) != ']') q--;
        if (q <= open + 1) return NULL;
        const uc *close = q - 1;
        int r = tail_keys(out, base, close, e);
        if (r == 0) return close + 1;
        if (PyList_SetSlice(out, before, PyList_GET_SIZE(out), NULL) < 0 || r == -2) {
            *err = 1;
            return NULL;
        }
        p = close;
    }
    return NULL;
}

/* top(data) -> [(key, start, end), ...] for the top-level object's keys, or None (decline).
 * Every value but an array under "traceEvents" is validated; that one is only delimited. */
static PyObject *kscan_top(PyObject *self, PyObject *args) {
    Py_buffer buf;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    const uc *base = (const uc *)buf.buf, *e = base + buf.len;
    PyObject *out = PyList_New(0);
    if (!out) goto fail;
    const uc *s = ws(base, e);
    if (s >= e || *s != '{') goto decline;
    s = ws(s + 1, e);
    if (s < e && *s == '}') {
        s++;
    } else {
        for (;;) {
            int esc;
            if (s >= e || *s != '"') goto decline;
            const uc *kend = scan_string(s, e, &esc);
            if (!kend || esc) goto decline;
            const uc *key = s + 1;
            Py_ssize_t klen = kend - s - 2;
            s = ws(kend, e);
            if (s >= e || *s != ':') goto decline;
            s = ws(s + 1, e);
            const uc *v = s;
            if (key_is(key, klen, "traceEvents") && s < e && *s == '[') {
                PyObject *tail = PyList_New(0);
                if (!tail) goto fail;
                int err = 0;
                const uc *end = events_end(tail, base, s, e, &err);
                if (err) {
                    Py_DECREF(tail);
                    goto fail;
                }
                if (end) { /* the events, then the tail's keys: the whole object is read */
                    int r = append_key(out, base, key, klen, v, end);
                    if (!r) r = PyList_SetSlice(out, PyList_GET_SIZE(out), PyList_GET_SIZE(out),
                                                tail) < 0 ? -2 : 0;
                    Py_DECREF(tail);
                    if (r == -2) goto fail;
                    if (r) goto decline;
                    PyBuffer_Release(&buf);
                    return out;
                }
                Py_DECREF(tail);
                s = fast_skip(s, e);
            } else {
                s = skip_value(s, e, 0);
            }
            if (!s) goto decline;
            int r = append_key(out, base, key, klen, v, s);
            if (r == -2) goto fail;
            if (r) goto decline;
            s = ws(s, e);
            if (s >= e) goto decline;
            if (*s == ',') {
                s = ws(s + 1, e);
                continue;
            }
            if (*s == '}') {
                s++;
                break;
            }
            goto decline;
        }
    }
    if (ws(s, e) != e) goto decline;
    PyBuffer_Release(&buf);
    return out;
decline:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* has(data, needle) -> whether needle occurs in data (memchr on its first byte). */
static PyObject *kscan_has(PyObject *self, PyObject *args) {
    Py_buffer buf, nd;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*", &buf, &nd)) return NULL;
    const uc *p = buf.buf, *e = p + buf.len, *n = nd.buf;
    Py_ssize_t m = nd.len;
    int found = m == 0;
    while (!found && e - p >= m) {
        const uc *q = memchr(p, n[0], (size_t)(e - p - m + 1));
        if (!q) break;
        if (memcmp(q, n, (size_t)m) == 0) found = 1;
        p = q + 1;
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&nd);
    return PyBool_FromLong(found);
}

static PyMethodDef methods[] = {
    {"has", kscan_has, METH_VARARGS, "Whether needle occurs in data."},
    {"top", kscan_top, METH_VARARGS, "Top-level keys and value spans, or None."},
    {"scan", kscan_scan, METH_VARARGS, "Columns of the next batch of Kineto events, or None."},
    {"skip", kscan_skip, METH_VARARGS, "End of the JSON value at pos (validated), or -1."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kscan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kscan(void) { return PyModule_Create(&module); }
