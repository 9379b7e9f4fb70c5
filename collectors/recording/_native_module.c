/* tracekit.collectors.recording._native: the recorder's hot path (_native_hotpath.c), its CUDA-event
 * bookkeeping (_native_gpu.c) and CUDA events through the driver API (_native_cuda.c), the
 * flush thread's system calls (_native_io.c), the CUDA graph replay count (_native_replay.c). Optional: collectors/recording/native.py falls back to
 * the Python path, with the same records, when it does not load. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_native.h"

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracekit.collectors.recording._native",
    .m_doc = "The recorder's native hot path and driver-API CUDA events.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&native_module);
    if (!m) return NULL;
    if (hot_init(m) < 0 || io_init(m) < 0 || replay_init(m) < 0 || hotpath_init(m) < 0 || cudaev_init(m) < 0 || gpu_init() < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
