/* The recorder's hot attributes in one small object (`Hot`, state.py `HotState` on the Python
 * path): what the hot path reads every call (recording on, the compile and capture checks, the
 * cycle, call numbers, the row buffer and the flush rule, the GPU sampling), kept apart from the
 * recorder's instance dict of about 70 attributes. The recorder's own attributes of the same
 * names (`active`, `cycle`, `_rows`, ...) are properties over it (state.py), so Python code reads
 * and writes them as before; PhaseCall reads them as struct fields, with no dict look-up, no key
 * string and no int object touched (right after a device wait each of those is a cache miss:
 * docs/BENCHMARKS.md, "eighth session"). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_native.h"

static PyObject *hot_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Hot() takes no arguments");
        return NULL;
    }
    Hot *self = (Hot *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->active = 1;
    self->cycle = -1;
    self->captures = -1;
    self->gpu_every = 1;
    PyObject **objs[] = {&self->nvtx,     &self->profile,  &self->is_compiling, &self->compiler,
                         &self->cuda,     &self->capturing, &self->gpu_ref,     &self->next_seq,
                         &self->rows,     &self->loc};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) *objs[i] = Py_NewRef(Py_None);
    return (PyObject *)self;
}

static int hot_traverse(Hot *self, visitproc visit, void *arg) {
    Py_VISIT(self->nvtx); Py_VISIT(self->profile); Py_VISIT(self->is_compiling);
    Py_VISIT(self->compiler); Py_VISIT(self->cuda); Py_VISIT(self->capturing);
    Py_VISIT(self->gpu_ref); Py_VISIT(self->next_seq); Py_VISIT(self->rows); Py_VISIT(self->loc);
    Py_VISIT(self->ts_cached); Py_VISIT(self->ts_loc);
    Py_VISIT(self->compiling_flag.mod); Py_VISIT(self->compiling_flag.dict);
    Py_VISIT(self->cuda_flag.mod); Py_VISIT(self->cuda_flag.dict);
    return 0;
}

static int hot_clear(Hot *self) {
    Py_CLEAR(self->nvtx); Py_CLEAR(self->profile); Py_CLEAR(self->is_compiling);
    Py_CLEAR(self->compiler); Py_CLEAR(self->cuda); Py_CLEAR(self->capturing);
    Py_CLEAR(self->gpu_ref); Py_CLEAR(self->next_seq); Py_CLEAR(self->rows); Py_CLEAR(self->loc);
    Py_CLEAR(self->ts_cached); Py_CLEAR(self->ts_loc);
    Py_CLEAR(self->compiling_flag.mod); Py_CLEAR(self->compiling_flag.dict);
    Py_CLEAR(self->cuda_flag.mod); Py_CLEAR(self->cuda_flag.dict);
    return 0;
}

static void hot_dealloc(Hot *self) {
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define LL(name, doc) {#name, T_LONGLONG, offsetof(Hot, name), 0, doc}
#define OB(name, doc) {#name, T_OBJECT, offsetof(Hot, name), 0, doc}
static PyMemberDef hot_members[] = {
    {"active", T_BOOL, offsetof(Hot, active), 0, "recording on (set_recording)"},
    LL(cycle, "the recorder's current cycle number"),
    LL(captures, "torch CUDA graph captures open in the process; -1: not counted"),
    LL(gpu_every, "--gpu-sample: CUDA events on one cycle in N"),
    LL(flush_bytes, "buffered bytes that start a flush"),
    LL(flush_ns, "the flush interval, ns"),
    LL(last_flush, "time.time_ns() of the last flush"),
    OB(nvtx, "the NVTX domain, or None"),
    OB(profile, "the profiler window, or None"),
    OB(is_compiling, "torch's compile check, or None before torch is probed"),
    OB(compiler, "torch.compiler when its flag is read directly, or None"),
    OB(cuda, "torch.cuda, or None"),
    OB(capturing, "torch's capture query, or None"),
    OB(gpu_ref, "the GPU clock's reference (event, ns), or None before the calibration"),
    OB(next_seq, "the call numbers' source: take_seq (stepped in C), or a count's __next__"),
    OB(rows, "the row buffer (bytearray)"),
    OB(loc, "the recorder's threading.local"),
    {NULL},
};
#undef LL
#undef OB

PyObject *hot_take_seq(PyObject *self, PyObject *unused) {
    return PyLong_FromLongLong(++((Hot *)self)->seq); /* under the GIL: one number a call */
}

static PyMethodDef hot_methods[] = {
    {"take_seq", hot_take_seq, METH_NOARGS,
     "the next call number (1, 2, ...): the recorder's `_next_seq` on the native path"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject HotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracekit.collectors.recording._native.Hot",
    .tp_basicsize = sizeof(Hot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The recorder's hot attributes (same fields as state.HotState).",
    .tp_new = hot_new,
    .tp_dealloc = (destructor)hot_dealloc,
    .tp_traverse = (traverseproc)hot_traverse,
    .tp_clear = (inquiry)hot_clear,
    .tp_members = hot_members,
    .tp_methods = hot_methods,
};

int hot_init(PyObject *module) {
    if (PyType_Ready(&HotType) < 0) return -1;
    Py_INCREF(&HotType);
    return PyModule_AddObject(module, "Hot", (PyObject *)&HotType);
}
