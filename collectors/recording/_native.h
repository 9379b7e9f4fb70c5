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
    PyObject *boundary; /* the compiled call this thread is in (collectors/compiled.py), or NULL */
} TState;

/* GCC / clang: the functions every recorded call runs in one part of the text (`TK_HOT`: the
 * .text.hot section, next to each other), the code of its error paths out of the way
 * (`TK_COLD`: .text.unlikely), so that a call made cold touches fewer code lines and pages
 * (docs/BENCHMARKS.md, "tenth session"). */
#if defined(__GNUC__)
#define TK_HOT __attribute__((hot))
#define TK_COLD __attribute__((cold, noinline))
#else
#define TK_HOT
#define TK_COLD
#endif

/* A module attribute's truth, kept with the version of the module's dict it was read at
 * (_native_hotpath.c `module_flag`): while the dict is unchanged the flag is, and the call
 * reads one word of the dict object instead of looking the name up. */
typedef struct {
    PyObject *mod, *dict; /* the module and its dict (strong), NULL before the first read */
    unsigned long long tag;
    int value;
} FlagCache;

/* The recorder's hot attributes (_native_hot.c; state.py `HotState` on the Python path), the
 * fields a call reads first, together. */
typedef struct {
    PyObject_HEAD
    char active;
    PyObject *nvtx, *profile, *is_compiling, *compiler, *loc;
    PyObject *ts_cached, *ts_loc; /* the last thread's ThreadState and the `loc` it was found in */
    unsigned long long ts_id;     /* that thread's PyThreadState id (unique in the interpreter) */
    long long cycle, captures, seq; /* seq: the last call number `take_seq` gave */
    PyObject *rows, *next_seq;
    long long flush_bytes, flush_ns, last_flush, gpu_every;
    FlagCache compiling_flag, cuda_flag;
    PyObject *cuda, *capturing, *gpu_ref;
} Hot;

/* _native_hot.c: `Hot.take_seq()`, the process's next call number (the recorder's
 * `_next_seq` where the native path runs; PhaseCall steps `seq` itself). */
PyObject *hot_take_seq(PyObject *self, PyObject *unused);

extern PyTypeObject TStateType;
extern PyTypeObject HotType;
extern PyTypeObject PhaseCallType;

int hotpath_init(PyObject *module);
int cudaev_init(PyObject *module);
int gpu_init(void);
int hot_init(PyObject *module);
int io_init(PyObject *module);
int replay_init(PyObject *module);

/* _native_hotpath.c: this thread's ThreadState for the recorder `rec` (a new reference, made by
 * the recorder's `_thread` on first use; NULL with an error set, a TypeError where the
 * recorder's state is not the native type). */
TState *hot_thread_state(PyObject *rec, Hot *h);
/* _native_hotpath.c: `rec.fail(where, exc)` for the error set now (recording stops in the
 * process, said once); clears it. */
void hot_report_failure(PyObject *rec, const char *where);

/* _native_cuda.c: record a CudaEvent on torch's current stream (0; -1 with an error set), or 1
 * when `ev` is not one. */
int cudaev_record(PyObject *ev);

/* _native_gpu.c: gpu.py's `_gpu_begin` (0, *ev the start event, a new reference, or NULL when
 * the call is not GPU-timed; -1 with an error set) and `_gpu_end` (0 or -1) on the recorder's
 * instance dict `d`; `offset` is the hot path's clock offset. */
int gpu_begin(PyObject *rec, PyObject *d, Hot *h, TState *ts, long long cycle, long long offset,
              PyObject **ev);
int gpu_end(PyObject *d, TState *ts, long long seq, PyObject *ev, long long cycle,
            long long offset);
/* gpu.py `asks_capture`'s last rule: 1 when a top-level phase call at `cycle` may take a CUDA
 * event (a sampled cycle, the calibration, a call outside every cycle), 0 when it takes none,
 * -1 with an error set. */
int gpu_may_time(Hot *h, long long cycle);
/* `_drop_bound`: the thread's boundary slot emptied, its event out of `_bound_ids` (0 / -1). */
int gpu_drop_bound(PyObject *d, TState *ts);

#endif
