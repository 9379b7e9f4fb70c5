/* The CUDA-event bookkeeping of a GPU-timed top-level phase call, in C: what gpu.py's
 * `GpuEvents._gpu_begin` / `_gpu_end` / `_gpu_mark` do after the calibration, on the same
 * recorder objects (the thread's `bound` slot, `_bound_ids`, `_gpu_pending`, `_event_pool`,
 * `events_recorded`) in the same order, so the Python path, the flush thread's resolution and
 * this one share one state. PhaseCall (_native_hotpath.c) calls it where the Python body calls
 * those methods; what it does not serve (the calibration, sampling outside every cycle) it
 * leaves to them. On the H200 the Python methods were about 5 us of host time a GPU-timed call
 * (docs/BENCHMARKS.md, "fourth session"); here they are a few hundred ns besides the records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

#include "_native.h"

static PyObject *s_pool, *s_new_event, *s_pending, *s_bound_ids,
    *s_events_recorded, *s_share_gap, *s_record, *s_gpu_begin_py;

int gpu_init(void) {
#define I(var, text) if (!(var = PyUnicode_InternFromString(text))) return -1
    I(s_pool, "_event_pool");
    I(s_new_event, "_new_event"); I(s_pending, "_gpu_pending"); I(s_bound_ids, "_bound_ids");
    I(s_events_recorded, "events_recorded"); I(s_share_gap, "_share_gap_ns");
    I(s_record, "record"); I(s_gpu_begin_py, "_gpu_begin");
#undef I
    return 0;
}

static long long clock_ns(long long offset) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t); /* time.time_ns()'s clock, as the hot path's */
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec + offset;
}

/* A recorder attribute (borrowed), AttributeError when it is missing. */
static PyObject *attr(PyObject *d, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (!v && !PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, key);
    return v;
}

