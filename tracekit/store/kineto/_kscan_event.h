/* One Kineto event read in one pass into a batch's row. Part of _kscan.c (included once,
 * there). */
#ifndef TRACEKIT_KSCAN_EVENT_H
#define TRACEKIT_KSCAN_EVENT_H

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

/* The value spans and typed numbers of one event, read by `parse_event`. */
typedef struct {
    const uc *span[K_OTHER]; /* where each known value starts (NULL: absent) and ends */
    const uc *vend[K_OTHER];
    int nkind[2]; /* ts, dur: 0 null, 1 int, 2 float */
    int64_t nint[2];
    double nflt[2];
    int args_done; /* the args were read into row r already */
} Event;

/* Row r of the batch from a kept event's spans: 0, or -1 (declined, or *status = ERR). */
static int fill_row(Batch *b, Py_ssize_t r, const Event *ev, int *status) {
    b->ts_kind[r] = (uint8_t)ev->nkind[0], b->ts_i[r] = ev->nint[0], b->ts_f[r] = ev->nflt[0];
    b->dur_kind[r] = (uint8_t)ev->nkind[1], b->dur_i[r] = ev->nint[1], b->dur_f[r] = ev->nflt[1];
    for (int k = K_PID; k <= K_TID; k++) {
        uint8_t pk = 0;
        int64_t pv = 0;
        Interner *t = k == K_PID ? &b->t_pid : &b->t_tid;
        if (ev->span[k] && !pid_value(ev->span[k], ev->vend[k], t, &pk, &pv, status))
            return -1;
        (k == K_PID ? b->pid_kind : b->tid_kind)[r] = pk;
        (k == K_PID ? b->pid : b->tid)[r] = pv;
    }
    if (ev->span[K_CAT] && *ev->span[K_CAT] == '"') {
        if (!string_code(ev->span[K_CAT], ev->vend[K_CAT], &b->t_cat, 0, &b->cat[r], status))
            return -1;
    } else {
        b->cat[r] = -1;
    }
    if (ev->span[K_NAME]) {
        if (!string_code(ev->span[K_NAME], ev->vend[K_NAME], &b->t_name, 0, &b->name[r], status))
            return -1;
    } else if ((b->name[r] = intern(&b->t_name, (const uc *)"", 0)) == -2) {
        *status = ERR;
        return -1;
    }
    if (!string_code(ev->span[K_PH], ev->vend[K_PH], &b->t_ph, 0, &b->ph[r], status)) return -1;
    int fail;
    if (ev->span[K_ARGS]) {
        if (!ev->args_done && !parse_args(ev->span[K_ARGS], ev->vend[K_ARGS], b, r, status))
            return -1;
        b->has_args[r] = 1;
        fail = text_append(b, ev->span[K_ARGS], ev->vend[K_ARGS] - ev->span[K_ARGS]);
    } else {
        fail = set_no_args(b, r);
    }
    if (fail) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        *status = ERR;
        return -1;
    }
    return 0;
}

/* The value of key k at s (in an event object): typed where the typed `Event` struct reads it,
 * validated and skipped otherwise. Returns its end, or NULL. */
static const uc *read_value(const uc *s, const uc *e, int k, Event *ev, int *kept, Batch *b,
                            Py_ssize_t r, int columns, int *status) {
    const uc *v = s;
    int esc;
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
        if (s && k == K_PH) *kept = is_kept_ph(v, s);
        break;
    case K_TS:
    case K_DUR:
        s = typed_number(s, e, &ev->nkind[k - K_TS], &ev->nint[k - K_TS], &ev->nflt[k - K_TS],
                         TWO53);
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
        if (columns && *kept) { /* ph came first (as kineto writes it): one pass */
            s = parse_args(s, e, b, r, status);
            ev->args_done = 1;
        } else {
            s = skip_value(s, e, 1);
        }
        break;
    default:
        s = skip_value(s, e, 1);
    }
    return s;
}

/* One event object at s, read in one pass. Fills row b->n when it is kept (ph X/i/I/C) and
 * `columns`. `graph` (may be NULL) collects (start, end) of the args of graph launches.
 * Returns the end or NULL (declined, or *status = ERR). */
static const uc *parse_event(const uc *base, const uc *s, const uc *e, Batch *b, PyObject *graph,
                             int columns, int *status) {
    if (s >= e || *s != '{') return NULL;
    Event ev;
    memset(&ev, 0, sizeof(ev));
    const uc **span = ev.span, **vend = ev.vend;
    Py_ssize_t r = b->n;
    int kept = 0, esc;
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
            s = read_value(s, e, k, &ev, &kept, b, r, columns, status);
            if (!s) return NULL;
            if (k != K_OTHER) {
                span[k] = v;
                vend[k] = s;
            }
            int next = after_value(&s, e, '}');
            if (next < 0) return NULL;
            if (!next) break;
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
    if (fill_row(b, r, &ev, status) < 0) return NULL;
    b->offsets[r + 1] = b->text_len;
    b->n++;
    return s;
}

#endif
