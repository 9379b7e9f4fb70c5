/* CUDA events through the driver API, found at run time (libcuda.so.1, which torch has loaded
 * already): `CudaEvent` has the part of torch.cuda.Event's interface the recorder uses
 * (record on the current stream, query, synchronize, elapsed_time in ms), without the Python
 * layers around torch's record (a Stream object built per call, device guards). Nothing links
 * against CUDA: on a machine without it `driver_error()` says why and the recorder keeps
 * torch's events (collectors/recording/gpu.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "_native.h"

typedef int CUresult;
typedef void *CUevent;
typedef void *CUstream;
typedef void *CUcontext;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600

static CUresult (*cuEventCreate_)(CUevent *, unsigned int);
static CUresult (*cuEventRecord_)(CUevent, CUstream);
static CUresult (*cuEventQuery_)(CUevent);
static CUresult (*cuEventSynchronize_)(CUevent);
static CUresult (*cuEventElapsedTime_)(float *, CUevent, CUevent);
static CUresult (*cuEventDestroy_)(CUevent);
static CUresult (*cuCtxGetCurrent_)(CUcontext *);
static CUresult (*cuCtxSetCurrent_)(CUcontext);
static CUresult (*cuGetErrorName_)(CUresult, const char **);
static const char *load_error = "not loaded yet";
static int loaded = 0;
static pid_t loaded_pid = 0;

static int load_driver(void) {
    if (loaded) return 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { load_error = "libcuda.so.1 not found"; return -1; }
#define SYM(var, name) if (!(*(void **)&var = dlsym(h, name))) { load_error = "no " name; return -1; }
    SYM(cuEventCreate_, "cuEventCreate");
    SYM(cuEventRecord_, "cuEventRecord");
    SYM(cuEventQuery_, "cuEventQuery");
    SYM(cuEventSynchronize_, "cuEventSynchronize");
    if (!(*(void **)&cuEventElapsedTime_ = dlsym(h, "cuEventElapsedTime_v2")))
        SYM(cuEventElapsedTime_, "cuEventElapsedTime");
    SYM(cuEventDestroy_, "cuEventDestroy_v2");
    SYM(cuCtxGetCurrent_, "cuCtxGetCurrent");
    SYM(cuCtxSetCurrent_, "cuCtxSetCurrent");
    SYM(cuGetErrorName_, "cuGetErrorName");
#undef SYM
    loaded = 1;
    loaded_pid = getpid();
    load_error = NULL;
    return 0;
}

static PyObject *cuda_error(const char *what, CUresult rc) {
    const char *name = "?";
    if (cuGetErrorName_) cuGetErrorName_(rc, &name);
    PyErr_Format(PyExc_RuntimeError, "%s: CUDA driver error %d (%s)", what, rc, name);
    return NULL;
}

typedef struct {
    PyObject_HEAD
    CUevent ev;
    CUcontext ctx;
    PyObject *raw_stream; /* torch._C._cuda_getCurrentRawStream(device) */
    PyObject *get_device; /* torch._C._cuda_getDevice() */
} CudaEvent;

static PyObject *ev_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"raw_stream", "get_device", NULL};
    PyObject *raw_stream, *get_device;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kw, &raw_stream, &get_device)) return NULL;
    if (load_driver() < 0) {
        PyErr_Format(PyExc_RuntimeError, "CUDA driver API unavailable: %s", load_error);
        return NULL;
    }
    CUcontext ctx = NULL;
    CUresult rc = cuCtxGetCurrent_(&ctx);
    if (rc != CUDA_SUCCESS) return cuda_error("cuCtxGetCurrent", rc);
    if (!ctx) {
        PyErr_SetString(PyExc_RuntimeError, "no current CUDA context on this thread");
        return NULL;
    }
    CUevent ev = NULL;
    rc = cuEventCreate_(&ev, 0); /* CU_EVENT_DEFAULT: timing on, as Event(enable_timing=True) */
    if (rc != CUDA_SUCCESS) return cuda_error("cuEventCreate", rc);
    CudaEvent *self = (CudaEvent *)type->tp_alloc(type, 0);
    if (!self) { cuEventDestroy_(ev); return NULL; }
    self->ev = ev;
    self->ctx = ctx;
    Py_INCREF(raw_stream); self->raw_stream = raw_stream;
    Py_INCREF(get_device); self->get_device = get_device;
    return (PyObject *)self;
}

