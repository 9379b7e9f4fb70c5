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

#include "_kscan_json.h"
#include "_kscan_intern.h"
#include "_kscan_batch.h"
#include "_kscan_event.h"

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
        result = Py_None; /* neither ',' nor ']' after an element: not JSON */
        Py_INCREF(result);
        goto done;
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
            int next = after_value(&s, e, '}');
            if (next < 0) goto decline;
            if (!next) break;
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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kscan", NULL, -1, methods,
                                     NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kscan(void) { return PyModule_Create(&module); }
