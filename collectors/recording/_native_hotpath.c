/* The recorder's hot path in C: the sync wrapper body of a phase or cycle site (`PhaseCall`) and the
 * per-thread state it reads (`ThreadState`). Built as tracekit.collectors.recording._native
 * (setup.py); collectors/recording/native.py loads it, or says why the Python path is used.
 *
 * PhaseCall does, per call, exactly what the Python body in hotpath.py (`HotPath.sync_call`)
 * does, in the same order, reading and writing the same recorder attributes (those every call
 * reads as the fields of its `_hot`, _native_hot.c; the rest through the recorder's instance
 * dict), so both write identical rows (tests/unit/collectors/
 * test_native_hotpath.py runs them side by side). Everything it does not handle itself (a
 * site's first calls, an NVTX tool, a profiler window, the GPU calibration) it hands to the
 * same Python methods the Python body calls, or to `generic`, the wrapper's plain enter/exit
 * body; the CUDA events' bookkeeping after the calibration is in C (_native_gpu.c).
 * A failure in its bookkeeping calls the recorder's `fail` (which disables recording and says
 * so once); the program's call and its exception are never touched.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "_native.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the packed row (tracekit/store/raw/schema.py ROW) is little-endian; this host is not"
#endif

#define ROW_SIZE 65 /* struct.Struct("<iqiiqqqqid?").size */

/* -- interned attribute names ------------------------------------------------------------ */

static PyObject *s_info, *s_flag, *s_initialized, *s_loc, *s_ts, *s_thread, *s_next_seq,
    *s_accept, *s_rows, *s_flush, *s_fail, *s_probe_torch, *s_torch, *s_cache_key,
    *s_cycle_codes;

static int intern_names(void) {
#define I(var, text) if (!(var = PyUnicode_InternFromString(text))) return -1
    I(s_info, "_info"); I(s_flag, "_is_compiling_flag"); I(s_initialized, "_initialized");
    I(s_loc, "_loc"); I(s_ts, "ts"); I(s_thread, "_thread"); I(s_next_seq, "_next_seq");
    I(s_accept, "_accept"); I(s_rows, "_rows"); I(s_flush, "_flush_due"); I(s_fail, "fail");
    I(s_probe_torch, "_probe_torch"); I(s_torch, "torch");
    I(s_cache_key, "tracekit.collectors.recording._native:thread");
    I(s_cycle_codes, "_cycle_codes");
#undef I
    return 0;
}

/* -- ThreadState ------------------------------------------------------------------------- */

static int ts_traverse(TState *self, visitproc visit, void *arg) {
    Py_VISIT(self->stack);
    Py_VISIT(self->bound);
    Py_VISIT(self->boundary);
    return 0;
}

static int ts_clear(TState *self) {
    Py_CLEAR(self->stack);
    Py_CLEAR(self->bound);
    Py_CLEAR(self->boundary);
    return 0;
}

static void ts_dealloc(TState *self) {
    PyObject_GC_UnTrack(self);
    ts_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ts_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "ThreadState() takes no arguments");
        return NULL;
    }
    TState *self = (TState *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->stack = PyList_New(0);
    if (!self->stack) { Py_DECREF(self); return NULL; }
    self->tid = (long long)PyThread_get_thread_native_id();
    return (PyObject *)self;
}

static PyMemberDef ts_members[] = {
    {"stack", T_OBJECT_EX, offsetof(TState, stack), 0, "open phase codes, innermost last"},
    {"tid", T_LONGLONG, offsetof(TState, tid), 0, "native thread id"},
    {"replays", T_LONGLONG, offsetof(TState, replays), 0, "graph replays counted so far"},
    {"in_cycle", T_BOOL, offsetof(TState, in_cycle), 0, "a cycle is open"},
    {"internal", T_BOOL, offsetof(TState, internal), 0, "tracekit's own calls"},
    {"bound", T_OBJECT, offsetof(TState, bound), 0, "the last boundary event, or None"},
    {"boundary", T_OBJECT, offsetof(TState, boundary), 0,
     "the compiled call this thread is in (collectors/compiled.py), or None"},
    {NULL},
};

PyTypeObject TStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracekit.collectors.recording._native.ThreadState",
    .tp_basicsize = sizeof(TState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Per-thread state of the recorder (same attributes as state.ThreadState).",
    .tp_new = ts_new,
    .tp_dealloc = (destructor)ts_dealloc,
    .tp_traverse = (traverseproc)ts_traverse,
    .tp_clear = (inquiry)ts_clear,
    .tp_members = ts_members,
};

/* -- PhaseCall --------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    /* what a recorded call reads, first */
    vectorcallfunc vectorcall;
    Hot *hot; /* the recorder's `_hot`: what every call reads, without a dict look-up */
    PyObject *fn, *dict, *rec, *code_obj, *acc_path;
    PyObject *seq_fn, *seq_iter; /* the recorder's `_next_seq` and the count it belongs to */
    long long clock_offset;
    long code;  /* phase code (-1: none, or not known yet) */
    long ccode; /* cycle code of a cycle target (-1 until known) */
    int ready;      /* the site's codes are known: its first calls went through `generic` */
    int has_phase;  /* the site names a phase (a cycle-only target has none) */
    int cycle_site; /* a cycle target (with or without a phase) */
    int starts_cycle;
    int seq_own; /* `seq_fn` is the Hot's own take_seq */
    int acc_simple, cacc_simple; /* the rules are plain attribute names (`read_acc`) */
    int direct; /* called as the function itself (a class attribute: binds like one) */
    int with_args; /* a rule reads the call's arguments: `_accept` is given them */
    PyObject *cacc_path; /* a cycle target's acceptance rule (the site's cycle_accept_len) */
    PyObject *acc_plan, *cacc_plan; /* the rules' argument plans (readings.arg_plan), or NULL */
    PyObject *site, *generic, *site_id;
    PyObject *wdict; /* the wrapper's attributes (functools.wraps: __name__, __wrapped__...) */
    PyObject *boundary; /* a compiled call's marker (compiled.py), set on the thread while it runs */
} PhaseCall;

