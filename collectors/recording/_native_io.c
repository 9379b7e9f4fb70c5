/* The flush thread's system calls, each group in one release of the GIL (collectors/recording/
 * fileops.py is the Python side and the fallback).
 *
 * Every system call a Python thread makes through `os` releases the GIL and takes it back. While
 * the program's thread runs Python, taking it back waits a switch interval (5 ms) and then makes
 * the program's thread give it up: two context switches of the program's thread for each. A
 * flush made about 14 such calls (the doorbell's poll and reads, the record batch, process.json's
 * open, write, close and rename, ...): 25-28 switches of the program's thread a flush, about 2 us
 * a recorded call on this VM at 40 flushes a second (docs/BENCHMARKS.md, "ninth session"). Here
 * a flush's writes are one call and the doorbell's wait with its drain another. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

#include "_native.h"

enum { OP_FD, OP_APPEND, OP_REPLACE };

typedef struct {
    int kind, fd;
    const char *path, *tmp, *data;
    Py_ssize_t len;
} FileOp;

static int write_all(int fd, const char *p, Py_ssize_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, (size_t)n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= w;
    }
    return 0;
}

/* Write `data` to a file opened with `flags`; 0, or -1 with errno set. */
static int write_file(const char *path, int flags, const char *data, Py_ssize_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
    if (fd < 0) return -1;
    int rc = write_all(fd, data, len), err = errno;
    if (close(fd) < 0 && rc == 0) return -1;
    errno = err;
    return rc;
}

/* 0, or -1 with errno set and *where the file that failed. */
static int run_op(const FileOp *op, const char **where) {
    switch (op->kind) {
    case OP_FD:
        *where = NULL;
        return write_all(op->fd, op->data, op->len);
    case OP_APPEND:
        *where = op->path;
        return write_file(op->path, O_APPEND, op->data, op->len);
    default:
        *where = op->tmp;
        if (write_file(op->tmp, O_TRUNC, op->data, op->len) < 0) {
            int err = errno;
            unlink(op->tmp);
            errno = err;
            return -1;
        }
        *where = op->path;
        return rename(op->tmp, op->path);
    }
}

/* One op from its tuple: ("fd", fd, data), ("append", path, data), ("replace", path, data, tmp),
 * paths and data as bytes. 0, or -1 with an error set. */
static int parse_op(PyObject *t, FileOp *op) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 3 || !PyUnicode_Check(PyTuple_GET_ITEM(t, 0))
        || !PyBytes_Check(PyTuple_GET_ITEM(t, 2))) {
        PyErr_SetString(PyExc_TypeError, "file_ops: an op is (kind, target, data bytes[, tmp])");
        return -1;
    }
    const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0));
    PyObject *target = PyTuple_GET_ITEM(t, 1), *data = PyTuple_GET_ITEM(t, 2);
    if (!kind) return -1;
    op->data = PyBytes_AS_STRING(data);
    op->len = PyBytes_GET_SIZE(data);
    if (strcmp(kind, "fd") == 0) {
        op->kind = OP_FD;
        long fd = PyLong_AsLong(target);
        if (fd == -1 && PyErr_Occurred()) return -1;
        op->fd = (int)fd;
        return 0;
    }
    if (!PyBytes_Check(target)) {
        PyErr_SetString(PyExc_TypeError, "file_ops: a path is bytes (os.fsencode)");
        return -1;
    }
    op->path = PyBytes_AS_STRING(target);
    if (strcmp(kind, "append") == 0) {
        op->kind = OP_APPEND;
        return 0;
    }
    if (strcmp(kind, "replace") == 0 && PyTuple_GET_SIZE(t) == 4
        && PyBytes_Check(PyTuple_GET_ITEM(t, 3))) {
        op->kind = OP_REPLACE;
        op->tmp = PyBytes_AS_STRING(PyTuple_GET_ITEM(t, 3));
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "file_ops: unknown op %s", kind);
    return -1;
}

/* file_ops(ops): run the ops in order, the GIL released once; None when all ran, else
 * (index, errno, file) of the first that failed (the ones after it are not run). */
static PyObject *file_ops(PyObject *self, PyObject *arg) {
    PyObject *ops = PySequence_Tuple(arg); /* ours: nothing frees the data while we write */
    if (!ops) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(ops), failed = -1;
    FileOp *parsed = PyMem_Calloc(n ? (size_t)n : 1, sizeof(FileOp));
    if (!parsed) {
        Py_DECREF(ops);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parse_op(PyTuple_GET_ITEM(ops, i), &parsed[i]) < 0) {
            PyMem_Free(parsed);
            Py_DECREF(ops);
            return NULL;
        }
    }
    const char *where = NULL;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (run_op(&parsed[i], &where) < 0) {
            failed = i;
            err = errno;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *res = failed < 0 ? Py_NewRef(Py_None)
                               : Py_BuildValue("(niy)", failed, err, where ? where : "");
    PyMem_Free(parsed);
    Py_DECREF(ops);
    return res;
}

/* Read what is there (non-blocking fd); the count of `ask` bytes, or -1 when it was closed. */
static long drain(int fd, char ask) {
    char buf[4096];
    long asked = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return asked;
        for (ssize_t i = 0; i < r; i++) asked += buf[i] == ask;
        if ((size_t)r < sizeof buf) return asked;
    }
}

/* poll_drain(read_fd, fifo_fd, timeout_ms, ask): wait for either descriptor (-1: none), drain
 * both, the GIL released throughout; (woken, ask bytes read). An error of poll: (False, 0). */
static PyObject *poll_drain(PyObject *self, PyObject *args) {
    int fds[2], timeout;
    char ask;
    if (!PyArg_ParseTuple(args, "iiic", &fds[0], &fds[1], &timeout, &ask)) return NULL;
    struct pollfd p[2];
    nfds_t n = 0;
    for (int i = 0; i < 2; i++) {
        if (fds[i] >= 0) {
            p[n].fd = fds[i];
            p[n].events = POLLIN;
            p[n].revents = 0;
            n++;
        }
    }
    int ready;
    long asked = 0;
    int woken = 0;
    Py_BEGIN_ALLOW_THREADS
    ready = poll(p, n, timeout);
    for (nfds_t i = 0; ready > 0 && i < n; i++) {
        if (p[i].revents & POLLIN) {
            asked += drain(p[i].fd, ask);
            woken = 1;
        }
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Nl)", PyBool_FromLong(woken), asked);
}

static PyMethodDef io_methods[] = {
    {"file_ops", file_ops, METH_O,
     "file_ops(ops): the flush's writes in order, the GIL released once; None, or (index, "
     "errno, file) of the first that failed"},
    {"poll_drain", poll_drain, METH_VARARGS,
     "poll_drain(read_fd, fifo_fd, timeout_ms, ask): wait and drain, the GIL released once; "
     "(woken, ask bytes)"},
    {NULL, NULL, 0, NULL},
};

int io_init(PyObject *module) { return PyModule_AddFunctions(module, io_methods); }
