/* Interning for the columnar scanner: strings of the input -> codes in first-seen order.
 * Part of _kscan.c (included once, there). */
#ifndef TRACEKIT_KSCAN_INTERN_H
#define TRACEKIT_KSCAN_INTERN_H

/* ------------------------------------------------------------------------------------------ */
/* Interning: strings (spans of the input) -> codes in first-seen order, per batch.           */

typedef struct {
    Py_ssize_t cap, n;
    int32_t *slots; /* code + 1; 0 = empty */
    uint64_t *hashes;
    const uc **ptrs;
    Py_ssize_t *lens;
    PyObject *list;
} Interner;

static int interner_init(Interner *t) {
    t->cap = 1024;
    t->n = 0;
    t->slots = calloc((size_t)t->cap, sizeof(int32_t));
    t->hashes = malloc(sizeof(uint64_t) * (size_t)t->cap);
    t->ptrs = malloc(sizeof(uc *) * (size_t)t->cap);
    t->lens = malloc(sizeof(Py_ssize_t) * (size_t)t->cap);
    t->list = PyList_New(0);
    return (t->slots && t->hashes && t->ptrs && t->lens && t->list) ? 0 : -1;
}

static void interner_free(Interner *t) {
    free(t->slots);
    free(t->hashes);
    free(t->ptrs);
    free(t->lens);
    Py_XDECREF(t->list);
}

static inline uint64_t hash_bytes(const uc *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h = (h ^ load8(p + i)) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    if (i < n) memcpy(&tail, p + i, (size_t)(n - i));
    h = (h ^ tail) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 32);
}

static int interner_grow(Interner *t) {
    Py_ssize_t cap = t->cap * 2;
    int32_t *slots = calloc((size_t)cap, sizeof(int32_t));
    uint64_t *hashes = realloc(t->hashes, sizeof(uint64_t) * (size_t)cap);
    if (hashes) t->hashes = hashes;
    const uc **ptrs = realloc(t->ptrs, sizeof(uc *) * (size_t)cap);
    if (ptrs) t->ptrs = ptrs;
    Py_ssize_t *lens = realloc(t->lens, sizeof(Py_ssize_t) * (size_t)cap);
    if (lens) t->lens = lens;
    if (!slots || !hashes || !ptrs || !lens) {
        free(slots);
        return -1;
    }
    for (Py_ssize_t c = 0; c < t->n; c++) {
        Py_ssize_t i = (Py_ssize_t)(t->hashes[c] & (uint64_t)(cap - 1));
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = (int32_t)(c + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* The code of the string p[0:n] (UTF-8, already validated, no escapes); -2 on error. */
static int32_t intern(Interner *t, const uc *p, Py_ssize_t n) {
    uint64_t h = hash_bytes(p, n);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->slots[i]) {
        int32_t c = t->slots[i] - 1;
        if (t->hashes[c] == h && t->lens[c] == n && memcmp(t->ptrs[c], p, (size_t)n) == 0)
            return c;
        i = (i + 1) & (t->cap - 1);
    }
    if (t->n >= INT32_MAX - 1) {
        PyErr_NoMemory();
        return -2;
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (!s) return -2;
    int r = PyList_Append(t->list, s);
    Py_DECREF(s);
    if (r < 0) return -2;
    int32_t c = (int32_t)t->n++;
    t->slots[i] = c + 1;
    t->hashes[c] = h;
    t->ptrs[c] = p;
    t->lens[c] = n;
    if (t->n * 2 > t->cap && interner_grow(t) < 0) {
        PyErr_NoMemory();
        return -2;
    }
    return c;
}

#endif
