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

static PyTypeObject CudaEventType;

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

/* driver_error(): None when the driver API loads, else why it does not. */
static PyObject *driver_error(PyObject *mod, PyObject *unused) {
    if (load_driver() == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(load_error);
}

static PyMethodDef cudaev_functions[] = {
    {"driver_error", driver_error, METH_NOARGS,
     "None when libcuda's event API loads, else the reason it does not."},
    {NULL},
};

int cudaev_init(PyObject *module) {
    if (PyType_Ready(&CudaEventType) < 0) return -1;
    Py_INCREF(&CudaEventType);
    if (PyModule_AddObject(module, "CudaEvent", (PyObject *)&CudaEventType) < 0) return -1;
    return PyModule_AddFunctions(module, cudaev_functions);
}