static void ev_dealloc(CudaEvent *self) {
    if (self->ev && loaded && getpid() == loaded_pid) cuEventDestroy_(self->ev);
    Py_XDECREF(self->raw_stream);
    Py_XDECREF(self->get_device);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The event's context made current on a thread that has none (tracekit's flush thread
 * resolves events the program's threads recorded; the driver API wants a current context). */
static void ensure_ctx(CudaEvent *self) {
    CUcontext cur = NULL;
    if (cuCtxGetCurrent_(&cur) == CUDA_SUCCESS && !cur) cuCtxSetCurrent_(self->ctx);
}

static PyTypeObject CudaEventType;

/* record(): on torch's current stream of torch's current device, as Event.record() does. */
static PyObject *ev_record(CudaEvent *self, PyObject *unused) {
    ensure_ctx(self);
    PyObject *dev = PyObject_CallNoArgs(self->get_device);
    if (!dev) return NULL;
    PyObject *s = PyObject_CallOneArg(self->raw_stream, dev);
    Py_DECREF(dev);
    if (!s) return NULL;
    void *stream = PyLong_AsVoidPtr(s);
    Py_DECREF(s);
    if (!stream && PyErr_Occurred()) return NULL;
    CUresult rc = cuEventRecord_(self->ev, (CUstream)stream);
    if (rc != CUDA_SUCCESS) return cuda_error("cuEventRecord", rc);
    Py_RETURN_NONE;
}

/* For the native bookkeeping (_native_gpu.c): record `ev` when it is a CudaEvent (0, or -1
 * with an error set); 1 when it is not one (the caller calls its own record()). */
int cudaev_record(PyObject *ev) {
    if (!Py_IS_TYPE(ev, &CudaEventType)) return 1;
    PyObject *r = ev_record((CudaEvent *)ev, NULL);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *ev_query(CudaEvent *self, PyObject *unused) {
    ensure_ctx(self);
    CUresult rc = cuEventQuery_(self->ev);
    if (rc == CUDA_SUCCESS) Py_RETURN_TRUE;
    if (rc == CUDA_ERROR_NOT_READY) Py_RETURN_FALSE;
    return cuda_error("cuEventQuery", rc);
}

static PyObject *ev_synchronize(CudaEvent *self, PyObject *unused) {
    ensure_ctx(self);
    CUresult rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cuEventSynchronize_(self->ev);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS) return cuda_error("cuEventSynchronize", rc);
    Py_RETURN_NONE;
}

/* elapsed_time(end): ms from this event to `end`, as torch.cuda.Event.elapsed_time. */
static PyObject *ev_elapsed(CudaEvent *self, PyObject *end) {
    if (!PyObject_TypeCheck(end, &CudaEventType)) {
        PyErr_SetString(PyExc_TypeError, "elapsed_time() takes a CudaEvent");
        return NULL;
    }
    ensure_ctx(self);
    float ms = 0;
    CUresult rc = cuEventElapsedTime_(&ms, self->ev, ((CudaEvent *)end)->ev);
    if (rc != CUDA_SUCCESS) return cuda_error("cuEventElapsedTime", rc);
    return PyFloat_FromDouble(ms);
}

static PyMethodDef ev_methods[] = {
    {"record", (PyCFunction)ev_record, METH_NOARGS, "Record on torch's current stream."},
    {"query", (PyCFunction)ev_query, METH_NOARGS, "True once the event completed."},
    {"synchronize", (PyCFunction)ev_synchronize, METH_NOARGS, "Wait for the event."},
    {"elapsed_time", (PyCFunction)ev_elapsed, METH_O, "ms from this event to `end`."},
    {NULL},
};

static PyTypeObject CudaEventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracekit.collectors.recording._native.CudaEvent",
    .tp_basicsize = sizeof(CudaEvent),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "CudaEvent(raw_stream, get_device): a timing CUDA event of the driver API.",
    .tp_new = ev_new,
    .tp_dealloc = (destructor)ev_dealloc,
    .tp_methods = ev_methods,
};

/* Event times of one resolution, keyed by the driver's event handle: an event shared by two
 * calls (the end of one, the start of the next) gets one time. Open addressing, size a power
 * of two at least twice the entries. */
typedef struct { CUevent *keys; long long *vals; size_t mask; } EvTimes;

static int evtimes_init(EvTimes *t, Py_ssize_t n) {
    size_t size = 16;
    while (size < (size_t)n * 4) size <<= 1;
    t->keys = PyMem_Calloc(size, sizeof(CUevent));
    t->vals = PyMem_Malloc(size * sizeof(long long));
    t->mask = size - 1;
    return t->keys && t->vals ? 0 : -1;
}

#define NO_TIME LLONG_MIN

/* The slot of `ev`; *found when it holds a time already (a slot claimed by a call whose
 * elapsed time failed keeps NO_TIME, and is filled by the next that succeeds). */
static long long *evtimes_slot(EvTimes *t, CUevent ev, int *found) {
    size_t i = ((uintptr_t)ev >> 4) & t->mask;
    while (t->keys[i] && t->keys[i] != ev) i = (i + 1) & t->mask;
    if (t->keys[i] != ev) {
        t->keys[i] = ev;
        t->vals[i] = NO_TIME;
    }
    *found = t->vals[i] != NO_TIME;
    return &t->vals[i];
}

/* resolve_events(ref, ref_ns, pending, n): GPU times of the first n (seq, ev0, ev1) entries of
 * `pending` (CudaEvents): None where ev1 has not completed, else (t0_ns, t1_ns). An event's
 * time is ref_ns plus its elapsed time from `ref`, except an end event first seen here, whose
 * time is its call's start plus the span between the call's own two events: a span keeps the
 * driver's resolution (about 0.5 us) however old the reference is, where a float32 of
 * milliseconds since `ref` rounds to 60 us after an hour. The driver calls run with the GIL
 * released, so the program's threads go on while the flush thread resolves. */