static int attr_ll(PyObject *d, PyObject *key, long long *out) {
    PyObject *v = attr(d, key);
    if (!v) return -1;
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* `gpu.sampled(key, every)`: the golden-ratio rule (Fibonacci hashing), same arithmetic. */
static int sampled(long long key, long long every) {
    if (every <= 1) return 1;
    unsigned long long frac = ((unsigned long long)key * 2654435769ULL) & 0xFFFFFFFFULL;
    return (frac * (unsigned long long)every) >> 32 == 0;
}

/* id(ev) in or out of the recorder's `_bound_ids`. */
static int bound_ids(PyObject *d, PyObject *ev, int add) {
    PyObject *ids = attr(d, s_bound_ids);
    if (!ids) return -1;
    if (!PySet_Check(ids)) { PyErr_SetString(PyExc_TypeError, "_bound_ids is not a set"); return -1; }
    PyObject *key = PyLong_FromVoidPtr(ev);
    if (!key) return -1;
    int rc = add ? PySet_Add(ids, key) : PySet_Discard(ids, key);
    Py_DECREF(key);
    return rc < 0 ? -1 : 0;
}

/* `_drop_bound`: the thread's boundary slot emptied, its event out of `_bound_ids`. */
static int drop_bound(PyObject *d, TState *ts) {
    PyObject *bound = ts->bound;
    if (!bound || bound == Py_None) return 0;
    ts->bound = NULL;
    int rc = 0;
    if (PyTuple_Check(bound) && PyTuple_GET_SIZE(bound) >= 1)
        rc = bound_ids(d, PyTuple_GET_ITEM(bound, 0), 0);
    Py_DECREF(bound);
    return rc;
}

int gpu_drop_bound(PyObject *d, TState *ts) { return drop_bound(d, ts); }

/* `_gpu_mark` after the calibration: an event from the pool (or a new one), recorded. */
static PyObject *mark(PyObject *d) {
    PyObject *pool = attr(d, s_pool);
    if (!pool) return NULL;
    if (!PyList_Check(pool)) { PyErr_SetString(PyExc_TypeError, "_event_pool is not a list"); return NULL; }
    PyObject *ev;
    Py_ssize_t n = PyList_GET_SIZE(pool);
    if (n) {
        ev = Py_NewRef(PyList_GET_ITEM(pool, n - 1));
        if (PyList_SetSlice(pool, n - 1, n, NULL) < 0) { Py_DECREF(ev); return NULL; }
    } else {
        PyObject *make = attr(d, s_new_event);
        if (!make) return NULL;
        ev = PyObject_CallNoArgs(make);
        if (!ev) return NULL;
    }
    int rc = cudaev_record(ev);
    if (rc == 1) { /* not a driver event (torch's): its own record() */
        PyObject *r = PyObject_CallMethodNoArgs(ev, s_record);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
    if (rc < 0) { Py_DECREF(ev); return NULL; }
    long long k;
    if (attr_ll(d, s_events_recorded, &k) < 0) { Py_DECREF(ev); return NULL; }
    PyObject *nk = PyLong_FromLongLong(k + 1);
    if (!nk || PyDict_SetItem(d, s_events_recorded, nk) < 0) {
        Py_XDECREF(nk);
        Py_DECREF(ev);
        return NULL;
    }
    Py_DECREF(nk);
    return ev;
}

TK_HOT int gpu_may_time(Hot *h, long long cycle) {
    long long every = h->gpu_every;
    /* the calibration, a call outside every cycle: Python decides (conservatively: it may) */
    if (!h->gpu_ref || h->gpu_ref == Py_None || every <= 1 || cycle < 0) return 1;
    return sampled(cycle, every);
}

int gpu_begin(PyObject *rec, PyObject *d, Hot *h, TState *ts, long long cycle, long long offset,
              PyObject **out) {
    *out = NULL;
    long long every = h->gpu_every, gap;
    /* the calibration; calls outside every cycle: Python */
    if (!h->gpu_ref || h->gpu_ref == Py_None || (every > 1 && cycle < 0)) {
        PyObject *ev = PyObject_CallMethodOneArg(rec, s_gpu_begin_py, (PyObject *)ts);
        if (!ev) return -1;
        if (ev == Py_None) Py_DECREF(ev); else *out = ev;
        return 0;
    }
    if (!sampled(cycle, every)) return drop_bound(d, ts);
    PyObject *bound = ts->bound;
    if (bound && bound != Py_None) {
        if (attr_ll(d, s_share_gap, &gap) < 0) return -1;
        if (!PyTuple_Check(bound) || PyTuple_GET_SIZE(bound) != 3) {
            PyErr_SetString(PyExc_TypeError, "a boundary slot is not (event, cycle, ns)");
            return -1;
        }
        long long bcycle = PyLong_AsLongLong(PyTuple_GET_ITEM(bound, 1));
        long long after = PyLong_AsLongLong(PyTuple_GET_ITEM(bound, 2));
        if (PyErr_Occurred()) return -1;
        if (bcycle == cycle && clock_ns(offset) - after <= gap) {
            *out = Py_NewRef(PyTuple_GET_ITEM(bound, 0)); /* in _bound_ids until gpu_end */
            return 0;
        }
        if (drop_bound(d, ts) < 0) return -1;
    }
    *out = mark(d);
    return *out ? 0 : -1;
}

int gpu_end(PyObject *d, TState *ts, long long seq, PyObject *ev, long long cycle,
            long long offset) {
    PyObject *ev1 = mark(d);
    if (!ev1) return -1;
    PyObject *pending = attr(d, s_pending);
    PyObject *entry = pending ? Py_BuildValue("(LOO)", seq, ev, ev1) : NULL;
    int rc = entry && PyList_Check(pending) ? PyList_Append(pending, entry) : -1;
    Py_XDECREF(entry);
    if (rc < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_gpu_pending is not a list");
        Py_DECREF(ev1);
        return -1;
    }
    /* after the append: a resolving thread always sees the event in one of the two */
    if (bound_ids(d, ev1, 1) < 0) { Py_DECREF(ev1); return -1; }
    PyObject *slot = Py_BuildValue("(OLL)", ev1, cycle, clock_ns(offset));
    Py_DECREF(ev1);
    if (!slot) return -1;
    PyObject *old = ts->bound;
    ts->bound = slot;
    rc = 0;
    if (old && old != Py_None && PyTuple_Check(old) && PyTuple_GET_SIZE(old) >= 1)
        rc = bound_ids(d, PyTuple_GET_ITEM(old, 0), 0);
    Py_XDECREF(old);
    return rc;
}