/* The program's arguments, as the shim hands them (a tuple and a dict) or as a direct call
 * receives them (vectorcall): passed on to the function, or to `generic`, unchanged. */
typedef struct {
    PyObject *args, *kwargs;
    PyObject *const *argv;
    size_t nargsf;
    PyObject *kwnames;
} CallArgs;

static inline PyObject *invoke(PyObject *fn, const CallArgs *c) {
    return c->args ? PyObject_Call(fn, c->args, c->kwargs)
                   : PyObject_Vectorcall(fn, c->argv, c->nargsf, c->kwnames);
}

/* The last (recorder thread-local, ThreadState) pair this thread used, kept in the thread's
 * own state dict (freed with the thread): a `threading.local` attribute read saved a call.
 * It holds both objects, so a pointer is never reused under it. */

static inline long long now_ns(long long offset) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t); /* time.time_ns()'s clock */
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec + offset;
}

/* A recorder attribute (borrowed), NULL with no error when it is not in the instance dict. */
static inline PyObject *dget(PyObject *d, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (!v && PyErr_Occurred()) PyErr_Clear();
    return v;
}

/* An error of the hot path's own checks (-1), its code out of the hot functions' lines. */
static TK_COLD int fail_with(PyObject *type, const char *msg) {
    PyErr_SetString(type, msg);
    return -1;
}

static TK_COLD PyObject *no_attr(PyObject *name) {
    PyErr_SetObject(PyExc_AttributeError, name);
    return NULL;
}

/* The recorder's next call number: (PyObject *)1 when `_next_seq` is the struct's own
 * `take_seq` (the caller steps `hot->seq`), else `_next_seq()` as an int, stepping its
 * itertools.count directly while `_next_seq` is the `__next__` of that count. What the source is
 * is found once for each source (`seq_fn`, held): a call compares one pointer. */
static TK_COLD void learn_seq(PhaseCall *self, PyObject *fn) {
    Py_XSETREF(self->seq_fn, Py_NewRef(fn));
    Py_CLEAR(self->seq_iter);
    self->seq_own = PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == (PyObject *)self->hot &&
                    PyCFunction_GET_FUNCTION(fn) == (PyCFunction)hot_take_seq;
    if (self->seq_own) return;
    PyObject *owner = PyObject_GetAttrString(fn, "__self__");
    if (!owner) PyErr_Clear();
    if (owner && PyIter_Check(owner)) self->seq_iter = owner;
    else Py_XDECREF(owner);
}

static inline PyObject *next_seq(PhaseCall *self) {
    PyObject *fn = self->hot->next_seq;
    if (!fn || fn == Py_None) return no_attr(s_next_seq);
    if (fn != self->seq_fn) learn_seq(self, fn);
    if (self->seq_own) return (PyObject *)1; /* the struct's own counter: no int object */
    if (self->seq_iter) return Py_TYPE(self->seq_iter)->tp_iternext(self->seq_iter);
    return PyObject_CallNoArgs(fn);
}

TK_COLD void hot_report_failure(PyObject *rec, const char *where) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value && tb) PyException_SetTraceback(value, tb);
    PyObject *res = PyObject_CallMethod(rec, "fail", "sO", where, value ? value : Py_None);
    Py_XDECREF(res);
    PyErr_Clear();
    Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
}

static TK_COLD void report_failure(PhaseCall *self, const char *where) {
    hot_report_failure(self->rec, where);
}

/* This thread's state (new reference), made by the recorder's `_thread` on first use. The last
 * thread's is kept in `Hot` with its PyThreadState id (never reused in an interpreter) and the
 * `loc` it was found in: a program's thread that makes every call finds it there, without the
 * thread dict's look-up (docs/BENCHMARKS.md, "tenth session"); another thread looks it up. */
static TK_COLD PyObject *thread_state_slow(PyObject *rec, PyObject *loc);

TK_HOT TState *hot_thread_state(PyObject *rec, Hot *h) {
    PyObject *loc = h->loc;
    if (!loc || loc == Py_None) return (TState *)no_attr(s_loc);
    unsigned long long tid = PyThreadState_Get()->id;
    if (h->ts_cached && h->ts_loc == loc && h->ts_id == tid)
        return (TState *)Py_NewRef(h->ts_cached);
    PyObject *ts = thread_state_slow(rec, loc);
    if (!ts) return NULL;
    if (!Py_IS_TYPE(ts, &TStateType)) {
        Py_DECREF(ts);
        fail_with(PyExc_TypeError, "the recorder's thread state is not the native one");
        return NULL;
    }
    Py_XSETREF(h->ts_cached, Py_NewRef(ts));
    Py_XSETREF(h->ts_loc, Py_NewRef(loc));
    h->ts_id = tid;
    return (TState *)ts;
}

