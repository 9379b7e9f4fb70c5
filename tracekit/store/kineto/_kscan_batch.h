/* The columns of one batch and the args parse into them. Part of _kscan.c (included once,
 * there). */
#ifndef TRACEKIT_KSCAN_BATCH_H
#define TRACEKIT_KSCAN_BATCH_H

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
        int next = after_value(&s, e, '}');
        if (next < 0) return NULL;
        if (!next) return s;
    }
}

#endif
