/* `ReplayCount`: torch's `CUDAGraph.replay` with the recorder's replay count in front of it
 * (collectors/graphs.py installs it; its Python function is the fallback). While recording, each
 * replay adds one to the calling thread's `replays` (ThreadState), which a phase call reads at its
 * start and end (`graph_replays`); then torch's replay runs with the arguments as they came.
 *
 * A C callable rather than the Python function: no frame, no thread-local look-up through
 * `threading.local`, no int objects a replay. On the H200 a compiled HF decode call (cudagraph
 * trees: one replay a call) cost about 3 us more with the Python count than without it (per call,
 * recording switched every 8 calls; intervals of +-3 us: docs/BENCHMARKS.md, "ninth session");
 * what the C count saves there was within that noise. A method descriptor, so `graph.replay()`
 * calls it with the graph first and no bound method made. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

#include "_native.h"

typedef struct {
    PyObject_HEAD
    PyObject *orig; /* torch's replay */
    PyObject *rec;  /* the recorder: its `_thread` and `fail` */
    Hot *hot;
    PyObject *dict; /* functools.wraps's attributes (__wrapped__, __name__, ...) */
    vectorcallfunc vectorcall;
} ReplayCount;

static TK_HOT PyObject *rc_vectorcall(PyObject *obj, PyObject *const *argv, size_t nargsf,
                               PyObject *kwnames) {
    ReplayCount *self = (ReplayCount *)obj;
    if (self->hot->active) {
        TState *ts = hot_thread_state(self->rec, self->hot);
        if (ts) {
            ts->replays += 1;
            Py_DECREF(ts);
        } else { /* recording stops; the replay runs */
            hot_report_failure(self->rec, "graph replay count");
        }
    }
    return PyObject_Vectorcall(self->orig, argv, nargsf, kwnames);
}

static PyObject *rc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *orig, *rec, *hot;
    if (!PyArg_ParseTuple(args, "OOO!:ReplayCount", &orig, &rec, &HotType, &hot)) return NULL;
    ReplayCount *self = (ReplayCount *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->orig = Py_NewRef(orig);
    self->rec = Py_NewRef(rec);
    self->hot = (Hot *)Py_NewRef(hot);
    self->vectorcall = rc_vectorcall;
    return (PyObject *)self;
}

static PyObject *rc_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (!obj || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int rc_traverse(ReplayCount *self, visitproc visit, void *arg) {
    Py_VISIT(self->orig); Py_VISIT(self->rec); Py_VISIT(self->hot); Py_VISIT(self->dict);
    return 0;
}

static int rc_clear(ReplayCount *self) {
    Py_CLEAR(self->orig); Py_CLEAR(self->rec); Py_CLEAR(self->hot); Py_CLEAR(self->dict);
    return 0;
}

static void rc_dealloc(ReplayCount *self) {
    PyObject_GC_UnTrack(self);
    rc_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef rc_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

PyTypeObject ReplayCountType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracekit.collectors.recording._native.ReplayCount",
    .tp_basicsize = sizeof(ReplayCount),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "ReplayCount(replay, recorder, hot): torch's CUDAGraph.replay, counted per thread "
              "while recording (collectors/graphs.py)",
    .tp_new = rc_new,
    .tp_dealloc = (destructor)rc_dealloc,
    .tp_traverse = (traverseproc)rc_traverse,
    .tp_clear = (inquiry)rc_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(ReplayCount, vectorcall),
    .tp_descr_get = rc_descr_get,
    .tp_dictoffset = offsetof(ReplayCount, dict),
    .tp_getset = rc_getset,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
};

int replay_init(PyObject *module) {
    if (PyType_Ready(&ReplayCountType) < 0) return -1;
    Py_INCREF(&ReplayCountType);
    return PyModule_AddObject(module, "ReplayCount", (PyObject *)&ReplayCountType);
}