/* hot_thread_state's look-up: the thread dict's entry, else `loc.ts`, else `rec._thread()`. */
static TK_COLD PyObject *thread_state_slow(PyObject *rec, PyObject *loc) {
    PyObject *tdict = PyThreadState_GetDict(); /* borrowed; NULL only without a thread state */
    PyObject *hit = tdict ? PyDict_GetItemWithError(tdict, s_cache_key) : NULL;
    if (hit && PyTuple_GET_ITEM(hit, 0) == loc) {
        PyObject *ts = PyTuple_GET_ITEM(hit, 1);
        Py_INCREF(ts);
        return ts;
    }
    if (PyErr_Occurred()) return NULL;
    PyObject *ts = PyObject_GetAttr(loc, s_ts);
    if (!ts) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();
        ts = PyObject_CallMethodNoArgs(rec, s_thread);
        if (!ts) return NULL;
    }
    if (tdict) {
        PyObject *pair = PyTuple_Pack(2, loc, ts);
        if (!pair || PyDict_SetItem(tdict, s_cache_key, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(ts);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return ts;
}

/* gpu.py `asks_capture` for a top-level call: 1 when a torch capture is open in the process
 * (or captures are not counted: `_captures` not 0), else 1 only for a phase call that may take
 * a CUDA event (gpu_may_time at the cycle it will have), 0 when it takes none; -1: error. */
static int asks_capture(PhaseCall *self, TState *ts) {
    Hot *h = self->hot;
    if (h->captures != 0) return 1;
    if (!self->has_phase) return 0;
    long long cycle = h->cycle;
    if (!ts->in_cycle && (self->cycle_site || self->starts_cycle)) cycle += 1;
    return gpu_may_time(h, cycle);
}

/* The version of dict `d`: changed by every change of the dict (CPython 3.6 to 3.13; 3.14
 * has none: there every read looks the name up). */
#if PY_VERSION_HEX < 0x030E0000
#define TK_DICT_TAG 1
static inline unsigned long long dict_tag(PyObject *d) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return (unsigned long long)((PyDictObject *)d)->ma_version_tag;
#pragma GCC diagnostic pop
}
#endif

/* module_flag's look-up: read from the module's dict, not through `getattr` (whose type
 * look-up and generic path were most of the code and cache lines a cold call touched to read two
 * flags: docs/BENCHMARKS.md, "ninth session"); `getattr` only for an object that is not a plain
 * module or lacks the name in its dict. A plain bool found in the dict is kept in `fc` with
 * the dict's version. */
static TK_COLD int module_flag_slow(PyObject *mod, PyObject *name, FlagCache *fc) {
    PyObject *v = NULL;
    if (PyModule_CheckExact(mod)) {
        PyObject *d = PyModule_GetDict(mod);
        v = PyDict_GetItemWithError(d, name); /* borrowed */
        if (!v && PyErr_Occurred()) return -1;
        if (v == Py_True || v == Py_False) {
#ifdef TK_DICT_TAG
            Py_XSETREF(fc->mod, Py_NewRef(mod));
            Py_XSETREF(fc->dict, Py_NewRef(d));
            fc->tag = dict_tag(d);
            fc->value = v == Py_True;
#endif
            return v == Py_True;
        }
    }
    if (v) return PyObject_IsTrue(v);
    PyObject *r = PyObject_GetAttr(mod, name);
    if (!r) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* The truth of module attribute `name` (1 / 0; -1 with an error set): the value kept in `fc`
 * while the module's dict has not changed since it was read, else read again. */
static inline int module_flag(PyObject *mod, PyObject *name, FlagCache *fc) {
#ifdef TK_DICT_TAG
    if (fc->mod == mod && dict_tag(fc->dict) == fc->tag) return fc->value;
#endif
    return module_flag_slow(mod, name, fc);
}

/* 1: torch.compile traces / exports, or the current stream captures a CUDA graph (pass
 * through); 0: record; -1: error. *cuda_on: CUDA is initialised, read only where the call may
 * ask the capture query or take a CUDA event (else 0: the call needs neither). The capture query
 * (300-500 ns warm on the H200 host, 8-12 us right after a device wait; DEFINITIONS.md, "Hot
 * path") only at depth 0 (inside a recorded call the stream was not capturing when that call
 * started), and there only where `asks_capture` says a capture or a CUDA event can be. */
static inline int bypass(PhaseCall *self, int *cuda_on, TState *ts, Py_ssize_t depth) {
    Hot *h = self->hot;
    PyObject *comp = h->is_compiling;
    if (!comp || comp == Py_None) {
        PyObject *torch = PyDict_GetItemWithError(PyImport_GetModuleDict(), s_torch);
        if (!torch) return PyErr_Occurred() ? -1 : 0;
        PyObject *r = PyObject_CallMethodNoArgs(self->rec, s_probe_torch);
        if (!r) return -1;
        Py_DECREF(r);
        comp = h->is_compiling;
        if (!comp || comp == Py_None) return 0;
    }
    /* Dynamo never runs C code while it traces (the Python shim's first statement checks
     * it), so only the flag of export / AOT tracing / compile sessions is left to read. */
    PyObject *compiler = h->compiler;
    int skip = (compiler && compiler != Py_None) ? module_flag(compiler, s_flag, &h->compiling_flag) : -2;
    if (skip == -2) {
        PyObject *r = PyObject_CallNoArgs(comp);
        if (!r) return -1;
        skip = PyObject_IsTrue(r);
        Py_DECREF(r);
    }
    if (skip || depth) return skip;
    int ask = asks_capture(self, ts);
    if (ask <= 0) return ask;
    PyObject *cuda = h->cuda;
    if (!cuda || cuda == Py_None) return 0;
    *cuda_on = module_flag(cuda, s_initialized, &h->cuda_flag);
    if (*cuda_on <= 0) return *cuda_on < 0 ? -1 : 0;
    /* the builtin behind torch.cuda.is_current_stream_capturing (the probe's), else that */
    PyObject *cap = h->capturing;
    PyObject *r = (cap && cap != Py_None) ? PyObject_CallNoArgs(cap)
                                : PyObject_CallMethod(cuda, "is_current_stream_capturing", NULL);
    if (!r) return -1;
    skip = PyObject_IsTrue(r);
    Py_DECREF(r);
    return skip;
}

/* The recorder's `cycle` += 1. */
static inline void next_cycle(Hot *h) { h->cycle += 1; }

/* list.append(item) on the phase stack: in place while its allocation has room (it keeps the
 * room a pop left), else PyList_Append. 0 / -1. */
static inline int stack_push(PyObject *stack, PyObject *item) {
    PyListObject *l = (PyListObject *)stack;
    Py_ssize_t n = Py_SIZE(l);
    if (n >= l->allocated) return PyList_Append(stack, item);
    l->ob_item[n] = Py_NewRef(item);
    Py_SET_SIZE(l, n + 1);
    return 0;
}

typedef struct {
    TState *ts;
    PyObject *ev; /* the start CUDA event, or NULL */
    long long cycle, seq, rep0, start;
    int depth, parent;
    int ccode; /* the call opened a cycle: its cycle code, else -1 */
} Enter;

/* The `enter` half; 0: recording (e filled), 1: pass through, -1: error. */
static inline int do_enter(PhaseCall *self, PyObject *d, Enter *e) {
    int cuda_on = 0;
    TState *ts = hot_thread_state(self->rec, self->hot);
    if (!ts) return -1;
    PyObject *stack = ts->stack;
    if (!PyList_Check(stack)) {
        Py_DECREF(ts);
        return fail_with(PyExc_TypeError, "stack is not a list");
    }
    Py_ssize_t depth = PyList_GET_SIZE(stack);
    int skip = bypass(self, &cuda_on, ts, depth);
    if (skip || ts->internal) { Py_DECREF(ts); return skip ? skip : 1; }
    e->ts = ts; /* owned from here */
    e->depth = (int)depth;
    e->parent = -1;
    e->ccode = -1;
    if (self->cycle_site && !ts->in_cycle) { /* a cycle target's call starts a cycle */
        ts->in_cycle = 1;
        e->ccode = (int)self->ccode;
        next_cycle(self->hot);
        if (gpu_drop_bound(d, ts) < 0) return -1;
    }
    if (self->has_phase) {
        if (depth) {
            e->parent = (int)PyLong_AsLong(PyList_GET_ITEM(stack, depth - 1));
            if (e->parent == -1 && PyErr_Occurred()) return -1;
        } else if (self->starts_cycle && !ts->in_cycle) {
            next_cycle(self->hot);
        }
        if (stack_push(stack, self->code_obj) < 0) return -1;
    }
    e->cycle = self->hot->cycle;
    PyObject *seq = next_seq(self);
    if (!seq) {
        if (!PyErr_Occurred()) PyErr_SetNone(PyExc_StopIteration);
        return -1;
    }
    if (seq == (PyObject *)1) {
        e->seq = ++self->hot->seq;
    } else {
        e->seq = PyLong_AsLongLong(seq);
        Py_DECREF(seq);
        if (e->seq == -1 && PyErr_Occurred()) return -1;
    }
    e->rep0 = ts->replays;
    if (depth == 0 && self->has_phase) {
        if (cuda_on) {
            if (gpu_begin(self->rec, d, self->hot, ts, e->cycle, self->clock_offset, &e->ev) < 0)
                return -1;
        } else if (ts->bound && ts->bound != Py_None && gpu_drop_bound(d, ts) < 0) {
            return -1; /* a call that takes no event (gpu_begin's unsampled case) */
        }
    }
    e->start = now_ns(self->clock_offset);
    return 0;
}

/* Append one packed row to the bytearray `rows`: in place while its allocation has room (the
 * test `PyByteArray_Resize` makes first, without its call), else grown to twice the size needed
 * (`PyByteArray_Resize` alone grows by an eighth: a `realloc`, often a copy, every few rows
 * after a flush emptied the buffer), its size then set to the rows it holds. 0 / -1. */
static inline int append_row(PyObject *rows, const unsigned char *row) {
    PyByteArrayObject *b = (PyByteArrayObject *)rows;
    Py_ssize_t n = Py_SIZE(b), want = n + ROW_SIZE;
    if (b->ob_exports > 0 || want + (b->ob_start - b->ob_bytes) + 1 > b->ob_alloc) {
        if (b->ob_exports > 0) { /* a buffer view is open: only the plain resize may move it */
            if (PyByteArray_Resize(rows, want) < 0) return -1;
            memcpy(PyByteArray_AS_STRING(rows) + n, row, ROW_SIZE);
            return 0;
        }
        if (PyByteArray_Resize(rows, 2 * want) < 0) return -1;
    }
    memcpy(b->ob_start + n, row, ROW_SIZE);
    Py_SET_SIZE(b, want);
    b->ob_start[want] = '\0';
    return 0;
}

static inline int pack_row(PyObject *rows, long code, long long cycle, long depth, long parent,
                    long long tid, long long seq, long long start, long long end,
                    long long replays, double acc, int ok) {
    if (code < INT32_MIN || code > INT32_MAX || depth > INT32_MAX || parent < INT32_MIN ||
        parent > INT32_MAX || replays < INT32_MIN || replays > INT32_MAX)
        return fail_with(PyExc_OverflowError, "a row field is out of its int32 range");
    if (!PyByteArray_Check(rows))
        return fail_with(PyExc_TypeError, "the recorder's row buffer is not a bytearray");
    int32_t i32;
    unsigned char row[ROW_SIZE], *p = row;
#define PUT(v, T) do { T x_ = (T)(v); memcpy(p, &x_, sizeof x_); p += sizeof x_; } while (0)
    PUT(code, int32_t); PUT(cycle, int64_t); PUT(depth, int32_t); PUT(parent, int32_t);
    PUT(tid, int64_t); PUT(seq, int64_t); PUT(start, int64_t); PUT(end, int64_t);
    i32 = (int32_t)replays; PUT(i32, int32_t); PUT(acc, double);
    *p = ok ? 1 : 0;
#undef PUT
    return append_row(rows, row);
}

/* 1 when an acceptance rule is a plain attribute name (no `.`, not an index): read in C. */
static int simple_rule(PyObject *rule) {
    if (!PyUnicode_Check(rule) || PyUnicode_GET_LENGTH(rule) == 0) return 0;
    if (PyUnicode_FindChar(rule, '.', 0, PyUnicode_GET_LENGTH(rule), 1) != -1) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(rule);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!Py_UNICODE_ISDIGIT(PyUnicode_READ_CHAR(rule, i))) return 1;
    return 0; /* all digits: an index (readings.py) */
}

/* The call's arguments as `exit` takes them: the positional tuple (a new reference) and the
 * keywords (a new dict, or NULL for none); 0 / -1. */
static int call_args(const CallArgs *c, PyObject **args, PyObject **kwargs) {
    *kwargs = NULL;
    if (c->args) {
        *args = Py_NewRef(c->args);
        *kwargs = Py_XNewRef(c->kwargs);
        return 0;
    }
    Py_ssize_t n = PyVectorcall_NARGS(c->nargsf);
    *args = PyTuple_New(n);
    if (!*args) return -1;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(*args, i, Py_NewRef(c->argv[i]));
    Py_ssize_t nk = c->kwnames ? PyTuple_GET_SIZE(c->kwnames) : 0;
    if (!nk) return 0;
    *kwargs = PyDict_New();
    for (Py_ssize_t i = 0; *kwargs && i < nk; i++)
        if (PyDict_SetItem(*kwargs, PyTuple_GET_ITEM(c->kwnames, i), c->argv[n + i]) < 0)
            Py_CLEAR(*kwargs);
    if (*kwargs) return 0;
    Py_CLEAR(*args);
    return -1;
}

/* The argument a plan reads (borrowed): by keyword, else by position, else its default; NULL
 * (no error) when the call passed none and there is no default. */
static PyObject *plan_arg(PyObject *plan, const CallArgs *c) {
    PyObject *name = PyList_GET_ITEM(plan, 1), *dflt = PyList_GET_ITEM(plan, 3);
    Py_ssize_t pos = PyLong_AsSsize_t(PyList_GET_ITEM(plan, 2));
    if (c->args) {
        PyObject *v = c->kwargs ? PyDict_GetItemWithError(c->kwargs, name) : NULL;
        if (v || PyErr_Occurred()) return v;
        if (pos >= 0 && pos < PyTuple_GET_SIZE(c->args)) return PyTuple_GET_ITEM(c->args, pos);
    } else {
        Py_ssize_t n = PyVectorcall_NARGS(c->nargsf);
        Py_ssize_t nk = c->kwnames ? PyTuple_GET_SIZE(c->kwnames) : 0;
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *k = PyTuple_GET_ITEM(c->kwnames, i);
            if (k == name || PyUnicode_Compare(k, name) == 0) return c->argv[n + i];
        }
        if (pos >= 0 && pos < n) return c->argv[pos];
    }
    return PyTuple_Check(dflt) ? PyTuple_GET_ITEM(dflt, 0) : NULL;
}