static PyObject *resolve_events(PyObject *mod, PyObject *args) {
    PyObject *ref, *pending;
    long long ref_ns;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!LO!n", &CudaEventType, &ref, &ref_ns, &PyList_Type, &pending,
                          &n))
        return NULL;
    if (n > PyList_GET_SIZE(pending)) n = PyList_GET_SIZE(pending);
    if (n <= 0) return PyList_New(0);
    PyObject *held = PyList_GetSlice(pending, 0, n); /* the events live while the GIL is out */
    if (!held) return NULL;
    CUevent *evs = PyMem_Malloc(2 * (size_t)n * sizeof(CUevent));
    long long *ns = PyMem_Malloc(2 * (size_t)n * sizeof(long long));
    signed char *state = PyMem_Malloc((size_t)n);
    EvTimes cache = {0};
    PyObject *out = NULL;
    if (!evs || !ns || !state || evtimes_init(&cache, n) < 0) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(held, k);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 3 ||
            !PyObject_TypeCheck(PyTuple_GET_ITEM(item, 1), &CudaEventType) ||
            !PyObject_TypeCheck(PyTuple_GET_ITEM(item, 2), &CudaEventType)) {
            PyErr_SetString(PyExc_TypeError, "resolve_events() takes (seq, CudaEvent, CudaEvent)");
            goto done;
        }
        evs[2 * k] = ((CudaEvent *)PyTuple_GET_ITEM(item, 1))->ev;
        evs[2 * k + 1] = ((CudaEvent *)PyTuple_GET_ITEM(item, 2))->ev;
    }
    CUevent r = ((CudaEvent *)ref)->ev;
    CUcontext ctx = ((CudaEvent *)ref)->ctx;
    CUresult err = CUDA_SUCCESS;
    Py_BEGIN_ALLOW_THREADS
    CUcontext cur = NULL;
    if (cuCtxGetCurrent_(&cur) == CUDA_SUCCESS && !cur) cuCtxSetCurrent_(ctx);
    for (Py_ssize_t k = 0; k < n && err == CUDA_SUCCESS; k++) {
        CUevent e0 = evs[2 * k], e1 = evs[2 * k + 1];
        CUresult rc = cuEventQuery_(e1);
        state[k] = 0;
        if (rc == CUDA_ERROR_NOT_READY) continue;
        int f0, f1;
        long long *t0 = evtimes_slot(&cache, e0, &f0);
        float ms = 0;
        if (rc == CUDA_SUCCESS && !f0) {
            rc = cuEventElapsedTime_(&ms, r, e0);
            if (rc == CUDA_SUCCESS) *t0 = ref_ns + llround((double)ms * 1e6);
        }
        if (rc == CUDA_SUCCESS) {
            long long *t1 = evtimes_slot(&cache, e1, &f1);
            if (!f1) {
                rc = cuEventElapsedTime_(&ms, e0, e1);
                if (rc == CUDA_SUCCESS) *t1 = *t0 + llround((double)ms * 1e6);
            }
            if (rc == CUDA_SUCCESS) {
                ns[2 * k] = *t0;
                ns[2 * k + 1] = *t1;
                state[k] = 1;
                continue;
            }
        }
        if (rc != CUDA_ERROR_NOT_READY) err = rc;
    }
    Py_END_ALLOW_THREADS
    if (err != CUDA_SUCCESS) { cuda_error("resolving CUDA events", err); goto done; }
    out = PyList_New(n);
    if (!out) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = state[k] ? Py_BuildValue("(LL)", ns[2 * k], ns[2 * k + 1]) : Py_NewRef(Py_None);
        if (!v) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, k, v);
    }
done:
    PyMem_Free(evs);
    PyMem_Free(ns);
    PyMem_Free(state);
    PyMem_Free(cache.keys);
    PyMem_Free(cache.vals);
    Py_DECREF(held);
    return out;
}

/* driver_error(): None when the driver API loads, else why it does not. */
static PyObject *driver_error(PyObject *mod, PyObject *unused) {
    if (load_driver() == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(load_error);
}

static PyMethodDef cudaev_functions[] = {
    {"driver_error", driver_error, METH_NOARGS,
     "None when libcuda's event API loads, else the reason it does not."},
    {"resolve_events", resolve_events, METH_VARARGS,
     "resolve_events(ref, ref_ns, pending, n): (t0_ns, t1_ns) or None per pending entry."},
    {NULL},
};

int cudaev_init(PyObject *module) {
    if (PyType_Ready(&CudaEventType) < 0) return -1;
    Py_INCREF(&CudaEventType);
    if (PyModule_AddObject(module, "CudaEvent", (PyObject *)&CudaEventType) < 0) return -1;
    return PyModule_AddFunctions(module, cudaev_functions);
}
