/* Shared declarations of the native hot path (tracekit.collectors.recording._native). */
#ifndef TRACEKIT_NATIVE_H
#define TRACEKIT_NATIVE_H
#include <Python.h>

/* Per-thread recorder state: the attributes of collectors/recording/state.py's ThreadState. */
typedef struct {
    PyObject_HEAD
    PyObject *stack; /* list of open phase codes */
    long long tid;
    long long replays;
    char in_cycle;
    char internal;
    PyObject *bound;
} TState;

extern PyTypeObject TStateType;
extern PyTypeObject PhaseCallType;

int hotpath_init(PyObject *module);
int cudaev_init(PyObject *module);

#endif