/* The value a plan's steps read from `obj` (accept.py `evaluate`: attribute, or a mapping's
 * key; index; len), a new reference, or NULL with the step's error set. */
static PyObject *plan_value(PyObject *plan, PyObject *obj) {
    PyObject *steps = PyList_GET_ITEM(plan, 4);
    Py_INCREF(obj);
    for (Py_ssize_t i = 0; obj && i < PyTuple_GET_SIZE(steps); i++) {
        PyObject *step = PyTuple_GET_ITEM(steps, i), *arg = PyTuple_GET_ITEM(step, 1), *v;
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(step, 0));
        if (kind == 0)
            v = PyDict_Check(obj) ? PyObject_GetItem(obj, arg) : PyObject_GetAttr(obj, arg);
        else if (kind == 1) v = PyObject_GetItem(obj, arg);
        else {
            Py_ssize_t n = PyObject_Length(obj);
            v = n < 0 ? NULL : PyLong_FromSsize_t(n);
        }
        Py_SETREF(obj, v);
    }
    return obj;
}

/* A rule on an argument, read by its plan: a plain int or float is the number; any other
 * value goes to the recorder's `_accept_value` (readings.py `accept_value`). 1: not read (the
 * argument missing, a step failing: `_accept` reads it again and says why), 0 / -1. */
static int read_plan(PhaseCall *self, PyObject *plan, PyObject *rule, const CallArgs *c,
                     long long key, double *out) {
    PyObject *arg = plan_arg(plan, c);
    PyObject *v = arg ? plan_value(plan, arg) : NULL;
    if (!v) { PyErr_Clear(); return 1; }
    if (PyFloat_CheckExact(v)) { *out = PyFloat_AS_DOUBLE(v); Py_DECREF(v); return 0; }
    if (PyLong_CheckExact(v)) {
        double x = PyLong_AsDouble(v);
        if (!(x == -1.0 && PyErr_Occurred())) { *out = x; Py_DECREF(v); return 0; }
        PyErr_Clear();
    }
    PyObject *r = PyObject_CallMethod(self->rec, "_accept_value", "OOOL", v, rule, self->site, key);
    Py_DECREF(v);
    if (!r) return -1;
    *out = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* read_acc past its plain cases: a plan's rule read here while the rule is on, else the
 * recorder's `_accept` (readings.py), given the call's arguments where the site's rule reads
 * one (`with_args`), else none. */
static TK_COLD int read_acc_rule(PhaseCall *self, PyObject *result, PyObject *rule, int simple,
                                 PyObject *plan, const CallArgs *c, long long key, double *out) {
    if (plan && PyList_GET_ITEM(plan, 0) == Py_True) {
        int r = read_plan(self, plan, rule, c, key, out);
        if (r <= 0) return r;
    }
    if (simple && !PyDict_Check(result)) {
        PyObject *v = PyObject_GetAttr(result, rule);
        if (!v) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) { PyErr_Clear(); return 0; }
            PyErr_Clear(); /* anything else: readings.py decides (and says) */
        } else if (v == Py_None || PyBool_Check(v)) {
            Py_DECREF(v);
            return 0;
        } else if (PyFloat_CheckExact(v)) {
            *out = PyFloat_AS_DOUBLE(v);
            Py_DECREF(v);
            return 0;
        } else if (PyLong_CheckExact(v)) {
            double x = PyLong_AsDouble(v);
            Py_DECREF(v);
            if (!(x == -1.0 && PyErr_Occurred())) { *out = x; return 0; }
            PyErr_Clear();
        } else {
            Py_DECREF(v);
        }
    }
    PyObject *args = NULL, *kwargs = NULL;
    if (self->with_args && call_args(c, &args, &kwargs) < 0) return -1;
    PyObject *r = args ? PyObject_CallMethod(self->rec, "_accept", "OOOOOL", result, rule, args,
                                             kwargs ? kwargs : Py_None, self->site, key)
                       : PyObject_CallMethod(self->rec, "_accept", "OO()OOL", result, rule,
                                             Py_None, self->site, key);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    if (!r) return -1;
    *out = PyFloat_AsDouble(r);
    Py_DECREF(r);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* A call's acceptance by `rule` (the site's, or its cycle's), NaN without one; `key` keys the
 * per-request readings (readings.py `read_accept`, which this is: a plain attribute holding
 * None, a bool, an int or a float is read here, anything else there). */
static inline int read_acc(PhaseCall *self, PyObject *result, PyObject *rule, int simple,
                           PyObject *plan, const CallArgs *c, long long key, double *out) {
    *out = NAN;
    if (!result || rule == Py_None) return 0;
    return read_acc_rule(self, result, rule, simple, plan, c, key, out);
}

/* The `exit` half, after the call; -1: error (the caller reports it). The rows, in order: the
 * phase's (a phase site), then the cycle's (a call that opened a cycle: seq, or -seq beside a
 * phase row), as the generic `exit` writes them. */
static inline int do_exit(PhaseCall *self, PyObject *d, Enter *e, PyObject *result,
                          const CallArgs *c) {
    long long end = now_ns(self->clock_offset);
    TState *ts = e->ts;
    if (e->ev && gpu_end(d, ts, e->seq, e->ev, e->cycle, self->clock_offset) < 0) return -1;
    long long replays = ts->replays - e->rep0;
    Hot *h = self->hot;
    PyObject *rows = h->rows;
    if (!rows) { no_attr(s_rows); return -1; }
    double acc;
    if (self->has_phase) {
        PyObject *stack = ts->stack;
        if (!PyList_Check(stack)) return fail_with(PyExc_TypeError, "stack is not a list");
        Py_ssize_t n = PyList_GET_SIZE(stack);
        if (!n) return fail_with(PyExc_IndexError, "pop from empty list");
        PyObject *top = PyList_GET_ITEM(stack, n - 1); /* list.pop(): the size shrinks, the */
        Py_SET_SIZE(stack, n - 1);                     /* allocation stays for the next push */
        Py_DECREF(top);
        if (read_acc(self, result, self->acc_path, self->acc_simple, self->acc_plan, c, e->seq,
                     &acc) < 0 ||
            pack_row(rows, self->code, e->cycle, e->depth, e->parent, ts->tid, e->seq,
                     e->start, end, replays, acc, result != NULL) < 0)
            return -1;
    }
    if (e->ccode >= 0) {
        ts->in_cycle = 0;
        if (gpu_drop_bound(d, ts) < 0 ||
            read_acc(self, result, self->cacc_path, self->cacc_simple, self->cacc_plan, c, -e->seq,
                     &acc) < 0 ||
            pack_row(rows, e->ccode, e->cycle, e->depth, -1, ts->tid,
                     self->has_phase ? -e->seq : e->seq, e->start, end, replays, acc,
                     result != NULL) < 0)
            return -1;
    }
    if (e->depth == 0) {
        long long nb = PyByteArray_GET_SIZE(rows), fb = h->flush_bytes;
        if ((nb >= fb || end - h->last_flush >= h->flush_ns) && (!ts->in_cycle || nb >= 4 * fb)) {
            PyObject *r = PyObject_CallMethodNoArgs(self->rec, s_flush);
            if (!r) return -1;
            Py_DECREF(r);
        }
    }
    return 0;
}

/* A code the generic path registered: `table[id(site)]` (its first item for a tuple), or -1. */
static long registered(PyObject *d, PyObject *name, PyObject *site_id) {
    PyObject *table = dget(d, name);
    long code = -1;
    if (table && PyDict_Check(table)) {
        PyObject *v = PyDict_GetItemWithError(table, site_id);
        if (v && PyTuple_Check(v) && PyTuple_GET_SIZE(v) > 0) v = PyTuple_GET_ITEM(v, 0);
        if (v && PyLong_Check(v)) code = PyLong_AsLong(v);
    }
    PyErr_Clear();
    return code;
}

/* After a call through `generic`: the site's phase code (`_info`) and, for a cycle target,
 * its cycle code (`_cycle_codes`, made when one of its calls first opened a cycle); the C
 * body takes over once every code the site needs is known. */
static TK_COLD void learn_codes(PhaseCall *self, PyObject *d) {
    if (self->has_phase && self->code < 0) {
        long code = registered(d, s_info, self->site_id);
        PyObject *co = code >= 0 ? PyLong_FromLong(code) : NULL;
        if (co) { Py_XSETREF(self->code_obj, co); self->code = code; }
        PyErr_Clear();
    }
    if (self->cycle_site && self->ccode < 0) self->ccode = registered(d, s_cycle_codes, self->site_id);
    self->ready = (!self->has_phase || self->code >= 0) && (!self->cycle_site || self->ccode >= 0);
}

/* A recording call: the site's first calls through `generic`, then enter, the call, exit. */
static inline PyObject *pc_record(PhaseCall *self, const CallArgs *c) {
    PyObject *d = self->dict;
    Hot *h = self->hot;
    if (!self->ready || h->nvtx != Py_None || h->profile != Py_None) {
        if (!self->ready) learn_codes(self, d);
        return invoke(self->generic, c);
    }
    Enter e = {0};
    int st = do_enter(self, d, &e);
    if (st) {
        if (st < 0) report_failure(self, "enter");
        Py_XDECREF(e.ts);
        Py_XDECREF(e.ev);
        return invoke(self->fn, c);
    }
    PyObject *result = invoke(self->fn, c);
    PyObject *et = NULL, *ev = NULL, *etb = NULL;
    if (!result) PyErr_Fetch(&et, &ev, &etb); /* the program's exception, given back below */
    if (do_exit(self, d, &e, result, c) < 0) report_failure(self, "exit");
    Py_DECREF(e.ts);
    Py_XDECREF(e.ev);
    if (!result) PyErr_Restore(et, ev, etb);
    return result;
}

/* A compiled callable's call (`boundary` set): the thread's current compiled call is the
 * boundary's marker while it runs (a recompile during it finds its boundary: compiled.py
 * `Boundaries.traced`), the previous one after, as the Python path's `ThreadState.boundary`. */
static TK_HOT PyObject *pc_boundary_call(PhaseCall *self, const CallArgs *c) {
    TState *ts = hot_thread_state(self->rec, self->hot);
    if (!ts) {
        report_failure(self, "compiled boundary");
        return invoke(self->fn, c);
    }
    PyObject *prev = ts->boundary; /* owned: given back below */
    ts->boundary = Py_NewRef(self->boundary);
    PyObject *result = pc_record(self, c);
    PyObject *mine = ts->boundary;
    ts->boundary = prev;
    Py_XDECREF(mine);
    Py_DECREF(ts);
    return result;
}

static TK_HOT PyObject *pc_call(PhaseCall *self, const CallArgs *c) {
    if (!self->hot->active) return invoke(self->fn, c);
    if (self->boundary) return pc_boundary_call(self, c);
    return pc_record(self, c);
}

static PyObject *pc_vectorcall(PyObject *self, PyObject *const *argv, size_t nargsf,
                               PyObject *kwnames);

/* None, or readings.arg_plan's [on, name, position, (default,) | None, ((kind, arg), ...)]. */
static int valid_plan(PyObject *p) {
    if (p == Py_None) return 1;
    if (!PyList_CheckExact(p) || PyList_GET_SIZE(p) != 5) return 0;
    PyObject *steps = PyList_GET_ITEM(p, 4), *dflt = PyList_GET_ITEM(p, 3);
    if (!PyUnicode_Check(PyList_GET_ITEM(p, 1)) || !PyLong_Check(PyList_GET_ITEM(p, 2)) ||
        !PyTuple_Check(steps) ||
        !(dflt == Py_None || (PyTuple_Check(dflt) && PyTuple_GET_SIZE(dflt) == 1)))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps); i++) {
        PyObject *st = PyTuple_GET_ITEM(steps, i);
        if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) != 2 ||
            !PyLong_Check(PyTuple_GET_ITEM(st, 0)))
            return 0;
    }
    return 1;
}

static PyObject *pc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"rec", "fn", "site", "generic", "acc_path", "starts_cycle",
                         "clock_offset", "cycle", "has_phase", "cycle_acc_path", "boundary",
                         "with_args", "acc_plan", "cycle_acc_plan", NULL};
    PyObject *rec, *fn, *site, *generic, *acc_path, *cacc_path = Py_None, *boundary = Py_None;
    PyObject *acc_plan = Py_None, *cacc_plan = Py_None;
    int starts_cycle, cycle = 0, has_phase = 1, with_args = 0;
    long long offset;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOpL|ppOOpOO", kw, &rec, &fn, &site, &generic,
                                     &acc_path, &starts_cycle, &offset, &cycle, &has_phase,
                                     &cacc_path, &boundary, &with_args, &acc_plan, &cacc_plan))
        return NULL;
    if (!valid_plan(acc_plan) || !valid_plan(cacc_plan)) {
        PyErr_SetString(PyExc_TypeError, "an argument plan is readings.arg_plan's list");
        return NULL;
    }
    PyObject *hot = PyObject_GetAttrString(rec, "_hot");
    if (!hot) return NULL;
    if (!Py_IS_TYPE(hot, &HotType)) {
        Py_DECREF(hot);
        PyErr_SetString(PyExc_TypeError, "the recorder's _hot is not the native Hot");
        return NULL;
    }
    PyObject *dict = PyObject_GenericGetDict(rec, NULL);
    if (!dict) { Py_DECREF(hot); return NULL; }
    PhaseCall *self = (PhaseCall *)type->tp_alloc(type, 0);
    if (!self) { Py_DECREF(dict); Py_DECREF(hot); return NULL; }
    self->dict = dict;
    self->hot = (Hot *)hot;
    self->vectorcall = pc_vectorcall;
    Py_INCREF(rec); self->rec = rec;
    Py_INCREF(fn); self->fn = fn;
    Py_INCREF(site); self->site = site;
    Py_INCREF(generic); self->generic = generic;
    Py_INCREF(acc_path); self->acc_path = acc_path;
    self->cacc_path = Py_NewRef(cacc_path);
    self->acc_simple = simple_rule(acc_path);
    self->cacc_simple = simple_rule(cacc_path);
    self->cycle_site = cycle;
    self->has_phase = has_phase;
    self->ccode = -1;
    self->site_id = PyLong_FromVoidPtr(site);
    self->code_obj = PyLong_FromLong(-1);
    self->code = -1;
    self->starts_cycle = starts_cycle;
    self->clock_offset = offset;
    self->boundary = boundary == Py_None ? NULL : Py_NewRef(boundary);
    self->with_args = with_args;
    self->acc_plan = acc_plan == Py_None ? NULL : Py_NewRef(acc_plan);
    self->cacc_plan = cacc_plan == Py_None ? NULL : Py_NewRef(cacc_plan);
    if (!self->site_id || !self->code_obj) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}

static PyObject *pc_direct_vectorcall(PyObject *self, PyObject *const *argv, size_t nargsf,
                                      PyObject *kwnames);

/* PhaseCall.direct(): a new PhaseCall for the same site, called as the function itself. */
static PyObject *pc_direct(PhaseCall *self, PyObject *unused) {
    PhaseCall *d = (PhaseCall *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (!d) return NULL;
    d->dict = Py_NewRef(self->dict);
    d->hot = (Hot *)Py_NewRef((PyObject *)self->hot);
    d->rec = Py_NewRef(self->rec);
    d->fn = Py_NewRef(self->fn);
    d->site = Py_NewRef(self->site);
    d->generic = Py_NewRef(self->generic);
    d->acc_path = Py_NewRef(self->acc_path);
    d->cacc_path = Py_NewRef(self->cacc_path);
    d->acc_plan = Py_XNewRef(self->acc_plan);
    d->cacc_plan = Py_XNewRef(self->cacc_plan);
    d->acc_simple = self->acc_simple;
    d->cacc_simple = self->cacc_simple;
    d->cycle_site = self->cycle_site;
    d->has_phase = self->has_phase;
    d->ready = self->ready;
    d->ccode = self->ccode;
    d->site_id = Py_NewRef(self->site_id);
    d->code_obj = Py_NewRef(self->code_obj);
    d->code = self->code;
    d->starts_cycle = self->starts_cycle;
    d->clock_offset = self->clock_offset;
    d->boundary = Py_XNewRef(self->boundary);
    d->with_args = self->with_args;
    d->direct = 1;
    d->vectorcall = pc_direct_vectorcall;
    return (PyObject *)d;
}

/* <function Worker.draft (tracekit)>: what a traceback or a log shows of a direct call. */
static PyObject *pc_repr(PhaseCall *self) {
    PyObject *name = self->wdict ? PyDict_GetItemString(self->wdict, "__qualname__") : NULL;
    if (name && PyUnicode_Check(name)) return PyUnicode_FromFormat("<function %U (tracekit)>", name);
    return PyUnicode_FromFormat("<tracekit PhaseCall at %p>", (void *)self);
}

/* A direct PhaseCall binds like a function: on an instance, a method of it. */
static PyObject *pc_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None || !((PhaseCall *)self)->direct) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int pc_traverse(PhaseCall *self, visitproc visit, void *arg) {
    Py_VISIT(self->rec); Py_VISIT(self->dict); Py_VISIT(self->fn); Py_VISIT(self->site);
    Py_VISIT(self->generic); Py_VISIT(self->acc_path); Py_VISIT(self->cacc_path);
    Py_VISIT(self->acc_plan); Py_VISIT(self->cacc_plan); Py_VISIT(self->seq_fn);
    Py_VISIT(self->seq_iter); Py_VISIT(self->wdict); Py_VISIT(self->hot);
    Py_VISIT(self->boundary);
    return 0;
}

static int pc_clear(PhaseCall *self) {
    Py_CLEAR(self->rec); Py_CLEAR(self->dict); Py_CLEAR(self->fn); Py_CLEAR(self->site);
    Py_CLEAR(self->generic); Py_CLEAR(self->acc_path); Py_CLEAR(self->cacc_path);
    Py_CLEAR(self->acc_plan); Py_CLEAR(self->cacc_plan); Py_CLEAR(self->site_id);
    Py_CLEAR(self->code_obj); Py_CLEAR(self->seq_fn); Py_CLEAR(self->seq_iter);
    Py_CLEAR(self->wdict);
    Py_CLEAR(self->hot);
    Py_CLEAR(self->boundary);
    return 0;
}

static void pc_dealloc(PhaseCall *self) {
    PyObject_GC_UnTrack(self);
    pc_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pc_get_code(PhaseCall *self, void *closure) { return PyLong_FromLong(self->code); }

static PyObject *pc_get_ccode(PhaseCall *self, void *closure) {
    return PyLong_FromLong(self->ccode);
}

static PyObject *pc_get_direct(PhaseCall *self, void *closure) {
    return PyBool_FromLong(self->direct);
}

static PyGetSetDef pc_getset[] = {
    {"code", (getter)pc_get_code, NULL, "the site's phase code, -1 before it is known", NULL},
    {"cycle_code", (getter)pc_get_ccode, NULL, "a cycle target's cycle code, else -1", NULL},
    {"is_direct", (getter)pc_get_direct, NULL, "called as the function itself (direct())", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyMethodDef pc_methods[] = {
    {"direct", (PyCFunction)pc_direct, METH_NOARGS,
     "A PhaseCall for the same site called as the function itself, binding like one."},
    {NULL},
};

/* The shim's call: native(args, kwargs), the wrapper's own tuple and dict passed as they are
 * (no copy of either; an empty dict is no keywords). */
static TK_HOT PyObject *pc_vectorcall(PyObject *self, PyObject *const *argv, size_t nargsf,
                                      PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 2 || kwnames || !PyTuple_Check(argv[0]) || !PyDict_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "PhaseCall takes (args tuple, kwargs dict)");
        return NULL;
    }
    CallArgs c = {argv[0], PyDict_GET_SIZE(argv[1]) ? argv[1] : NULL, NULL, 0, NULL};
    return pc_call((PhaseCall *)self, &c);
}

/* A direct PhaseCall's call: the program's arguments as they came, passed on as they are. */
static TK_HOT PyObject *pc_direct_vectorcall(PyObject *self, PyObject *const *argv,
                                             size_t nargsf, PyObject *kwnames) {
    CallArgs c = {NULL, NULL, argv, nargsf, kwnames};
    return pc_call((PhaseCall *)self, &c);
}

PyTypeObject PhaseCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracekit.collectors.recording._native.PhaseCall",
    .tp_basicsize = sizeof(PhaseCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "PhaseCall(rec, fn, site, generic, acc_path, starts_cycle, clock_offset, cycle=False, "
              "has_phase=True, cycle_acc_path=None, boundary=None, with_args=False): the recording body of a phase or cycle "
              "site's sync wrapper (HotPath.sync_call), called as native(args, kwargs).",
    .tp_new = pc_new,
    .tp_vectorcall_offset = offsetof(PhaseCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)pc_dealloc,
    .tp_traverse = (traverseproc)pc_traverse,
    .tp_clear = (inquiry)pc_clear,
    .tp_getset = pc_getset,
    .tp_methods = pc_methods,
    .tp_descr_get = pc_descr_get,
    .tp_repr = (reprfunc)pc_repr,
    .tp_dictoffset = offsetof(PhaseCall, wdict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
};

int hotpath_init(PyObject *module) {
    if (intern_names() < 0) return -1;
    if (PyType_Ready(&TStateType) < 0 || PyType_Ready(&PhaseCallType) < 0) return -1;
    Py_INCREF(&TStateType);
    if (PyModule_AddObject(module, "ThreadState", (PyObject *)&TStateType) < 0) return -1;
    Py_INCREF(&PhaseCallType);
    if (PyModule_AddObject(module, "PhaseCall", (PyObject *)&PhaseCallType) < 0) return -1;
    return 0;
}
