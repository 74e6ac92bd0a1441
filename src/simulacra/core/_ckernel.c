/* simulacra.core._ckernel: compiled fast paths for the pure-Python kernel.
 *
 * This module does not define a kernel of its own. It accelerates the classes
 * of simulacra.core._kernel and simulacra.resources._resources in place: at
 * import, install() replaces a few of their hot methods by C functions
 * (method descriptors, so CPython's call specialisation applies) that work on
 * the very same __slots__ objects, reading and writing slots by the offsets
 * of their member descriptors. Each C function takes the fast path only for
 * the exact kernel types and the common inputs; for anything else (a
 * subclass, a keyword argument, keyed ordering, an int clock, ...) it calls
 * the original Python method, which it keeps. Every error, every rare path and
 * every message is therefore the pure kernel's own; only the fast paths are
 * C, and each of them is a line-by-line transcription of the Python code it
 * replaces (the comments name it). docs/design.md, "Compiled kernel", says
 * why, and tests/core/test_compiled_kernel.py checks the two against each
 * other.
 *
 * State is process-global (single-phase init): one set of kernel classes per
 * process. install() refuses a second, different set (a sub-interpreter),
 * which then falls back to the pure kernel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

/* ------------------------------------------------------------------ state */

static int installed = 0;
static int resources_installed = 0;

static PyTypeObject *EventT, *ProcessT, *SimT, *BucketT, *DequeT;
static PyTypeObject *ResourceT, *StoreT;
static PyObject *kdict;           /* simulacra.core._kernel.__dict__ */
static PyObject *PENDING, *DONE, *FUTURE, *START, *StopRun;

/* Event slots (Process inherits them at the same offsets). */
static Py_ssize_t o_cbs, o_data, o_ok, o_owner, o_value, o_waiter, o_sim;
/* Process slots. */
static Py_ssize_t o_gen, o_target;
/* Sim slots. */
static Py_ssize_t s_now, s_active, s_buckets, s_times, s_ubuckets, s_urgentq, s_timedq,
    s_nowq, s_keyed, s_plain, s_now_append, s_npid;
/* _Bucket.when */
static Py_ssize_t b_when;
/* Resource slots. */
static Py_ssize_t r_marker, r_users, r_queue, r_busy, r_capacity, r_grants, r_qarea, r_qmax,
    r_sim, r_release_cbs, r_wsum, r_wmax;
/* Store slots (_PutGetResource's and Store's). */
static Py_ssize_t t_put_cbs, t_get_cbs, t_put_queue, t_get_queue, t_items, t_capacity,
    t_larea, t_last, t_lmax, t_puts, t_gets, t_waiting, t_sim, t_gwait, t_pwait;

/* The original Python methods, called for everything off the fast paths. */
static PyObject *orig_run_fifo, *orig_delay, *orig_spawn, *orig_succeed, *orig_exit,
    *orig_request, *orig_grant_next, *orig_put, *orig_get;

/* Interned names. */
static PyObject *n_cbs, *n_data, *n_ok, *n_owner, *n_value, *n_waiter, *n_sim, *n_gen,
    *n_target, *n_send, *n_finish, *n_wait_on, *n_process_failed, *n_requeue_stopped,
    *n_resume, *n_popleft, *n_append, *n_extend, *n_cancel, *n_grant_head, *n_when,
    *n_ELIDE_REFS, *n_submit, *n_now_append;

/* ------------------------------------------------------------------ helpers */

static inline int is_ev(PyObject *o) {
    PyTypeObject *t = Py_TYPE(o);
    return t == EventT || t == ProcessT;
}

/* `o.<name>` for an Event slot: direct for the exact kernel types, else (a
 * subclass, another object, an unset slot) the generic lookup, which raises
 * exactly what Python raises. Returns a new reference. */
static inline PyObject *ev_get(PyObject *o, Py_ssize_t off, PyObject *name) {
    if (is_ev(o)) {
        PyObject *v = SLOT(o, off);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(o, name);
}

static inline int ev_set(PyObject *o, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (is_ev(o)) {
        PyObject *old = SLOT(o, off);
        Py_INCREF(v);
        SLOT(o, off) = v;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(o, name, v);
}

static inline PyObject *pr_get(PyObject *o, Py_ssize_t off, PyObject *name) {
    if (Py_TYPE(o) == ProcessT) {
        PyObject *v = SLOT(o, off);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(o, name);
}

static inline int pr_set(PyObject *o, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (Py_TYPE(o) == ProcessT) {
        PyObject *old = SLOT(o, off);
        Py_INCREF(v);
        SLOT(o, off) = v;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(o, name, v);
}

/* Set a slot of an object of a known exact type (a fresh object, a Sim, a Resource). */
static inline void slot_set(PyObject *o, Py_ssize_t off, PyObject *v) {
    PyObject *old = SLOT(o, off);
    Py_INCREF(v);
    SLOT(o, off) = v;
    Py_XDECREF(old);
}

static inline void slot_steal(PyObject *o, Py_ssize_t off, PyObject *v) {
    PyObject *old = SLOT(o, off);
    SLOT(o, off) = v;
    Py_XDECREF(old);
}

/* Call *func* (an original Python method) as func(self, *args, **kw). */
static PyObject *call_orig(PyObject *func, PyObject *self, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    Py_ssize_t total = nargs + nkw;
    PyObject *small[9];
    PyObject **stack = small;
    if (total + 1 > 9) {
        stack = PyMem_Malloc((total + 1) * sizeof(PyObject *));
        if (stack == NULL) return PyErr_NoMemory();
    }
    stack[0] = self;
    for (Py_ssize_t i = 0; i < total; i++) stack[i + 1] = args[i];
    PyObject *r = PyObject_Vectorcall(func, stack, nargs + 1, kwnames);
    if (stack != small) PyMem_Free(stack);
    return r;
}

/* heapq's siftdown and siftup (Modules/_heapqmodule.c), with a float fast path
 * for the comparison: the same layout, the same result. */
static inline int lt(PyObject *a, PyObject *b) {
    if (PyFloat_CheckExact(a) && PyFloat_CheckExact(b))
        return PyFloat_AS_DOUBLE(a) < PyFloat_AS_DOUBLE(b);
    Py_INCREF(a);
    Py_INCREF(b);
    int r = PyObject_RichCompareBool(a, b, Py_LT);
    Py_DECREF(a);
    Py_DECREF(b);
    return r;
}

static int siftdown(PyObject *heap, Py_ssize_t startpos, Py_ssize_t pos) {
    Py_ssize_t size = PyList_GET_SIZE(heap);
    PyObject **arr = ((PyListObject *)heap)->ob_item;
    while (pos > startpos) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        int cmp = lt(arr[pos], arr[parentpos]);
        if (cmp < 0) return -1;
        if (size != PyList_GET_SIZE(heap)) {
            PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
            return -1;
        }
        if (cmp == 0) break;
        arr = ((PyListObject *)heap)->ob_item;
        PyObject *parent = arr[parentpos];
        arr[parentpos] = arr[pos];
        arr[pos] = parent;
        pos = parentpos;
    }
    return 0;
}

static int siftup(PyObject *heap, Py_ssize_t pos) {
    Py_ssize_t endpos = PyList_GET_SIZE(heap), startpos = pos;
    PyObject **arr = ((PyListObject *)heap)->ob_item;
    Py_ssize_t limit = endpos >> 1;
    while (pos < limit) {
        Py_ssize_t childpos = 2 * pos + 1;
        if (childpos + 1 < endpos) {
            int cmp = lt(arr[childpos], arr[childpos + 1]);
            if (cmp < 0) return -1;
            childpos += ((unsigned)cmp ^ 1);
            arr = ((PyListObject *)heap)->ob_item;
            if (endpos != PyList_GET_SIZE(heap)) {
                PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
                return -1;
            }
        }
        PyObject *tmp = arr[childpos];
        arr[childpos] = arr[pos];
        arr[pos] = tmp;
        pos = childpos;
    }
    return siftdown(heap, startpos, pos);
}

static int heap_push(PyObject *heap, PyObject *item) {
    if (PyList_Append(heap, item) < 0) return -1;
    return siftdown(heap, 0, PyList_GET_SIZE(heap) - 1);
}

static PyObject *heap_pop(PyObject *heap) {
    Py_ssize_t n = PyList_GET_SIZE(heap);
    if (n == 0) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    PyObject *last = PyList_GET_ITEM(heap, n - 1);
    Py_INCREF(last);
    if (PyList_SetSlice(heap, n - 1, n, NULL) < 0) {
        Py_DECREF(last);
        return NULL;
    }
    if (n - 1 == 0) return last;
    PyObject *ret = PyList_GET_ITEM(heap, 0);
    PyList_SET_ITEM(heap, 0, last);
    if (siftup(heap, 0) < 0) {
        Py_DECREF(ret);
        return NULL;
    }
    return ret;
}

/* ------------------------------------------------------------------ TimeHeap */

/* The compiled kernel's `Sim._times`: heapq's binary heap of the distinct
 * future times, with each time's double stored beside its object, so that the
 * comparisons of float times read no object (a list of floats costs a cache
 * miss per comparison once the heap is large). The layout is heapq's (the same
 * siftdown and siftup), a pop returns the very object pushed, and any time that
 * is not an exact float (an int clock, say) is compared as heapq compares it.
 * The kernel's module-level heappush/heappop are replaced by ck_heappush and
 * ck_heappop, which take a TimeHeap or a list. */
typedef struct {
    double d;
    PyObject *o;
} TEntry;

typedef struct {
    PyObject_HEAD
    TEntry *a;
    Py_ssize_t n, cap;
    Py_ssize_t nonfloat; /* entries whose object is not an exact float */
} TimeHeap;

static PyTypeObject TimeHeapType;

static inline int te_lt(TimeHeap *h, TEntry *x, TEntry *y, int *err) {
    if (h->nonfloat == 0 || (PyFloat_CheckExact(x->o) && PyFloat_CheckExact(y->o)))
        return x->d < y->d;
    Py_ssize_t n = h->n;
    PyObject *a = x->o, *b = y->o;
    Py_INCREF(a);
    Py_INCREF(b);
    int r = PyObject_RichCompareBool(a, b, Py_LT);
    Py_DECREF(a);
    Py_DECREF(b);
    if (r < 0) *err = 1;
    else if (n != h->n) {
        PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
        *err = 1;
    }
    return r;
}

static int th_siftdown(TimeHeap *h, Py_ssize_t startpos, Py_ssize_t pos) {
    int err = 0;
    while (pos > startpos) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        int cmp = te_lt(h, &h->a[pos], &h->a[parentpos], &err);
        if (err) return -1;
        if (cmp == 0) break;
        TEntry t = h->a[parentpos];
        h->a[parentpos] = h->a[pos];
        h->a[pos] = t;
        pos = parentpos;
    }
    return 0;
}

static int th_siftup(TimeHeap *h, Py_ssize_t pos) {
    Py_ssize_t endpos = h->n, startpos = pos, limit = endpos >> 1;
    int err = 0;
    while (pos < limit) {
        Py_ssize_t childpos = 2 * pos + 1;
        /* The path always goes down to a leaf: fetch the entries two and three
         * levels below ahead of time (a large heap is a cache miss per level). */
        if (4 * pos + 3 < endpos) PREFETCH(&h->a[4 * pos + 3]);
        if (8 * pos + 7 < endpos) PREFETCH(&h->a[8 * pos + 7]);
        if (childpos + 1 < endpos) {
            int cmp = te_lt(h, &h->a[childpos], &h->a[childpos + 1], &err);
            if (err) return -1;
            childpos += ((unsigned)cmp ^ 1);
        }
        TEntry t = h->a[childpos];
        h->a[childpos] = h->a[pos];
        h->a[pos] = t;
        pos = childpos;
    }
    return th_siftdown(h, startpos, pos);
}

static double as_key(PyObject *o) {
    if (PyFloat_CheckExact(o)) return PyFloat_AS_DOUBLE(o);
    return 0.0; /* never compared as a double: see te_lt */
}

static int th_push(TimeHeap *h, PyObject *o) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? h->cap * 2 : 16;
        TEntry *a = PyMem_Realloc(h->a, cap * sizeof(TEntry));
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        h->a = a;
        h->cap = cap;
    }
    Py_INCREF(o);
    h->a[h->n].d = as_key(o);
    h->a[h->n].o = o;
    if (!PyFloat_CheckExact(o)) h->nonfloat++;
    h->n++;
    return th_siftdown(h, 0, h->n - 1);
}

static PyObject *th_pop(TimeHeap *h) {
    if (h->n == 0) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    TEntry last = h->a[--h->n];
    PyObject *ret;
    if (h->n == 0) {
        ret = last.o;
    } else {
        ret = h->a[0].o;
        h->a[0] = last;
        if (th_siftup(h, 0) < 0) {
            /* heapq has already taken the item out: so do we */
            if (!PyFloat_CheckExact(ret)) h->nonfloat--;
            Py_DECREF(ret);
            return NULL;
        }
    }
    if (!PyFloat_CheckExact(ret)) h->nonfloat--;
    return ret;
}

static PyObject *th_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw != NULL && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "TimeHeap() takes no arguments");
        return NULL;
    }
    TimeHeap *h = (TimeHeap *)tp->tp_alloc(tp, 0);
    return (PyObject *)h;
}

static int th_traverse(TimeHeap *h, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < h->n; i++) Py_VISIT(h->a[i].o);
    return 0;
}

static int th_clear(TimeHeap *h) {
    Py_ssize_t n = h->n;
    h->n = 0;
    h->nonfloat = 0;
    for (Py_ssize_t i = 0; i < n; i++) Py_CLEAR(h->a[i].o);
    return 0;
}

static void th_dealloc(TimeHeap *h) {
    PyObject_GC_UnTrack(h);
    th_clear(h);
    PyMem_Free(h->a);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static Py_ssize_t th_len(TimeHeap *h) { return h->n; }

static PyObject *th_item(TimeHeap *h, Py_ssize_t i) {
    if (i < 0 || i >= h->n) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    Py_INCREF(h->a[i].o);
    return h->a[i].o;
}

static PyObject *th_aslist(TimeHeap *h) {
    PyObject *l = PyList_New(h->n);
    if (l == NULL) return NULL;
    for (Py_ssize_t i = 0; i < h->n; i++) {
        Py_INCREF(h->a[i].o);
        PyList_SET_ITEM(l, i, h->a[i].o);
    }
    return l;
}

static PyObject *th_repr(TimeHeap *h) {
    PyObject *l = th_aslist(h);
    if (l == NULL) return NULL;
    PyObject *r = PyObject_Repr(l);
    Py_DECREF(l);
    return r;
}

static PyObject *th_richcompare(PyObject *a, PyObject *b, int op) {
    /* Compares as the list it stands for (with lists and other TimeHeaps). */
    if (!(PyList_Check(b) || Py_TYPE(b) == &TimeHeapType) ||
        !(PyList_Check(a) || Py_TYPE(a) == &TimeHeapType))
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *la = Py_TYPE(a) == &TimeHeapType ? th_aslist((TimeHeap *)a) : Py_NewRef(a);
    PyObject *lb = Py_TYPE(b) == &TimeHeapType ? th_aslist((TimeHeap *)b) : Py_NewRef(b);
    PyObject *r = (la && lb) ? PyObject_RichCompare(la, lb, op) : NULL;
    Py_XDECREF(la);
    Py_XDECREF(lb);
    return r;
}

static PySequenceMethods th_as_sequence = {
    .sq_length = (lenfunc)th_len,
    .sq_item = (ssizeargfunc)th_item,
};

static PyTypeObject TimeHeapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulacra.core._ckernel.TimeHeap",
    .tp_basicsize = sizeof(TimeHeap),
    .tp_dealloc = (destructor)th_dealloc,
    .tp_repr = (reprfunc)th_repr,
    .tp_as_sequence = &th_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The heap of a Sim's distinct future times (the compiled kernel's Sim._times).",
    .tp_traverse = (traverseproc)th_traverse,
    .tp_clear = (inquiry)th_clear,
    .tp_richcompare = th_richcompare,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_new = th_new,
};

/* heappush(heap, item) and heappop(heap) for the kernel module: a TimeHeap, or
 * a list (heapq's algorithm, so the same result as heapq's). */
static PyObject *ck_heappush(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "heappush expected 2 arguments, got %zd", nargs);
        return NULL;
    }
    int r;
    if (Py_TYPE(args[0]) == &TimeHeapType) {
        r = th_push((TimeHeap *)args[0], args[1]);
    } else if (PyList_Check(args[0])) {
        r = heap_push(args[0], args[1]);
    } else {
        PyErr_SetString(PyExc_TypeError, "heap argument must be a list");
        return NULL;
    }
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *ck_heappop(PyObject *m, PyObject *heap) {
    if (Py_TYPE(heap) == &TimeHeapType) return th_pop((TimeHeap *)heap);
    if (PyList_Check(heap)) return heap_pop(heap);
    PyErr_SetString(PyExc_TypeError, "heap argument must be a list");
    return NULL;
}

static inline Py_ssize_t times_len(PyObject *t) {
    return Py_TYPE(t) == &TimeHeapType ? ((TimeHeap *)t)->n : PyList_GET_SIZE(t);
}

static inline int is_times(PyObject *t) {
    return Py_TYPE(t) == &TimeHeapType || PyList_CheckExact(t);
}

static inline int times_push(PyObject *t, PyObject *o) {
    return Py_TYPE(t) == &TimeHeapType ? th_push((TimeHeap *)t, o) : heap_push(t, o);
}

static inline PyObject *times_pop(PyObject *t) {
    return Py_TYPE(t) == &TimeHeapType ? th_pop((TimeHeap *)t) : heap_pop(t);
}

/* `d.pop(key)` (must) or `d.pop(key, None)` of an exact dict: a new reference,
 * or NULL (with KeyError if *must*). */
static PyObject *dict_pop(PyObject *d, PyObject *key, int must) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *v;
    int r = PyDict_Pop(d, key, &v);
    if (r == 0 && must) PyErr_SetObject(PyExc_KeyError, key);
    return r > 0 ? v : NULL;
#else
    if (!must) {
        PyObject *v = _PyDict_Pop(d, key, Py_None);
        if (v == Py_None) {
            Py_DECREF(v);
            return NULL;
        }
        return v;
    }
    return _PyDict_Pop(d, key, NULL);
#endif
}

/* ------------------------------------------------------------------ TimeMap */

/* The compiled kernel's Sim._buckets: the map from each distinct future time to
 * its event (or _Bucket of events, or the process waiting there on an elided
 * delay). While every key is a plain float (an exact float, not a NaN) it is an
 * open-addressing table keyed by the float's bits, with the key and value in
 * the slot itself: one cache line to find a time, where a dict reads its index
 * table and then its entry table, and no float hash. The run loop also knows
 * the next time in the heap, so it fetches that time's slot ahead of its turn.
 * The first key that is not a plain float (an int clock, a NaN) turns the map
 * into a dict for good: from then on every operation is the dict's, so keys
 * that are equal across types (1 and 1.0) stay one key. It offers what the
 * kernel's Python code uses of a dict; items, keys and values are lists, in no
 * particular order (nothing in the kernel depends on the order). */
typedef struct {
    uint64_t bits; /* the key's bits; -0.0 as 0.0 */
    PyObject *key; /* NULL: an empty slot */
    PyObject *value;
} MSlot;

typedef struct {
    PyObject_HEAD
    MSlot *t;
    Py_ssize_t n, cap; /* cap: 0, or a power of two, at least twice n */
    int shift;         /* 64 - log2(cap) */
    PyObject *dict;    /* non-NULL: the map is this dict */
} TimeMap;

static PyTypeObject TimeMapType;

static inline int tm_plain(PyObject *key) {
    return PyFloat_CheckExact(key) && !isnan(PyFloat_AS_DOUBLE(key));
}

static inline uint64_t tm_bits(double d) {
    uint64_t b;
    if (d == 0.0) return 0;
    memcpy(&b, &d, sizeof b);
    return b;
}

static inline Py_ssize_t tm_home(const TimeMap *m, uint64_t bits) {
    bits ^= bits >> 29;
    return (Py_ssize_t)((bits * 0x9E3779B97F4A7C15ULL) >> m->shift);
}

/* The slot holding *bits*, or the empty slot where it would go. */
static inline MSlot *tm_probe(const TimeMap *m, uint64_t bits) {
    Py_ssize_t mask = m->cap - 1, i = tm_home(m, bits);
    for (;;) {
        MSlot *s = &m->t[i];
        if (s->key == NULL || s->bits == bits) return s;
        i = (i + 1) & mask;
    }
}

/* Fetch ahead the slot of *key*: the run loop's next time. */
static inline void tm_prefetch(PyObject *map, double d) {
    TimeMap *m = (TimeMap *)map;
    if (m->t != NULL) PREFETCH(&m->t[tm_home(m, tm_bits(d))]);
}

static int tm_resize(TimeMap *m, Py_ssize_t cap) {
    MSlot *old = m->t, *t = PyMem_Calloc((size_t)cap, sizeof(MSlot));
    Py_ssize_t oldcap = m->cap;
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int shift = 64;
    for (Py_ssize_t c = cap; c > 1; c >>= 1) shift--;
    m->t = t;
    m->cap = cap;
    m->shift = shift;
    for (Py_ssize_t i = 0; i < oldcap; i++)
        if (old[i].key != NULL) *tm_probe(m, old[i].bits) = old[i];
    PyMem_Free(old);
    return 0;
}

static int tm_clear(TimeMap *m);

/* For good: every key and value moves into a dict. */
static int tm_to_dict(TimeMap *m) {
    if (m->dict != NULL) return 0;
    PyObject *d = PyDict_New();
    if (d == NULL) return -1;
    for (Py_ssize_t i = 0; i < m->cap; i++)
        if (m->t[i].key != NULL && PyDict_SetItem(d, m->t[i].key, m->t[i].value) < 0) {
            Py_DECREF(d);
            return -1;
        }
    tm_clear(m);
    m->dict = d;
    return 0;
}

/* Remove the (full) slot *s*: shift back the run of slots after it. */
static void tm_remove(TimeMap *m, MSlot *s) {
    Py_ssize_t mask = m->cap - 1, i = s - m->t, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->t[j].key == NULL) break;
        Py_ssize_t k = tm_home(m, m->t[j].bits);
        /* m->t[j] may fill the hole at i unless its home lies cyclically in (i, j]. */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            m->t[i] = m->t[j];
            i = j;
        }
    }
    m->t[i].key = NULL;
    m->t[i].value = NULL;
    m->n--;
}

/* The value of *key*, borrowed; NULL if there is none (an error set only on failure). */
static PyObject *tm_get(TimeMap *m, PyObject *key) {
    if (m->dict == NULL) {
        if (tm_plain(key)) {
            if (m->t == NULL) return NULL;
            MSlot *s = tm_probe(m, tm_bits(PyFloat_AS_DOUBLE(key)));
            return s->key != NULL ? s->value : NULL;
        }
        if (tm_to_dict(m) < 0) return NULL;
    }
    return PyDict_GetItemWithError(m->dict, key);
}

/* m[key] = value, or with *only_new* setdefault: the value now there, borrowed. */
static PyObject *tm_put(TimeMap *m, PyObject *key, PyObject *value, int only_new) {
    if (m->dict == NULL) {
        if (tm_plain(key)) {
            if ((m->n + 1) * 2 > m->cap && tm_resize(m, m->cap ? m->cap * 2 : 16) < 0)
                return NULL;
            uint64_t bits = tm_bits(PyFloat_AS_DOUBLE(key));
            MSlot *s = tm_probe(m, bits);
            if (s->key != NULL) {
                if (only_new) return s->value;
                Py_INCREF(value);
                Py_SETREF(s->value, value);
                return value;
            }
            Py_INCREF(key);
            Py_INCREF(value);
            s->bits = bits;
            s->key = key;
            s->value = value;
            m->n++;
            return value;
        }
        if (tm_to_dict(m) < 0) return NULL;
    }
    if (only_new) return PyDict_SetDefault(m->dict, key, value);
    return PyDict_SetItem(m->dict, key, value) < 0 ? NULL : value;
}

/* m.pop(key): a new reference, or NULL (with KeyError if *must*). */
static PyObject *tm_pop(TimeMap *m, PyObject *key, int must) {
    if (m->dict == NULL) {
        if (tm_plain(key)) {
            MSlot *s = m->t != NULL ? tm_probe(m, tm_bits(PyFloat_AS_DOUBLE(key))) : NULL;
            if (s == NULL || s->key == NULL) {
                if (must) PyErr_SetObject(PyExc_KeyError, key);
                return NULL;
            }
            PyObject *v = s->value;
            Py_DECREF(s->key);
            tm_remove(m, s);
            return v;
        }
        if (tm_to_dict(m) < 0) return NULL;
    }
    return dict_pop(m->dict, key, must);
}

static PyObject *tm_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw != NULL && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "TimeMap() takes no arguments");
        return NULL;
    }
    return tp->tp_alloc(tp, 0);
}

static int tm_traverse(TimeMap *m, visitproc visit, void *arg) {
    Py_VISIT(m->dict);
    for (Py_ssize_t i = 0; i < m->cap; i++)
        if (m->t[i].key != NULL) {
            Py_VISIT(m->t[i].key);
            Py_VISIT(m->t[i].value);
        }
    return 0;
}

static int tm_clear(TimeMap *m) {
    MSlot *t = m->t;
    Py_ssize_t cap = m->cap;
    m->t = NULL;
    m->n = m->cap = 0;
    for (Py_ssize_t i = 0; i < cap; i++)
        if (t[i].key != NULL) {
            Py_DECREF(t[i].key);
            Py_DECREF(t[i].value);
        }
    PyMem_Free(t);
    Py_CLEAR(m->dict);
    return 0;
}

static void tm_dealloc(TimeMap *m) {
    PyObject_GC_UnTrack(m);
    tm_clear(m);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static Py_ssize_t tm_len(TimeMap *m) { return m->dict != NULL ? PyDict_GET_SIZE(m->dict) : m->n; }

/* what: 0 keys, 1 values, 2 items; a list. */
static PyObject *tm_list(TimeMap *m, int what) {
    if (m->dict != NULL)
        return what == 0 ? PyDict_Keys(m->dict)
                         : what == 1 ? PyDict_Values(m->dict) : PyDict_Items(m->dict);
    PyObject *l = PyList_New(m->n);
    if (l == NULL) return NULL;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < m->cap && k < m->n; i++) {
        MSlot *s = &m->t[i];
        if (s->key == NULL) continue;
        PyObject *x = what == 0 ? Py_NewRef(s->key) : what == 1 ? Py_NewRef(s->value)
                                                                : PyTuple_Pack(2, s->key, s->value);
        if (x == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, k++, x);
    }
    return l;
}

static PyObject *tm_keys(TimeMap *m, PyObject *unused) { return tm_list(m, 0); }
static PyObject *tm_values(TimeMap *m, PyObject *unused) { return tm_list(m, 1); }
static PyObject *tm_items(TimeMap *m, PyObject *unused) { return tm_list(m, 2); }

static PyObject *tm_iter(TimeMap *m) {
    PyObject *keys = tm_list(m, 0);
    if (keys == NULL) return NULL;
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

static PyObject *tm_subscript(TimeMap *m, PyObject *key) {
    PyObject *v = tm_get(m, key);
    if (v == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return Py_NewRef(v);
}

static int tm_ass_subscript(TimeMap *m, PyObject *key, PyObject *value) {
    if (value != NULL) return tm_put(m, key, value, 0) == NULL ? -1 : 0;
    PyObject *v = tm_pop(m, key, 1);
    if (v == NULL) return -1;
    Py_DECREF(v);
    return 0;
}

static int tm_contains(TimeMap *m, PyObject *key) {
    PyObject *v = tm_get(m, key);
    if (v == NULL) return PyErr_Occurred() ? -1 : 0;
    return 1;
}

static int tm_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi) {
    if (nargs >= lo && nargs <= hi) return 1;
    if (lo == hi)
        PyErr_Format(PyExc_TypeError, "%s expected %zd argument%s, got %zd", name, lo,
                     lo == 1 ? "" : "s", nargs);
    else if (nargs < lo)
        PyErr_Format(PyExc_TypeError, "%s expected at least %zd argument%s, got %zd", name, lo,
                     lo == 1 ? "" : "s", nargs);
    else
        PyErr_Format(PyExc_TypeError, "%s expected at most %zd arguments, got %zd", name, hi,
                     nargs);
    return 0;
}

static PyObject *tm_get_method(TimeMap *m, PyObject *const *args, Py_ssize_t nargs) {
    if (!tm_nargs("get", nargs, 1, 2)) return NULL;
    PyObject *v = tm_get(m, args[0]);
    if (v == NULL) {
        if (PyErr_Occurred()) return NULL;
        v = nargs == 2 ? args[1] : Py_None;
    }
    return Py_NewRef(v);
}

static PyObject *tm_setdefault_method(TimeMap *m, PyObject *const *args, Py_ssize_t nargs) {
    if (!tm_nargs("setdefault", nargs, 1, 2)) return NULL;
    PyObject *v = tm_put(m, args[0], nargs == 2 ? args[1] : Py_None, 1);
    return v == NULL ? NULL : Py_NewRef(v);
}

static PyObject *tm_pop_method(TimeMap *m, PyObject *const *args, Py_ssize_t nargs) {
    if (!tm_nargs("pop", nargs, 1, 2)) return NULL;
    PyObject *v = tm_pop(m, args[0], nargs == 1);
    if (v == NULL && nargs == 2 && !PyErr_Occurred()) v = Py_NewRef(args[1]);
    return v;
}

static PyObject *tm_repr(TimeMap *m) {
    PyObject *items = tm_list(m, 2);
    if (items == NULL) return NULL;
    PyObject *d = PyDict_New();
    for (Py_ssize_t i = 0; d != NULL && i < PyList_GET_SIZE(items); i++) {
        PyObject *kv = PyList_GET_ITEM(items, i);
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1)) < 0)
            Py_CLEAR(d);
    }
    Py_DECREF(items);
    if (d == NULL) return NULL;
    PyObject *r = PyUnicode_FromFormat("TimeMap(%R)", d);
    Py_DECREF(d);
    return r;
}

static PyMethodDef tm_methods[] = {
    {"get", (PyCFunction)(void (*)(void))tm_get_method, METH_FASTCALL,
     "get(key, default=None, /): as dict.get"},
    {"setdefault", (PyCFunction)(void (*)(void))tm_setdefault_method, METH_FASTCALL,
     "setdefault(key, default=None, /): as dict.setdefault"},
    {"pop", (PyCFunction)(void (*)(void))tm_pop_method, METH_FASTCALL,
     "pop(key[, default], /): as dict.pop"},
    {"keys", (PyCFunction)tm_keys, METH_NOARGS, "The keys, as a list (in no particular order)."},
    {"values", (PyCFunction)tm_values, METH_NOARGS, "The values, as a list."},
    {"items", (PyCFunction)tm_items, METH_NOARGS, "The (key, value) pairs, as a list."},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods tm_as_mapping = {
    .mp_length = (lenfunc)tm_len,
    .mp_subscript = (binaryfunc)tm_subscript,
    .mp_ass_subscript = (objobjargproc)tm_ass_subscript,
};

static PySequenceMethods tm_as_sequence = {
    .sq_contains = (objobjproc)tm_contains,
};

static PyTypeObject TimeMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulacra.core._ckernel.TimeMap",
    .tp_basicsize = sizeof(TimeMap),
    .tp_dealloc = (destructor)tm_dealloc,
    .tp_repr = (reprfunc)tm_repr,
    .tp_as_mapping = &tm_as_mapping,
    .tp_as_sequence = &tm_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The map from a Sim's future times to their events (the compiled kernel's "
              "Sim._buckets).",
    .tp_traverse = (traverseproc)tm_traverse,
    .tp_clear = (inquiry)tm_clear,
    .tp_iter = (getiterfunc)tm_iter,
    .tp_methods = tm_methods,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_new = tm_new,
};

/* The kernel's bucket operations, on a TimeMap or an exact dict (a Sim made
 * before the kernel was installed, or unpickled by hand). */
static inline int is_buckets(PyObject *b) {
    return Py_TYPE(b) == &TimeMapType || PyDict_CheckExact(b);
}

static inline PyObject *bk_get(PyObject *b, PyObject *key) {
    return Py_TYPE(b) == &TimeMapType ? tm_get((TimeMap *)b, key)
                                      : PyDict_GetItemWithError(b, key);
}

static inline int bk_set(PyObject *b, PyObject *key, PyObject *v) {
    return Py_TYPE(b) == &TimeMapType ? (tm_put((TimeMap *)b, key, v, 0) == NULL ? -1 : 0)
                                      : PyDict_SetItem(b, key, v);
}

static inline PyObject *bk_setdefault(PyObject *b, PyObject *key, PyObject *v) {
    return Py_TYPE(b) == &TimeMapType ? tm_put((TimeMap *)b, key, v, 1)
                                      : PyDict_SetDefault(b, key, v);
}

static inline PyObject *bk_pop(PyObject *b, PyObject *key, int must) {
    return Py_TYPE(b) == &TimeMapType ? tm_pop((TimeMap *)b, key, must) : dict_pop(b, key, must);
}

/* `a += b` and `a -= b` for the statistics sums (floats in practice). */
static inline PyObject *num_add(PyObject *a, PyObject *b) {
    if (PyFloat_CheckExact(a) && PyFloat_CheckExact(b))
        return PyFloat_FromDouble(PyFloat_AS_DOUBLE(a) + PyFloat_AS_DOUBLE(b));
    return PyNumber_InPlaceAdd(a, b);
}

static inline PyObject *num_sub(PyObject *a, PyObject *b) {
    if (PyFloat_CheckExact(a) && PyFloat_CheckExact(b))
        return PyFloat_FromDouble(PyFloat_AS_DOUBLE(a) - PyFloat_AS_DOUBLE(b));
    return PyNumber_InPlaceSubtract(a, b);
}

static PyObject *one, *zero_f, *zero_long;

static inline PyObject *int_inc(PyObject *a) {
    if (PyLong_CheckExact(a)) {
        int overflow;
        long v = PyLong_AsLongAndOverflow(a, &overflow);
        if (!overflow && v < LONG_MAX && !(v == -1 && PyErr_Occurred()))
            return PyLong_FromLong(v + 1);
        PyErr_Clear();
    }
    return PyNumber_InPlaceAdd(a, one);
}

/* `n < cap` for a length and a capacity; -1 on error. */
static inline int len_lt(Py_ssize_t n, PyObject *cap) {
    if (PyLong_CheckExact(cap)) {
        int overflow;
        long long c = PyLong_AsLongLongAndOverflow(cap, &overflow);
        if (overflow) return overflow > 0;
        if (c == -1 && PyErr_Occurred()) return -1;
        return (long long)n < c;
    }
    if (PyFloat_CheckExact(cap) && n < ((Py_ssize_t)1 << 53))
        return (double)n < PyFloat_AS_DOUBLE(cap);
    PyObject *ln = PyLong_FromSsize_t(n);
    if (ln == NULL) return -1;
    int r = PyObject_RichCompareBool(ln, cap, Py_LT);
    Py_DECREF(ln);
    return r;
}

/* A fresh Event, as `object.__new__(Event)` makes it (no slot set). */
static inline PyObject *new_event(void) { return EventT->tp_alloc(EventT, 0); }

/* The exception being raised, taken (a new reference, normalised, with its
 * traceback attached), and back. */
static PyObject *take_exc(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (exc != NULL) PyException_SetTraceback(exc, tb != NULL ? tb : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return exc;
#endif
}

static void give_exc(PyObject *exc) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyObject *type = (PyObject *)Py_TYPE(exc);
    Py_INCREF(type);
    PyObject *tb = PyException_GetTraceback(exc);
    PyErr_Restore(type, exc, tb);
#endif
}

/* Call method *name* of *obj* with *args* as if inside `except <exc>:` (so
 * that sys.exc_info() and the __context__ of anything raised are Python's). */
static PyObject *call_handling(PyObject *exc, PyObject *obj, PyObject *name,
                               PyObject *const *args, size_t nargs) {
    _PyErr_StackItem *item = PyThreadState_Get()->exc_info;
    PyObject *saved = item->exc_value;
    Py_INCREF(exc);
    item->exc_value = exc;
    PyObject *stack[4];
    stack[0] = obj;
    for (size_t i = 0; i < nargs; i++) stack[i + 1] = args[i];
    PyObject *r = PyObject_VectorcallMethod(name, stack, nargs + 1, NULL);
    PyObject *tmp = item->exc_value;
    item->exc_value = saved;
    Py_XDECREF(tmp);
    return r;
}

static PyObject *call_method(PyObject *obj, PyObject *name, PyObject *const *args,
                             size_t nargs) {
    PyObject *stack[5];
    stack[0] = obj;
    for (size_t i = 0; i < nargs; i++) stack[i + 1] = args[i];
    return PyObject_VectorcallMethod(name, stack, nargs + 1, NULL);
}

/* ------------------------------------------------------------------ the run loop */

/* `waiter._gen.send(event._value)` inside the loop's try: NEXT with the next
 * yielded object, RETURN with the return value (`except StopIteration as
 * stop: stop.value`), or ERROR with the exception raised. */
static PySendResult resume_once(PyObject *waiter, PyObject *event, PyObject **result) {
    PyObject *gen = pr_get(waiter, o_gen, n_gen);
    if (gen == NULL) return PYGEN_ERROR;
    PySendResult r;
    if (Py_TYPE(gen) == &PyGen_Type || Py_TYPE(gen) == &PyCoro_Type) {
        PyObject *val = ev_get(event, o_value, n_value);
        if (val == NULL) {
            Py_DECREF(gen);
            return PYGEN_ERROR;
        }
        r = PyIter_Send(gen, val, result);
        Py_DECREF(val);
        Py_DECREF(gen);
        return r;
    }
    PyObject *meth = PyObject_GetAttr(gen, n_send);
    Py_DECREF(gen);
    if (meth == NULL) return PYGEN_ERROR;
    PyObject *val = ev_get(event, o_value, n_value);
    if (val == NULL) {
        Py_DECREF(meth);
        return PYGEN_ERROR;
    }
    *result = PyObject_CallOneArg(meth, val);
    Py_DECREF(val);
    Py_DECREF(meth);
    if (*result != NULL) return PYGEN_NEXT;
    if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyObject *exc = take_exc();
        *result = PyObject_GetAttrString(exc, "value");
        Py_DECREF(exc);
        return *result != NULL ? PYGEN_RETURN : PYGEN_ERROR;
    }
    return PYGEN_ERROR;
}

/* Run the callbacks *cbs* of *event* as `for callback in cbs: callback(event)`.
 * With *stoprun*, a _StopRun from a callback first calls
 * `self._requeue_stopped(event, cbs, callback)`, as the loop's except does. */
static int run_callbacks(PyObject *self, PyObject *event, PyObject *cbs, int stoprun) {
    PyObject *cb = NULL;
    if (PyTuple_CheckExact(cbs) || PyList_CheckExact(cbs)) {
        int is_list = PyList_CheckExact(cbs);
        for (Py_ssize_t i = 0;; i++) {
            Py_ssize_t n = is_list ? PyList_GET_SIZE(cbs) : PyTuple_GET_SIZE(cbs);
            if (i >= n) break;
            cb = is_list ? PyList_GET_ITEM(cbs, i) : PyTuple_GET_ITEM(cbs, i);
            Py_INCREF(cb);
            PyObject *r = PyObject_CallOneArg(cb, event);
            if (r == NULL) goto error;
            Py_DECREF(r);
            Py_DECREF(cb);
            cb = NULL;
        }
        return 0;
    }
    PyObject *it = PyObject_GetIter(cbs);
    if (it == NULL) return -1;
    while ((cb = PyIter_Next(it)) != NULL) {
        PyObject *r = PyObject_CallOneArg(cb, event);
        if (r == NULL) {
            Py_DECREF(it);
            goto error;
        }
        Py_DECREF(r);
        Py_DECREF(cb);
        cb = NULL;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
error:
    if (stoprun && PyErr_ExceptionMatches(StopRun)) {
        PyObject *exc = take_exc();
        PyObject *args[3] = {event, cbs, cb};
        PyObject *r = call_handling(exc, self, n_requeue_stopped, args, 3);
        if (r == NULL) {
            Py_DECREF(exc);
        } else {
            Py_DECREF(r);
            give_exc(exc);
        }
    }
    Py_XDECREF(cb);
    return -1;
}

/* Sim._run_fifo, transcribed: read the Python version in _kernel.py first. */
static PyObject *run_fifo(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (Py_TYPE(self) != SimT || nargs != 0 || SLOT(self, s_urgentq) == NULL ||
        SLOT(self, s_timedq) == NULL || SLOT(self, s_nowq) == NULL ||
        SLOT(self, s_times) == NULL || SLOT(self, s_buckets) == NULL ||
        SLOT(self, s_ubuckets) == NULL)
        return call_orig(orig_run_fifo, self, args, nargs, NULL);
    PyObject *urgentq = SLOT(self, s_urgentq), *timedq = SLOT(self, s_timedq),
             *nowq = SLOT(self, s_nowq), *times = SLOT(self, s_times),
             *buckets = SLOT(self, s_buckets), *ubuckets = SLOT(self, s_ubuckets);
    if (Py_TYPE(urgentq) != DequeT || Py_TYPE(timedq) != DequeT || Py_TYPE(nowq) != DequeT ||
        !is_times(times) || !is_buckets(buckets) || !PyDict_CheckExact(ubuckets))
        return call_orig(orig_run_fifo, self, args, nargs, NULL);
    Py_INCREF(urgentq);
    Py_INCREF(timedq);
    Py_INCREF(nowq);
    Py_INCREF(times);
    Py_INCREF(buckets);
    Py_INCREF(ubuckets);
    PyObject *pop_urgent = NULL, *pop_timed = NULL, *pop_now = NULL, *append_now = NULL,
             *extend_timed = NULL, *append_timed = NULL, *extend_urgent = NULL;
    PyObject *event = NULL, *waiter = NULL, *cbs = NULL, *nxt = NULL;
    PyObject *result = NULL;
    long elide_refs = -1;
    {
        PyObject *e = PyDict_GetItemWithError(kdict, n_ELIDE_REFS);
        if (e != NULL && PyLong_Check(e)) elide_refs = PyLong_AsLong(e);
        if (PyErr_Occurred()) goto error;
    }
    if (!(pop_urgent = PyObject_GetAttr(urgentq, n_popleft))) goto error;
    if (!(pop_timed = PyObject_GetAttr(timedq, n_popleft))) goto error;
    if (!(pop_now = PyObject_GetAttr(nowq, n_popleft))) goto error;
    if (!(append_now = PyObject_GetAttr(nowq, n_append))) goto error;
    if (!(extend_timed = PyObject_GetAttr(timedq, n_extend))) goto error;
    if (!(append_timed = PyObject_GetAttr(timedq, n_append))) goto error;
    if (!(extend_urgent = PyObject_GetAttr(urgentq, n_extend))) goto error;

    /* Every 1024 events, between two of them, do what the interpreter's eval loop
     * does for the pure kernel: let another thread that waits for the GIL run, and
     * see a pending signal (Ctrl-C). Events that run no Python code (delays nobody
     * waits for) would otherwise hold the GIL, and keep KeyboardInterrupt, until the
     * run ends. */
    unsigned int yield_countdown = 1024;
    for (;;) {
        if (--yield_countdown == 0) {
            yield_countdown = 1024;
            Py_BEGIN_ALLOW_THREADS
            Py_END_ALLOW_THREADS
            if (PyErr_CheckSignals() < 0) goto error;
        }
        if (Py_SIZE(urgentq) || Py_SIZE(timedq)) {
            event = PyObject_CallNoArgs(Py_SIZE(urgentq) ? pop_urgent : pop_timed);
            if (event == NULL) goto error;
        pending_or_not:;
            PyObject *value = ev_get(event, o_value, n_value);
            if (value == NULL) goto error;
            Py_DECREF(value);
            if (value == PENDING) { /* a process waiting to start */
                waiter = event;
                event = START;
                Py_INCREF(event);
                cbs = Py_None;
                Py_INCREF(cbs);
            } else {
                if (!(waiter = ev_get(event, o_waiter, n_waiter))) goto error;
                if (!(cbs = ev_get(event, o_cbs, n_cbs))) goto error;
                if (ev_set(event, o_cbs, n_cbs, DONE) < 0) goto error;
            }
        } else if (Py_SIZE(nowq)) {
            event = PyObject_CallNoArgs(pop_now);
            if (event == NULL) goto error;
            if (!(waiter = ev_get(event, o_waiter, n_waiter))) goto error;
            if (!(cbs = ev_get(event, o_cbs, n_cbs))) goto error;
            if (ev_set(event, o_cbs, n_cbs, DONE) < 0) goto error;
        } else if (times_len(times)) {
            /* Inlines Sim._advance; a time with one event and nothing urgent
             * is processed right here. */
            PyObject *when = times_pop(times);
            if (when == NULL) goto error;
            Py_INCREF(when);
            slot_steal(self, s_now, when); /* self.now = when */
            PyObject *entry = bk_pop(buckets, when, 1);
            if (entry == NULL) {
                Py_DECREF(when);
                goto error;
            }
            if (Py_TYPE(times) == &TimeHeapType && Py_TYPE(buckets) == &TimeMapType) {
                /* The next time's float and slot, while this time's events run
                 * (a large schedule is a cache miss for each). */
                TimeHeap *h = (TimeHeap *)times;
                if (h->n && h->nonfloat == 0) {
                    PREFETCH(h->a[0].o);
                    tm_prefetch(buckets, h->a[0].d);
                }
            }
            int multi = Py_TYPE(entry) == BucketT;
            if (!multi && PyDict_GET_SIZE(ubuckets)) {
                multi = PyDict_Contains(ubuckets, when);
                if (multi < 0) {
                    Py_DECREF(entry);
                    Py_DECREF(when);
                    goto error;
                }
            }
            if (multi) {
                PyObject *r = PyObject_CallOneArg(
                    Py_TYPE(entry) == BucketT ? extend_timed : append_timed, entry);
                Py_DECREF(entry);
                if (r == NULL) {
                    Py_DECREF(when);
                    goto error;
                }
                Py_DECREF(r);
                PyObject *urgent = dict_pop(ubuckets, when, 0);
                Py_DECREF(when);
                if (urgent == NULL && PyErr_Occurred()) goto error;
                if (urgent != NULL) {
                    int t = PyObject_IsTrue(urgent);
                    if (t > 0) r = PyObject_CallOneArg(extend_urgent, urgent);
                    Py_DECREF(urgent);
                    if (t < 0) goto error;
                    if (t > 0) {
                        if (r == NULL) goto error;
                        Py_DECREF(r);
                    }
                }
                continue;
            }
            Py_DECREF(when);
            event = entry;
            goto pending_or_not;
        } else {
            break;
        }

        /* if not event._ok: self._process_failed(event, waiter, cbs) */
        {
            PyObject *ok = ev_get(event, o_ok, n_ok);
            if (ok == NULL) goto error;
            int t = ok == Py_True ? 1 : PyObject_IsTrue(ok);
            Py_DECREF(ok);
            if (t < 0) goto error;
            if (!t) {
                PyObject *a[3] = {event, waiter, cbs};
                PyObject *r = call_method(self, n_process_failed, a, 3);
                if (r == NULL) goto error;
                Py_DECREF(r);
                goto next;
            }
        }
        if (waiter != Py_None) {
            if (cbs != Py_None && PyTuple_CheckExact(cbs)) {
                if (run_callbacks(self, event, cbs, 0) < 0) goto error;
                Py_SETREF(cbs, Py_None);
                Py_INCREF(cbs);
            }
            slot_set(self, s_active, waiter); /* self.active_process = waiter */
            PySendResult sr = resume_once(waiter, event, &result);
            if (sr == PYGEN_RETURN) {
                /* Inlines Process._finish (no tracer in this loop). */
                int err = pr_set(waiter, o_value, n_value, result);
                Py_CLEAR(result);
                if (err < 0 || pr_set(waiter, o_target, n_target, Py_None) < 0) goto error;
                PyObject *r = PyObject_CallOneArg(append_now, waiter);
                if (r == NULL) goto error;
                Py_DECREF(r);
            } else if (sr == PYGEN_ERROR) {
                PyObject *exc = take_exc();
                PyObject *a[2] = {Py_False, exc};
                PyObject *r = call_handling(exc, waiter, n_finish, a, 2);
                Py_DECREF(exc);
                if (r == NULL) goto error;
                Py_DECREF(r);
            } else {
                nxt = result;
                result = NULL;
                /* cbs_next = nxt._cbs if nxt._waiter is None and nxt.sim is self
                 * else done, and done for a non-event (AttributeError). */
                PyObject *cbs_next = NULL;
                PyObject *w = ev_get(nxt, o_waiter, n_waiter);
                if (w == NULL) goto attr_error;
                Py_DECREF(w);
                if (w == Py_None) {
                    PyObject *s = ev_get(nxt, o_sim, n_sim);
                    if (s == NULL) goto attr_error;
                    Py_DECREF(s);
                    if (s == self) {
                        cbs_next = ev_get(nxt, o_cbs, n_cbs);
                        if (cbs_next == NULL) goto attr_error;
                    }
                }
                if (0) {
                attr_error:
                    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto error;
                    PyErr_Clear();
                }
                if (cbs_next == NULL) {
                    cbs_next = DONE;
                    Py_INCREF(cbs_next);
                }
                int elide = 0;
                /* Python's getrefcount(nxt) counts the loop's local and its own
                 * argument; here the loop holds the only reference of its own. */
                if (cbs_next == FUTURE && Py_REFCNT(nxt) + 1 == elide_refs) {
                    PyObject *v = ev_get(nxt, o_value, n_value);
                    if (v == NULL) {
                        Py_DECREF(cbs_next);
                        goto error;
                    }
                    Py_DECREF(v);
                    elide = v == Py_None;
                }
                if (elide) {
                    /* A fresh delay nobody else holds: the process takes its
                     * place in the bucket and keeps the time in _target. */
                    Py_DECREF(cbs_next);
                    PyObject *when = ev_get(nxt, o_data, n_data);
                    if (when == NULL) goto error;
                    int err = 0, placed = 0;
                    PyObject *bucket = bk_get(buckets, when);
                    if (bucket == NULL && PyErr_Occurred()) {
                        err = -1;
                    } else if (bucket == nxt) {
                        err = bk_set(buckets, when, waiter);
                        if (err == 0) err = pr_set(waiter, o_target, n_target, when);
                        placed = 1;
                    } else if (bucket != NULL && Py_TYPE(bucket) == BucketT) {
                        Py_ssize_t n = PyList_GET_SIZE(bucket);
                        if (n == 0) {
                            PyErr_SetString(PyExc_IndexError, "list index out of range");
                            err = -1;
                        } else if (PyList_GET_ITEM(bucket, n - 1) == nxt) {
                            /* bucket[-1] = waiter; waiter._target = bucket.when */
                            Py_INCREF(bucket);
                            Py_INCREF(waiter);
                            PyList_SetItem(bucket, n - 1, waiter);
                            PyObject *bw = SLOT(bucket, b_when);
                            if (bw != NULL) {
                                err = pr_set(waiter, o_target, n_target, bw);
                            } else {
                                bw = PyObject_GetAttr(bucket, n_when);
                                err = bw == NULL ? -1 : pr_set(waiter, o_target, n_target, bw);
                                Py_XDECREF(bw);
                            }
                            Py_DECREF(bucket);
                            placed = 1;
                        }
                    }
                    Py_DECREF(when);
                    if (err < 0) goto error;
                    if (!placed && (ev_set(nxt, o_waiter, n_waiter, waiter) < 0 ||
                                    pr_set(waiter, o_target, n_target, nxt) < 0))
                        goto error;
                } else if (cbs_next == Py_None || PyTuple_CheckExact(cbs_next)) {
                    Py_DECREF(cbs_next);
                    if (ev_set(nxt, o_waiter, n_waiter, waiter) < 0 ||
                        pr_set(waiter, o_target, n_target, nxt) < 0)
                        goto error;
                } else {
                    Py_DECREF(cbs_next);
                    PyObject *a[2] = {waiter, nxt};
                    PyObject *again = call_method(self, n_wait_on, a, 2);
                    if (again == NULL) goto error;
                    if (again != Py_None) {
                        PyObject *resume = PyDict_GetItemWithError(kdict, n_resume);
                        if (resume == NULL) {
                            if (!PyErr_Occurred())
                                PyErr_SetString(PyExc_NameError, "name '_resume' is not defined");
                            Py_DECREF(again);
                            goto error;
                        }
                        Py_INCREF(resume);
                        PyObject *ra[3] = {self, waiter, again};
                        PyObject *r = PyObject_Vectorcall(resume, ra, 3, NULL);
                        Py_DECREF(resume);
                        Py_DECREF(again);
                        if (r == NULL) goto error;
                        Py_DECREF(r);
                    } else {
                        Py_DECREF(again);
                    }
                }
                Py_CLEAR(nxt);
            }
            slot_set(self, s_active, Py_None); /* self.active_process = None */
        }
        if (cbs != Py_None) {
            if (run_callbacks(self, event, cbs, 1) < 0) goto error;
        }
    next:
        Py_CLEAR(event);
        Py_CLEAR(waiter);
        Py_CLEAR(cbs);
    }
    Py_INCREF(Py_None);
    result = Py_None;
    goto out;
error:
    result = NULL;
out:
    Py_XDECREF(event);
    Py_XDECREF(waiter);
    Py_XDECREF(cbs);
    Py_XDECREF(nxt);
    Py_XDECREF(pop_urgent);
    Py_XDECREF(pop_timed);
    Py_XDECREF(pop_now);
    Py_XDECREF(append_now);
    Py_XDECREF(extend_timed);
    Py_XDECREF(append_timed);
    Py_XDECREF(extend_urgent);
    Py_DECREF(urgentq);
    Py_DECREF(timedq);
    Py_DECREF(nowq);
    Py_DECREF(times);
    Py_DECREF(buckets);
    Py_DECREF(ubuckets);
    return result;
}

/* ------------------------------------------------------------------ _resume */

static PyObject *orig_resume, *n_tracer, *n_record, *n_who, *n_now, *n_active, *n_throw,
    *n_copy_exception, *s_resume, *s_throw;

/* `sim.<name>`: the slot of an exact Sim, else the generic lookup. */
static inline PyObject *sim_get(PyObject *sim, Py_ssize_t off, PyObject *name) {
    if (Py_TYPE(sim) == SimT) {
        PyObject *v = SLOT(sim, off);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(sim, name);
}

static inline int sim_set(PyObject *sim, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (Py_TYPE(sim) == SimT) {
        slot_set(sim, off, v);
        return 0;
    }
    return PyObject_SetAttr(sim, name, v);
}

static Py_ssize_t s_tracer;

/* tracer.record(sim.now, kind, proc.who, value) */
static int trace_record(PyObject *tracer, PyObject *sim, PyObject *kind, PyObject *proc,
                        PyObject *value) {
    PyObject *now = sim_get(sim, s_now, n_now);
    if (now == NULL) return -1;
    PyObject *who = PyObject_GetAttr(proc, n_who);
    if (who == NULL) {
        Py_DECREF(now);
        return -1;
    }
    PyObject *a[5] = {tracer, now, kind, who, value};
    PyObject *r = PyObject_VectorcallMethod(n_record, a, 5, NULL);
    Py_DECREF(now);
    Py_DECREF(who);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* _resume(sim, proc, event), transcribed: read the Python version in _kernel.py. */
static PyObject *ck_resume(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyObject_Vectorcall(orig_resume, args, nargs, NULL);
    PyObject *sim = args[0], *proc = args[1], *event = args[2];
    Py_INCREF(event);
    PyObject *gen = NULL, *tracer = NULL, *nxt = NULL, *result = NULL;
    if (sim_set(sim, s_active, n_active, proc) < 0) goto error;
    if (!(gen = pr_get(proc, o_gen, n_gen))) goto error;
    if (!(tracer = sim_get(sim, s_tracer, n_tracer))) goto error;
    for (;;) {
        /* try: */
        PySendResult sr = PYGEN_ERROR;
        PyObject *ok = ev_get(event, o_ok, n_ok);
        if (ok == NULL) goto caught;
        int t = ok == Py_True ? 1 : PyObject_IsTrue(ok);
        Py_DECREF(ok);
        if (t < 0) goto caught;
        if (t) {
            PyObject *val = ev_get(event, o_value, n_value);
            if (val == NULL) goto caught;
            if (tracer != Py_None && trace_record(tracer, sim, s_resume, proc, val) < 0) {
                Py_DECREF(val);
                goto caught;
            }
            if (Py_TYPE(gen) == &PyGen_Type || Py_TYPE(gen) == &PyCoro_Type) {
                sr = PyIter_Send(gen, val, &result);
            } else {
                result = PyObject_CallMethodOneArg(gen, n_send, val);
                sr = result != NULL ? PYGEN_NEXT : PYGEN_ERROR;
            }
            Py_DECREF(val);
        } else {
            if (ev_set(event, o_ok, n_ok, Py_None) < 0) goto caught; /* defused */
            PyObject *val = ev_get(event, o_value, n_value);
            if (val == NULL) goto caught;
            if (tracer != Py_None && trace_record(tracer, sim, s_throw, proc, val) < 0) {
                Py_DECREF(val);
                goto caught;
            }
            PyObject *copy_exception = PyDict_GetItemWithError(kdict, n_copy_exception);
            if (copy_exception == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_NameError, "name '_copy_exception' is not defined");
                Py_DECREF(val);
                goto caught;
            }
            Py_INCREF(copy_exception);
            PyObject *copy = PyObject_CallOneArg(copy_exception, val);
            Py_DECREF(copy_exception);
            Py_DECREF(val);
            if (copy == NULL) goto caught;
            result = PyObject_CallMethodOneArg(gen, n_throw, copy);
            Py_DECREF(copy);
            sr = result != NULL ? PYGEN_NEXT : PYGEN_ERROR;
        }
    caught:
        if (sr == PYGEN_ERROR && PyErr_ExceptionMatches(PyExc_StopIteration)) {
            PyObject *exc = take_exc();
            result = PyObject_GetAttrString(exc, "value");
            if (result == NULL) {
                Py_DECREF(exc);
                goto error; /* (an exception inside the handler) */
            }
            PyObject *a[2] = {Py_True, result};
            PyObject *r = call_handling(exc, proc, n_finish, a, 2);
            Py_DECREF(exc);
            Py_CLEAR(result);
            if (r == NULL) goto error;
            Py_DECREF(r);
            if (sim_set(sim, s_active, n_active, Py_None) < 0) goto error;
            goto out;
        }
        if (sr == PYGEN_RETURN) { /* PyIter_Send: the generator returned */
            PyObject *a[2] = {Py_True, result};
            PyObject *r;
            if (tracer != Py_None) {
                /* _finish records with the tracer, inside `except StopIteration`
                 * in Python: give it that StopIteration to see. */
                PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
                if (stop == NULL) {
                    Py_CLEAR(result);
                    goto error;
                }
                r = call_handling(stop, proc, n_finish, a, 2);
                Py_DECREF(stop);
            } else {
                r = call_method(proc, n_finish, a, 2);
            }
            Py_CLEAR(result);
            if (r == NULL) goto error;
            Py_DECREF(r);
            if (sim_set(sim, s_active, n_active, Py_None) < 0) goto error;
            goto out;
        }
        if (sr == PYGEN_ERROR) {
            PyObject *exc = take_exc();
            PyObject *a[2] = {Py_False, exc};
            PyObject *r = call_handling(exc, proc, n_finish, a, 2);
            Py_DECREF(exc);
            if (r == NULL) goto error;
            Py_DECREF(r);
            if (sim_set(sim, s_active, n_active, Py_None) < 0) goto error;
            goto out;
        }
        nxt = result;
        result = NULL;
        /* try: fast = nxt._waiter is None and nxt.sim is sim and (cbs None or tuple)
         * except AttributeError: fast = False */
        int fast = 0;
        {
            PyObject *w = ev_get(nxt, o_waiter, n_waiter);
            if (w == NULL) goto attr;
            Py_DECREF(w);
            if (w != Py_None) goto decided;
            PyObject *sv = ev_get(nxt, o_sim, n_sim);
            if (sv == NULL) goto attr;
            Py_DECREF(sv);
            if (sv != sim) goto decided;
            PyObject *cbs = ev_get(nxt, o_cbs, n_cbs);
            if (cbs == NULL) goto attr;
            fast = cbs == Py_None || PyTuple_CheckExact(cbs);
            Py_DECREF(cbs);
            goto decided;
        attr:
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto error;
            PyErr_Clear();
        decided:;
        }
        if (fast) {
            if (ev_set(nxt, o_waiter, n_waiter, proc) < 0 ||
                pr_set(proc, o_target, n_target, nxt) < 0)
                goto error;
            break;
        }
        PyObject *a[2] = {proc, nxt};
        PyObject *again = call_method(sim, n_wait_on, a, 2);
        if (again == NULL) goto error;
        Py_CLEAR(nxt);
        if (again == Py_None) {
            Py_DECREF(again);
            break;
        }
        Py_SETREF(event, again);
    }
    if (sim_set(sim, s_active, n_active, Py_None) < 0) goto error;
out:
    Py_XDECREF(nxt);
    Py_XDECREF(gen);
    Py_XDECREF(tracer);
    Py_DECREF(event);
    Py_RETURN_NONE;
error:
    Py_XDECREF(result);
    Py_XDECREF(nxt);
    Py_XDECREF(gen);
    Py_XDECREF(tracer);
    Py_DECREF(event);
    return NULL;
}

/* ------------------------------------------------------------------ Sim.delay */

/* A new _Bucket(when, (a, b)), as its __init__ makes it. */
static PyObject *new_bucket(PyObject *when, PyObject *a, PyObject *b) {
    PyObject *bucket = BucketT->tp_alloc(BucketT, 0);
    if (bucket == NULL) return NULL;
    if (PyList_Append(bucket, a) < 0 || PyList_Append(bucket, b) < 0) {
        Py_DECREF(bucket);
        return NULL;
    }
    slot_set(bucket, b_when, when);
    return bucket;
}

/* Sim.delay, for a float clock, a float or int delay and fifo ordering: the
 * `when > now` branch. Everything else is the Python method's. */
static PyObject *sim_delay(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    if (kwnames != NULL || nargs < 1 || nargs > 2 || Py_TYPE(self) != SimT) goto fallback;
    PyObject *now = SLOT(self, s_now), *delay = args[0];
    if (now == NULL || !PyFloat_CheckExact(now) || SLOT(self, s_keyed) != Py_False) goto fallback;
    double d;
    if (PyFloat_CheckExact(delay)) {
        d = PyFloat_AS_DOUBLE(delay);
    } else if (PyLong_CheckExact(delay)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(delay, &overflow);
        if (overflow || x > (1LL << 53) || x < -(1LL << 53)) {
            PyErr_Clear();
            goto fallback;
        }
        d = (double)x;
    } else {
        goto fallback;
    }
    double nowd = PyFloat_AS_DOUBLE(now);
    double w = nowd + d;
    if (!(w > nowd)) goto fallback;
    PyObject *buckets = SLOT(self, s_buckets), *times = SLOT(self, s_times);
    if (buckets == NULL || times == NULL || !is_buckets(buckets) || !is_times(times))
        goto fallback;
    PyObject *value = nargs == 2 ? args[1] : Py_None;
    PyObject *event = new_event();
    if (event == NULL) return NULL;
    slot_set(event, o_sim, self);
    slot_set(event, o_value, value);
    slot_set(event, o_ok, Py_True);
    slot_set(event, o_waiter, Py_None);
    slot_set(event, o_cbs, FUTURE);
    PyObject *when = PyFloat_FromDouble(w);
    if (when == NULL) goto error;
    slot_set(event, o_data, when);
    PyObject *bucket = bk_setdefault(buckets, when, event);
    if (bucket == NULL) goto error_when;
    if (bucket == event) {
        if (times_push(times, when) < 0) goto error_when;
    } else if (Py_TYPE(bucket) == BucketT) {
        if (PyList_Append(bucket, event) < 0) goto error_when;
    } else {
        PyObject *nb = new_bucket(when, bucket, event);
        if (nb == NULL) goto error_when;
        int err = bk_set(buckets, when, nb);
        Py_DECREF(nb);
        if (err < 0) goto error_when;
    }
    Py_DECREF(when);
    return event;
error_when:
    Py_DECREF(when);
error:
    Py_DECREF(event);
    return NULL;
fallback:
    return call_orig(orig_delay, self, args, nargs, kwnames);
}

/* ------------------------------------------------------------------ Sim.spawn */

/* Sim.spawn's inlined `sim.spawn(gen(...))` path; the rest is Python's. */
static PyObject *sim_spawn(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    if (kwnames != NULL || nargs != 1 || Py_TYPE(self) != SimT ||
        Py_TYPE(args[0]) != &PyGen_Type || SLOT(self, s_plain) != Py_True)
        return call_orig(orig_spawn, self, args, nargs, kwnames);
    PyObject *urgentq = SLOT(self, s_urgentq), *npid = SLOT(self, s_npid);
    if (urgentq == NULL || npid == NULL || Py_TYPE(urgentq) != DequeT)
        return call_orig(orig_spawn, self, args, nargs, kwnames);
    PyObject *proc = ProcessT->tp_alloc(ProcessT, 0);
    if (proc == NULL) return NULL;
    slot_set(proc, o_sim, self);
    slot_set(proc, o_value, PENDING);
    slot_set(proc, o_ok, Py_True);
    slot_set(proc, o_waiter, Py_None);
    slot_set(proc, o_cbs, Py_None);
    slot_set(proc, o_gen, args[0]);
    PyObject *pid = int_inc(npid);
    if (pid == NULL) {
        Py_DECREF(proc);
        return NULL;
    }
    slot_steal(self, s_npid, pid);
    slot_set(proc, o_owner, pid);
    slot_set(proc, o_data, Py_None);
    slot_set(proc, o_target, Py_None);
    PyObject *r = PyObject_CallMethodOneArg(urgentq, n_append, proc);
    if (r == NULL) {
        Py_DECREF(proc);
        return NULL;
    }
    Py_DECREF(r);
    return proc;
}

/* ------------------------------------------------------------------ Event */

/* `sim._now_append(x)` for the sim of an event (an exact Sim in practice). */
static inline int now_append(PyObject *sim, PyObject *x) {
    PyObject *r;
    if (Py_TYPE(sim) == SimT && SLOT(sim, s_now_append) != NULL)
        r = PyObject_CallOneArg(SLOT(sim, s_now_append), x);
    else
        r = PyObject_CallMethodOneArg(sim, n_now_append, x);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* Event.succeed */
static PyObject *event_succeed(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    if (kwnames != NULL || nargs > 1 || Py_TYPE(self) != EventT ||
        SLOT(self, o_value) != PENDING || SLOT(self, o_sim) == NULL)
        return call_orig(orig_succeed, self, args, nargs, kwnames);
    slot_set(self, o_ok, Py_True);
    slot_set(self, o_value, nargs ? args[0] : Py_None);
    if (now_append(SLOT(self, o_sim), self) < 0) return NULL;
    Py_INCREF(self);
    return self;
}

/* Event.__exit__ for a request of an exact Resource: the inlined release. */
static PyObject *event_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || Py_TYPE(self) != EventT || args[0] == PyExc_GeneratorExit ||
        !resources_installed)
        goto fallback;
    PyObject *owner = SLOT(self, o_owner);
    if (owner == NULL || Py_TYPE(owner) != ResourceT) goto fallback;
    PyObject *marker = SLOT(owner, r_marker), *users = SLOT(owner, r_users),
             *sim = SLOT(self, o_sim);
    if (marker == NULL || marker == Py_None || users == NULL || !PyList_CheckExact(users) ||
        sim == NULL || Py_TYPE(sim) != SimT || SLOT(sim, s_now) == NULL ||
        SLOT(owner, r_busy) == NULL)
        goto fallback;
    Py_INCREF(owner);
    Py_INCREF(marker);
    Py_INCREF(users);
    Py_INCREF(sim);
    PyObject *ret = NULL;
    /* try: owner.users.remove(self) */
    int found = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(users); i++) {
        PyObject *item = PyList_GET_ITEM(users, i);
        Py_INCREF(item);
        int eq = PyObject_RichCompareBool(item, self, Py_EQ);
        Py_DECREF(item);
        if (eq < 0) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError)) goto done;
            PyErr_Clear();
            break; /* except ValueError */
        }
        if (eq > 0) {
            if (PyList_SetSlice(users, i, i + 1, NULL) < 0) {
                if (!PyErr_ExceptionMatches(PyExc_ValueError)) goto done;
                PyErr_Clear();
                break;
            }
            found = 1;
            break;
        }
    }
    PyObject *now = SLOT(sim, s_now);
    Py_INCREF(now);
    if (found) {
        /* else: owner._busy += sim.now */
        PyObject *busy = SLOT(owner, r_busy);
        PyObject *nb;
        if (busy != NULL) {
            nb = num_add(busy, now);
        } else { /* gone meanwhile: Python's AttributeError */
            nb = PyObject_GetAttrString(owner, "_busy");
            Py_XDECREF(nb);
            nb = NULL;
        }
        Py_DECREF(now);
        if (nb == NULL) goto done;
        slot_steal(owner, r_busy, nb);
    } else {
        /* except ValueError: if self._value is PENDING: owner._cancel(self, sim.now) */
        if (SLOT(self, o_value) == PENDING) {
            PyObject *a[2] = {self, now};
            PyObject *r = call_method(owner, n_cancel, a, 2);
            Py_DECREF(now);
            if (r == NULL) goto done;
            Py_DECREF(r);
        } else {
            Py_DECREF(now);
        }
    }
    if (now_append(sim, marker) < 0) goto done;
    ret = Py_None;
    Py_INCREF(ret);
    goto done;
done:
    Py_DECREF(owner);
    Py_DECREF(marker);
    Py_DECREF(users);
    Py_DECREF(sim);
    return ret;
fallback:
    return call_orig(orig_exit, self, args, nargs, NULL);
}

/* ------------------------------------------------------------------ Resource */

/* Resource.request, for an exact Resource whose sim is an exact Sim. */
static PyObject *resource_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    if (kwnames != NULL || nargs != 0 || Py_TYPE(self) != ResourceT) goto fallback;
    PyObject *sim = SLOT(self, r_sim), *queue = SLOT(self, r_queue),
             *users = SLOT(self, r_users), *cap = SLOT(self, r_capacity);
    if (sim == NULL || Py_TYPE(sim) != SimT || SLOT(sim, s_now) == NULL || queue == NULL ||
        Py_TYPE(queue) != DequeT || users == NULL || !PyList_CheckExact(users) ||
        cap == NULL || !(PyLong_CheckExact(cap) || PyFloat_CheckExact(cap)) ||
        SLOT(self, r_grants) == NULL || SLOT(self, r_busy) == NULL ||
        SLOT(self, r_qarea) == NULL || SLOT(self, r_qmax) == NULL)
        goto fallback;
    PyObject *now = SLOT(sim, s_now);
    Py_INCREF(now);
    Py_INCREF(sim);
    PyObject *req = new_event();
    if (req == NULL) goto error;
    slot_set(req, o_sim, sim);
    slot_set(req, o_ok, Py_True);
    slot_set(req, o_waiter, Py_None);
    slot_set(req, o_cbs, Py_None);
    slot_set(req, o_owner, self);
    slot_set(req, o_data, now);
    int room = len_lt(PyList_GET_SIZE(users), cap);
    if (room < 0) goto error;
    if (Py_SIZE(queue) == 0 && room) {
        /* Inlines _grant for an immediate grant. */
        slot_set(req, o_value, Py_None);
        if (PyList_Append(users, req) < 0) goto error;
        PyObject *g = int_inc(SLOT(self, r_grants));
        if (g == NULL) goto error;
        slot_steal(self, r_grants, g);
        PyObject *b = num_sub(SLOT(self, r_busy), now);
        if (b == NULL) goto error;
        slot_steal(self, r_busy, b);
        if (now_append(sim, req) < 0) goto error;
    } else {
        slot_set(req, o_value, PENDING);
        PyObject *r = PyObject_CallMethodOneArg(queue, n_append, req);
        if (r == NULL) goto error;
        Py_DECREF(r);
        PyObject *q = num_sub(SLOT(self, r_qarea), now);
        if (q == NULL) goto error;
        slot_steal(self, r_qarea, q);
        PyObject *qlen = PyLong_FromSsize_t(Py_SIZE(queue));
        if (qlen == NULL) goto error;
        int gt = PyObject_RichCompareBool(qlen, SLOT(self, r_qmax), Py_GT);
        if (gt > 0) slot_set(self, r_qmax, qlen);
        Py_DECREF(qlen);
        if (gt < 0) goto error;
        room = len_lt(PyList_GET_SIZE(users), SLOT(self, r_capacity));
        if (room < 0) goto error;
        if (room) {
            PyObject *a[1] = {now};
            r = call_method(self, n_grant_head, a, 1);
            if (r == NULL) goto error;
            Py_DECREF(r);
        }
    }
    Py_DECREF(now);
    Py_DECREF(sim);
    return req;
error:
    Py_XDECREF(req);
    Py_DECREF(now);
    Py_DECREF(sim);
    return NULL;
fallback:
    return call_orig(orig_request, self, args, nargs, kwnames);
}

/* Resource._grant_next, the callback of a processed release event. */
static PyObject *resource_grant_next(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || Py_TYPE(self) != ResourceT) goto fallback;
    PyObject *release = args[0];
    PyObject *marker = SLOT(self, r_marker), *queue = SLOT(self, r_queue),
             *users = SLOT(self, r_users), *cap = SLOT(self, r_capacity),
             *sim = SLOT(self, r_sim), *rcbs = SLOT(self, r_release_cbs);
    if (marker == NULL || queue == NULL || Py_TYPE(queue) != DequeT || users == NULL ||
        !PyList_CheckExact(users) || cap == NULL || sim == NULL || Py_TYPE(sim) != SimT ||
        SLOT(sim, s_now) == NULL || rcbs == NULL || SLOT(self, r_qarea) == NULL ||
        SLOT(self, r_wsum) == NULL || SLOT(self, r_wmax) == NULL ||
        SLOT(self, r_grants) == NULL || SLOT(self, r_busy) == NULL)
        goto fallback;
    if (release == marker) { /* re-arm the shared marker */
        if (ev_set(release, o_cbs, n_cbs, rcbs) < 0) return NULL;
    }
    if (Py_SIZE(queue) == 0) Py_RETURN_NONE;
    int room = len_lt(PyList_GET_SIZE(users), cap);
    if (room <= 0) {
        if (room < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *req = PyObject_CallMethodNoArgs(queue, n_popleft);
    if (req == NULL) return NULL;
    PyObject *now = SLOT(sim, s_now), *t;
    Py_INCREF(now);
    Py_INCREF(sim);
    PyObject *ret = NULL, *data = NULL, *wait = NULL;
    if (!(t = num_add(SLOT(self, r_qarea), now))) goto done;
    slot_steal(self, r_qarea, t);
    if (PyList_Append(SLOT(self, r_users), req) < 0) goto done;
    if (!(data = ev_get(req, o_data, n_data))) goto done;
    /* wait = now - req._data; if wait > 0.0: ... */
    if (PyFloat_CheckExact(now) && PyFloat_CheckExact(data))
        wait = PyFloat_FromDouble(PyFloat_AS_DOUBLE(now) - PyFloat_AS_DOUBLE(data));
    else
        wait = PyNumber_Subtract(now, data);
    if (wait == NULL) goto done;
    int pos = PyFloat_CheckExact(wait) ? PyFloat_AS_DOUBLE(wait) > 0.0
                                       : PyObject_RichCompareBool(wait, zero_f, Py_GT);
    if (pos < 0) goto done;
    if (pos) {
        if (!(t = num_add(SLOT(self, r_wsum), wait))) goto done;
        slot_steal(self, r_wsum, t);
        int gt = PyObject_RichCompareBool(wait, SLOT(self, r_wmax), Py_GT);
        if (gt < 0) goto done;
        if (gt) slot_set(self, r_wmax, wait);
    }
    if (ev_set(req, o_data, n_data, now) < 0) goto done;
    if (!(t = int_inc(SLOT(self, r_grants)))) goto done;
    slot_steal(self, r_grants, t);
    if (!(t = num_sub(SLOT(self, r_busy), now))) goto done;
    slot_steal(self, r_busy, t);
    {
        PyObject *v = ev_get(req, o_value, n_value);
        if (v == NULL) goto done;
        Py_DECREF(v);
        if (v != PENDING) { /* raises AlreadyTriggered, as SimPy does */
            PyObject *r = PyObject_CallMethod(req, "succeed", NULL);
            if (r == NULL) goto done;
            Py_DECREF(r);
        }
    }
    if (ev_set(req, o_ok, n_ok, Py_True) < 0 || ev_set(req, o_value, n_value, Py_None) < 0)
        goto done;
    if (now_append(sim, req) < 0) goto done;
    ret = Py_None;
    Py_INCREF(ret);
done:
    Py_XDECREF(wait);
    Py_XDECREF(data);
    Py_DECREF(req);
    Py_DECREF(now);
    Py_DECREF(sim);
    return ret;
fallback:
    return call_orig(orig_grant_next, self, args, nargs, NULL);
}

/* ------------------------------------------------------------------ Store */

/* The Store slots the fast paths read, all set (else the Python method, which
 * raises what Python raises). */
static int store_ready(PyObject *self) {
    static Py_ssize_t *offs[] = {&t_put_cbs, &t_get_cbs, &t_put_queue, &t_get_queue, &t_items,
                                 &t_capacity, &t_larea, &t_last, &t_lmax, &t_puts, &t_gets,
                                 &t_waiting, &t_sim, &t_gwait, &t_pwait};
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
        if (SLOT(self, *offs[i]) == NULL) return 0;
    PyObject *sim = SLOT(self, t_sim);
    return Py_TYPE(sim) == SimT && SLOT(sim, s_now) != NULL &&
           PyList_CheckExact(SLOT(self, t_put_queue)) &&
           PyList_CheckExact(SLOT(self, t_get_queue)) && PyList_CheckExact(SLOT(self, t_items)) &&
           PyDict_CheckExact(SLOT(self, t_waiting));
}

/* self._larea += level * (now - self._last); self._last = now */
static int level_changing(PyObject *self, Py_ssize_t level, PyObject *now) {
    PyObject *larea = SLOT(self, t_larea), *last = SLOT(self, t_last), *nl;
    if (PyFloat_CheckExact(larea) && PyFloat_CheckExact(last) && PyFloat_CheckExact(now) &&
        level < ((Py_ssize_t)1 << 53)) {
        nl = PyFloat_FromDouble(PyFloat_AS_DOUBLE(larea) +
                                (double)level * (PyFloat_AS_DOUBLE(now) - PyFloat_AS_DOUBLE(last)));
    } else {
        PyObject *lv = PyLong_FromSsize_t(level);
        PyObject *diff = lv ? PyNumber_Subtract(now, last) : NULL;
        PyObject *prod = diff ? PyNumber_Multiply(lv, diff) : NULL;
        nl = prod ? PyNumber_InPlaceAdd(larea, prod) : NULL;
        Py_XDECREF(lv);
        Py_XDECREF(diff);
        Py_XDECREF(prod);
    }
    if (nl == NULL) return -1;
    slot_steal(self, t_larea, nl);
    slot_set(self, t_last, now);
    return 0;
}

/* if self._waiting: queued = self._waiting.pop(event, None); if queued is not
 * None: self.<wait> += now - queued */
static int count_wait(PyObject *self, PyObject *event, PyObject *now, Py_ssize_t off) {
    PyObject *waiting = SLOT(self, t_waiting);
    if (!PyDict_GET_SIZE(waiting)) return 0;
    Py_INCREF(waiting);
    PyObject *queued = dict_pop(waiting, event, 0);
    Py_DECREF(waiting);
    if (queued == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *d = PyNumber_Subtract(now, queued);
    Py_DECREF(queued);
    if (d == NULL) return -1;
    PyObject *w = SLOT(self, off);
    if (w == NULL) {
        Py_DECREF(d);
        return -1;
    }
    PyObject *nw = PyNumber_InPlaceAdd(w, d);
    Py_DECREF(d);
    if (nw == NULL) return -1;
    slot_steal(self, off, nw);
    return 0;
}

static PyObject *store_event(PyObject *self, PyObject *cbs, PyObject *data) {
    PyObject *event = new_event();
    if (event == NULL) return NULL;
    slot_set(event, o_sim, SLOT(self, t_sim));
    slot_set(event, o_value, PENDING);
    slot_set(event, o_ok, Py_True);
    slot_set(event, o_waiter, Py_None);
    slot_set(event, o_cbs, cbs);
    slot_set(event, o_owner, self);
    slot_set(event, o_data, data);
    return event;
}

/* self._submit(event, queue, put) */
static PyObject *submit(PyObject *self, PyObject *event, PyObject *queue, PyObject *put) {
    PyObject *a[3] = {event, queue, put};
    PyObject *r = call_method(self, n_submit, a, 3);
    Py_DECREF(event);
    return r;
}

/* Store.put, for an exact Store. */
static PyObject *store_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    if (kwnames != NULL || nargs != 1 || Py_TYPE(self) != StoreT || !store_ready(self))
        return call_orig(orig_put, self, args, nargs, kwnames);
    PyObject *item = args[0];
    PyObject *event = store_event(self, SLOT(self, t_put_cbs), item);
    if (event == NULL) return NULL;
    PyObject *put_queue = SLOT(self, t_put_queue);
    if (PyList_GET_SIZE(put_queue)) return submit(self, event, put_queue, Py_True);
    PyObject *items = SLOT(self, t_items), *sim = SLOT(self, t_sim);
    Py_INCREF(items);
    Py_INCREF(sim);
    Py_ssize_t level = PyList_GET_SIZE(items);
    PyObject *now = SLOT(sim, s_now);
    Py_INCREF(now);
    int room = len_lt(level, SLOT(self, t_capacity));
    if (room < 0) goto error;
    if (room) {
        if (level_changing(self, level, now) < 0) goto error;
        if (PyList_Append(items, item) < 0) goto error;
        /* if level >= self._lmax: self._lmax = level + 1 */
        PyObject *lmax = SLOT(self, t_lmax);
        int ge;
        if (lmax != NULL && PyFloat_CheckExact(lmax) && level < ((Py_ssize_t)1 << 53)) {
            ge = (double)level >= PyFloat_AS_DOUBLE(lmax);
        } else if (lmax != NULL) {
            PyObject *lv = PyLong_FromSsize_t(level);
            ge = lv ? PyObject_RichCompareBool(lv, lmax, Py_GE) : -1;
            Py_XDECREF(lv);
        } else {
            ge = -1;
            PyErr_SetString(PyExc_AttributeError, "_lmax");
        }
        if (ge < 0) goto error;
        if (ge) {
            PyObject *nm = PyLong_FromSsize_t(level + 1);
            if (nm == NULL) goto error;
            slot_steal(self, t_lmax, nm);
        }
        PyObject *p = int_inc(SLOT(self, t_puts));
        if (p == NULL) goto error;
        slot_steal(self, t_puts, p);
        slot_set(event, o_value, Py_None);
        if (now_append(sim, event) < 0) goto error;
    } else {
        if (PyList_Append(put_queue, event) < 0) goto error;
        if (PyDict_SetItem(SLOT(self, t_waiting), event, now) < 0) goto error;
    }
    Py_DECREF(items);
    Py_DECREF(sim);
    Py_DECREF(now);
    return event;
error:
    Py_DECREF(items);
    Py_DECREF(sim);
    Py_DECREF(now);
    Py_DECREF(event);
    return NULL;
}

/* items.pop(0) */
static PyObject *pop_first(PyObject *items) {
    PyObject *v = PyList_GET_ITEM(items, 0);
    Py_INCREF(v);
    if (PyList_SetSlice(items, 0, 1, NULL) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* Store.get, for an exact Store. */
static PyObject *store_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    if (kwnames != NULL || nargs != 0 || Py_TYPE(self) != StoreT || !store_ready(self))
        return call_orig(orig_get, self, args, nargs, kwnames);
    PyObject *event = store_event(self, SLOT(self, t_get_cbs), Py_None);
    if (event == NULL) return NULL;
    PyObject *get_queue = SLOT(self, t_get_queue);
    if (PyList_GET_SIZE(get_queue)) return submit(self, event, get_queue, Py_False);
    PyObject *items = SLOT(self, t_items), *sim = SLOT(self, t_sim);
    Py_INCREF(items);
    Py_INCREF(sim);
    PyObject *now = SLOT(sim, s_now);
    Py_INCREF(now);
    if (PyList_GET_SIZE(items)) {
        if (level_changing(self, PyList_GET_SIZE(items), now) < 0) goto error;
        PyObject *g = int_inc(SLOT(self, t_gets));
        if (g == NULL) goto error;
        slot_steal(self, t_gets, g);
        PyObject *v = pop_first(items);
        if (v == NULL) goto error;
        slot_steal(event, o_value, v);
        if (now_append(sim, event) < 0) goto error;
    } else {
        if (PyList_Append(get_queue, event) < 0) goto error;
        if (PyDict_SetItem(SLOT(self, t_waiting), event, now) < 0) goto error;
    }
    Py_DECREF(items);
    Py_DECREF(sim);
    Py_DECREF(now);
    return event;
error:
    Py_DECREF(items);
    Py_DECREF(sim);
    Py_DECREF(now);
    Py_DECREF(event);
    return NULL;
}

/* One step of _trigger_get / _trigger_put for an exact Store, whose _do_get and
 * _do_put always return False: the head of the queue is tried once. */
static PyObject *store_trigger(PyObject *self, int put) {
    PyObject *queue = SLOT(self, put ? t_put_queue : t_get_queue);
    if (PyList_GET_SIZE(queue) == 0) Py_RETURN_NONE;
    Py_INCREF(queue);
    PyObject *event = PyList_GET_ITEM(queue, 0);
    Py_INCREF(event);
    PyObject *items = SLOT(self, t_items), *sim = SLOT(self, t_sim);
    Py_INCREF(items);
    Py_INCREF(sim);
    PyObject *now = SLOT(sim, s_now);
    Py_INCREF(now);
    PyObject *ret = NULL;
    Py_ssize_t level = PyList_GET_SIZE(items);
    if (put) {
        /* Store._do_put */
        int room = len_lt(level, SLOT(self, t_capacity));
        if (room < 0) goto done;
        if (room) {
            if (level_changing(self, level, now) < 0) goto done;
            PyObject *data = ev_get(event, o_data, n_data);
            if (data == NULL) goto done;
            int err = PyList_Append(items, data);
            Py_DECREF(data);
            if (err < 0) goto done;
            PyObject *lmax = SLOT(self, t_lmax);
            PyObject *lv = PyLong_FromSsize_t(level);
            int ge = lv && lmax ? PyObject_RichCompareBool(lv, lmax, Py_GE) : -1;
            Py_XDECREF(lv);
            if (ge < 0) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_AttributeError, "_lmax");
                goto done;
            }
            if (ge) {
                PyObject *nm = PyLong_FromSsize_t(level + 1);
                if (nm == NULL) goto done;
                slot_steal(self, t_lmax, nm);
            }
            PyObject *p = int_inc(SLOT(self, t_puts));
            if (p == NULL) goto done;
            slot_steal(self, t_puts, p);
            if (count_wait(self, event, now, t_pwait) < 0) goto done;
            if (ev_set(event, o_value, n_value, Py_None) < 0) goto done;
            if (now_append(sim, event) < 0) goto done;
        }
    } else if (level) {
        /* Store._do_get */
        if (level_changing(self, level, now) < 0) goto done;
        PyObject *g = int_inc(SLOT(self, t_gets));
        if (g == NULL) goto done;
        slot_steal(self, t_gets, g);
        if (count_wait(self, event, now, t_gwait) < 0) goto done;
        if (PyList_GET_SIZE(items) == 0) {
            PyErr_SetString(PyExc_IndexError, "pop from empty list");
            goto done;
        }
        PyObject *v = pop_first(items);
        if (v == NULL) goto done;
        int err = ev_set(event, o_value, n_value, v);
        Py_DECREF(v);
        if (err < 0 || now_append(sim, event) < 0) goto done;
    }
    /* if get._value is PENDING: index += 1; else: del queue[index] */
    {
        PyObject *v = ev_get(event, o_value, n_value);
        if (v == NULL) goto done;
        Py_DECREF(v);
        if (v != PENDING) {
            if (PyList_GET_SIZE(queue) == 0) {
                PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
                goto done;
            }
            if (PyList_SetSlice(queue, 0, 1, NULL) < 0) goto done;
        }
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    Py_DECREF(queue);
    Py_DECREF(event);
    Py_DECREF(items);
    Py_DECREF(sim);
    Py_DECREF(now);
    return ret;
}

static PyObject *orig_trigger_get, *orig_trigger_put;

/* _PutGetResource._trigger_get / _trigger_put: the exact Store's, else Python's. */
static PyObject *pg_trigger_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || Py_TYPE(self) != StoreT || !store_ready(self))
        return call_orig(orig_trigger_get, self, args, nargs, NULL);
    return store_trigger(self, 0);
}

static PyObject *pg_trigger_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || Py_TYPE(self) != StoreT || !store_ready(self))
        return call_orig(orig_trigger_put, self, args, nargs, NULL);
    return store_trigger(self, 1);
}

/* ------------------------------------------------------------------ install */

static int offset_of(PyTypeObject *tp, const char *name, Py_ssize_t *out) {
    PyObject *d = PyObject_GetAttrString((PyObject *)tp, name);
    if (d == NULL) return -1;
    if (Py_TYPE(d) != &PyMemberDescr_Type ||
        ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_ImportError, "%s.%s is not a slot", tp->tp_name, name);
        Py_DECREF(d);
        return -1;
    }
    *out = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return 0;
}

static PyObject *get(PyObject *mod, const char *name) {
    return PyObject_GetAttrString(mod, name);
}

/* The docstring of a C method: the Python one's, after a text signature. */
static const char *make_doc(PyObject *func, const char *name, const char *sig) {
    PyObject *doc = PyObject_GetAttrString(func, "__doc__");
    if (doc == NULL) {
        PyErr_Clear();
        return NULL;
    }
    const char *text = doc == Py_None ? "" : PyUnicode_AsUTF8(doc);
    if (text == NULL) {
        PyErr_Clear();
        text = "";
    }
    size_t n = strlen(name) + strlen(sig) + strlen(text) + 8;
    char *buf = PyMem_RawMalloc(n); /* kept for the life of the process */
    if (buf != NULL) snprintf(buf, n, "%s%s\n--\n\n%s", name, sig, text);
    Py_DECREF(doc);
    return buf;
}

static int put_method(PyTypeObject *tp, PyMethodDef *def, PyObject **orig, const char *sig,
                      const char *alias) {
    *orig = PyObject_GetAttrString((PyObject *)tp, def->ml_name);
    if (*orig == NULL) return -1;
    if (!PyFunction_Check(*orig)) {
        PyErr_Format(PyExc_ImportError, "%s.%s is not a Python function", tp->tp_name,
                     def->ml_name);
        return -1;
    }
    def->ml_doc = make_doc(*orig, def->ml_name, sig);
    PyObject *descr = PyDescr_NewMethod(tp, def);
    if (descr == NULL) return -1;
    int err = PyObject_SetAttrString((PyObject *)tp, def->ml_name, descr);
    if (err == 0 && alias != NULL) err = PyObject_SetAttrString((PyObject *)tp, alias, descr);
    Py_DECREF(descr);
    return err;
}

static PyMethodDef run_fifo_def = {"_run_fifo", (PyCFunction)(void (*)(void))run_fifo,
                                   METH_FASTCALL, NULL};
static PyMethodDef delay_def = {"delay", (PyCFunction)(void (*)(void))sim_delay,
                                METH_FASTCALL | METH_KEYWORDS, NULL};
static PyMethodDef spawn_def = {"spawn", (PyCFunction)(void (*)(void))sim_spawn,
                                METH_FASTCALL | METH_KEYWORDS, NULL};
static PyMethodDef succeed_def = {"succeed", (PyCFunction)(void (*)(void))event_succeed,
                                  METH_FASTCALL | METH_KEYWORDS, NULL};
static PyMethodDef exit_def = {"__exit__", (PyCFunction)(void (*)(void))event_exit,
                               METH_FASTCALL, NULL};
static PyMethodDef request_def = {"request", (PyCFunction)(void (*)(void))resource_request,
                                  METH_FASTCALL | METH_KEYWORDS, NULL};
static PyMethodDef grant_next_def = {"_grant_next",
                                     (PyCFunction)(void (*)(void))resource_grant_next,
                                     METH_FASTCALL, NULL};
static PyMethodDef put_def = {"put", (PyCFunction)(void (*)(void))store_put,
                              METH_FASTCALL | METH_KEYWORDS, NULL};
static PyMethodDef get_def = {"get", (PyCFunction)(void (*)(void))store_get,
                              METH_FASTCALL | METH_KEYWORDS, NULL};
static PyMethodDef trigger_get_def = {"_trigger_get", (PyCFunction)(void (*)(void))pg_trigger_get,
                                      METH_FASTCALL, NULL};
static PyMethodDef trigger_put_def = {"_trigger_put", (PyCFunction)(void (*)(void))pg_trigger_put,
                                      METH_FASTCALL, NULL};

static PyMethodDef heappush_def = {"heappush", (PyCFunction)(void (*)(void))ck_heappush,
                                   METH_FASTCALL,
                                   "heappush(heap, item)\n--\n\nheapq.heappush, for a list "
                                   "or the compiled kernel's TimeHeap."};
static PyMethodDef heappop_def = {"heappop", (PyCFunction)ck_heappop, METH_O,
                                  "heappop(heap)\n--\n\nheapq.heappop, for a list or the "
                                  "compiled kernel's TimeHeap."};

static PyMethodDef resume_def = {"_resume", (PyCFunction)(void (*)(void))ck_resume,
                                 METH_FASTCALL,
                                 "_resume(sim, proc, event)\n--\n\nDrive *proc* with the "
                                 "outcome of *event* until it waits on a pending event or ends "
                                 "(the compiled kernel's, see _kernel._resume)."};

#define OFF(tp, name, var) \
    if (offset_of(tp, name, &var) < 0) goto error

static PyObject *install(PyObject *module, PyObject *kernel) {
    if (installed) {
        if (PyModule_GetDict(kernel) == kdict) Py_RETURN_NONE;
        PyErr_SetString(PyExc_ImportError,
                        "the compiled kernel already serves another interpreter's kernel");
        return NULL;
    }
    PyObject *collections = NULL;
    if (!(EventT = (PyTypeObject *)get(kernel, "Event"))) goto error;
    if (!(ProcessT = (PyTypeObject *)get(kernel, "Process"))) goto error;
    if (!(SimT = (PyTypeObject *)get(kernel, "Sim"))) goto error;
    if (!(BucketT = (PyTypeObject *)get(kernel, "_Bucket"))) goto error;
    if (!(PENDING = get(kernel, "PENDING"))) goto error;
    if (!(DONE = get(kernel, "_DONE"))) goto error;
    if (!(FUTURE = get(kernel, "_FUTURE"))) goto error;
    if (!(START = get(kernel, "_START"))) goto error;
    if (!(StopRun = get(kernel, "_StopRun"))) goto error;
    if (!(collections = PyImport_ImportModule("collections"))) goto error;
    if (!(DequeT = (PyTypeObject *)get(collections, "deque"))) goto error;
    Py_CLEAR(collections);
    if (!PyType_Check(EventT) || !PyType_Check(ProcessT) || !PyType_Check(SimT) ||
        !PyType_Check(BucketT) || !PyType_Check(DequeT)) {
        PyErr_SetString(PyExc_ImportError, "the kernel's classes are not types");
        goto error;
    }
    OFF(EventT, "_cbs", o_cbs);
    OFF(EventT, "_data", o_data);
    OFF(EventT, "_ok", o_ok);
    OFF(EventT, "_owner", o_owner);
    OFF(EventT, "_value", o_value);
    OFF(EventT, "_waiter", o_waiter);
    OFF(EventT, "sim", o_sim);
    OFF(ProcessT, "_gen", o_gen);
    OFF(ProcessT, "_target", o_target);
    OFF(SimT, "now", s_now);
    OFF(SimT, "active_process", s_active);
    OFF(SimT, "_buckets", s_buckets);
    OFF(SimT, "_times", s_times);
    OFF(SimT, "_ubuckets", s_ubuckets);
    OFF(SimT, "_urgentq", s_urgentq);
    OFF(SimT, "_timedq", s_timedq);
    OFF(SimT, "_nowq", s_nowq);
    OFF(SimT, "_keyed", s_keyed);
    OFF(SimT, "_plain", s_plain);
    OFF(SimT, "_now_append", s_now_append);
    OFF(SimT, "_npid", s_npid);
    OFF(SimT, "_tracer", s_tracer);
    OFF(BucketT, "when", b_when);
    kdict = PyModule_GetDict(kernel);
    Py_INCREF(kdict);
    if (PyType_Ready(&TimeHeapType) < 0 || PyType_Ready(&TimeMapType) < 0) goto error;
    {
        PyObject *push = PyCFunction_New(&heappush_def, NULL);
        PyObject *pop = push ? PyCFunction_New(&heappop_def, NULL) : NULL;
        if (!(orig_resume = PyDict_GetItemString(kdict, "_resume")) ||
            !PyFunction_Check(orig_resume)) {
            Py_XDECREF(push);
            Py_XDECREF(pop);
            PyErr_SetString(PyExc_ImportError, "_kernel._resume is not a Python function");
            goto error;
        }
        Py_INCREF(orig_resume);
        PyObject *resume = pop ? PyCFunction_New(&resume_def, NULL) : NULL;
        int err = resume == NULL || PyDict_SetItemString(kdict, "_resume", resume) < 0;
        Py_XDECREF(resume);
        err = err || pop == NULL || PyDict_SetItemString(kdict, "heappush", push) < 0 ||
                  PyDict_SetItemString(kdict, "heappop", pop) < 0 ||
                  PyDict_SetItemString(kdict, "_new_times", (PyObject *)&TimeHeapType) < 0 ||
                  PyDict_SetItemString(kdict, "_new_buckets", (PyObject *)&TimeMapType) < 0;
        Py_XDECREF(push);
        Py_XDECREF(pop);
        if (err) goto error;
    }
    if (put_method(SimT, &run_fifo_def, &orig_run_fifo, "($self, /)", NULL) < 0) goto error;
    if (put_method(SimT, &delay_def, &orig_delay, "($self, /, delay, value=None)",
                   "timeout") < 0)
        goto error;
    if (put_method(SimT, &spawn_def, &orig_spawn,
                   "($self, fn, /, *args, name=None, **kwargs)", "process") < 0)
        goto error;
    if (put_method(EventT, &succeed_def, &orig_succeed, "($self, /, value=None)", NULL) < 0)
        goto error;
    if (put_method(EventT, &exit_def, &orig_exit, "($self, exc_type, exc, tb, /)", NULL) < 0)
        goto error;
    installed = 1;
    Py_RETURN_NONE;
error:
    Py_XDECREF(collections);
    return NULL;
}

static PyObject *install_resources(PyObject *module, PyObject *resources) {
    if (!installed) {
        PyErr_SetString(PyExc_ImportError, "install() the kernel first");
        return NULL;
    }
    if (resources_installed) Py_RETURN_NONE;
    if (!(ResourceT = (PyTypeObject *)get(resources, "Resource"))) return NULL;
    if (!(StoreT = (PyTypeObject *)get(resources, "Store"))) return NULL;
    OFF(ResourceT, "_marker", r_marker);
    OFF(ResourceT, "users", r_users);
    OFF(ResourceT, "queue", r_queue);
    OFF(ResourceT, "_busy", r_busy);
    OFF(ResourceT, "_capacity", r_capacity);
    OFF(ResourceT, "_grants", r_grants);
    OFF(ResourceT, "_qarea", r_qarea);
    OFF(ResourceT, "_qmax", r_qmax);
    OFF(ResourceT, "sim", r_sim);
    OFF(ResourceT, "_release_cbs", r_release_cbs);
    OFF(ResourceT, "_wsum", r_wsum);
    OFF(ResourceT, "_wmax", r_wmax);
    PyTypeObject *PutGetT = (PyTypeObject *)get(resources, "_PutGetResource");
    if (PutGetT == NULL) return NULL;
    Py_DECREF(PutGetT); /* the module keeps it */
    OFF(PutGetT, "_put_cbs", t_put_cbs);
    OFF(PutGetT, "_get_cbs", t_get_cbs);
    OFF(PutGetT, "put_queue", t_put_queue);
    OFF(PutGetT, "get_queue", t_get_queue);
    OFF(PutGetT, "_capacity", t_capacity);
    OFF(PutGetT, "_larea", t_larea);
    OFF(PutGetT, "_last", t_last);
    OFF(PutGetT, "_lmax", t_lmax);
    OFF(PutGetT, "_puts", t_puts);
    OFF(PutGetT, "_gets", t_gets);
    OFF(PutGetT, "_waiting", t_waiting);
    OFF(PutGetT, "sim", t_sim);
    OFF(PutGetT, "_gwait", t_gwait);
    OFF(PutGetT, "_pwait", t_pwait);
    OFF(StoreT, "items", t_items);
    if (put_method(ResourceT, &request_def, &orig_request, "($self, /)", NULL) < 0 ||
        put_method(ResourceT, &grant_next_def, &orig_grant_next, "($self, release, /)",
                   NULL) < 0 ||
        put_method(StoreT, &put_def, &orig_put, "($self, /, item)", NULL) < 0 ||
        put_method(StoreT, &get_def, &orig_get, "($self, /)", NULL) < 0 ||
        put_method(PutGetT, &trigger_get_def, &orig_trigger_get, "($self, _event, /)",
                   NULL) < 0 ||
        put_method(PutGetT, &trigger_put_def, &orig_trigger_put, "($self, _event, /)",
                   NULL) < 0)
        return NULL;
    resources_installed = 1;
    Py_RETURN_NONE;
error:
    return NULL;
}


/* ------------------------------------------------------------ SmallRandom
 *
 * simulacra.rng._small.SmallRandom (xoshiro256++) in C: the same draws, bit
 * for bit, from 32 bytes of state. random(), uniform(), expovariate(),
 * getrandbits(), randrange() and randint() on 64-bit ints, choice() on a list
 * or tuple, shuffle() on a list, getstate() and setstate() are C; anything
 * else (a keyword, a step, a subclass of int, an error) runs the pure class's
 * own method on a copy of the state, which is then copied back, so every rare
 * path and every message is the pure class's.
 */

typedef struct {
    PyObject_HEAD
    uint64_t s[4];
} SmallObject;

static PyTypeObject SmallType;
static PyObject *py_small = NULL; /* simulacra.rng._small.PySmallRandom */
static PyObject *py_rebuild = NULL; /* simulacra.rng._small._rebuild */

static inline uint64_t small_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t small_next(SmallObject *r) {
    uint64_t *s = r->s;
    const uint64_t result = small_rotl(s[0] + s[3], 23) + s[0];
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = small_rotl(s[3], 45);
    return result;
}

static inline double small_random(SmallObject *r) {
    return (double)(small_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* An index below n (n >= 1): next() >> (64 - bit_length(n)) until one is below n. */
static inline uint64_t small_below(SmallObject *r, uint64_t n) {
    int bits = 64 - __builtin_clzll(n);
    int shift = 64 - bits;
    uint64_t v = small_next(r) >> shift;
    while (v >= n) v = small_next(r) >> shift;
    return v;
}

static int small_import(void) {
    if (py_small != NULL) return 0;
    PyObject *mod = PyImport_ImportModule("simulacra.rng._small");
    if (mod == NULL) return -1;
    py_small = PyObject_GetAttrString(mod, "PySmallRandom");
    py_rebuild = py_small ? PyObject_GetAttrString(mod, "_rebuild") : NULL;
    Py_DECREF(mod);
    if (py_rebuild == NULL) {
        Py_CLEAR(py_small);
        return -1;
    }
    return 0;
}

static PyObject *small_getstate(SmallObject *r, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(KKKK)", (unsigned long long)r->s[0], (unsigned long long)r->s[1],
                         (unsigned long long)r->s[2], (unsigned long long)r->s[3]);
}

/* The pure class's setstate checks the state; then the words are read here. */
static int small_set_words(SmallObject *r, PyObject *state) {
    if (small_import() < 0) return -1;
    PyObject *pure = PyObject_CallOneArg(py_small, zero_long);
    if (pure == NULL) return -1;
    PyObject *res = PyObject_CallMethod(pure, "setstate", "(O)", state);
    Py_DECREF(pure);
    if (res == NULL) return -1;
    Py_DECREF(res);
    uint64_t w[4];
    for (int i = 0; i < 4; i++) {
        PyObject *item = PySequence_GetItem(state, i);
        if (item == NULL) return -1;
        w[i] = (uint64_t)PyLong_AsUnsignedLongLong(item);
        Py_DECREF(item);
        if (PyErr_Occurred()) return -1;
    }
    memcpy(r->s, w, sizeof w);
    return 0;
}

static PyObject *small_setstate(SmallObject *r, PyObject *state) {
    if (small_set_words(r, state) < 0) return NULL;
    Py_RETURN_NONE;
}

/* The pure class's method *name* on a copy of the state, the state copied back. */
static PyObject *small_pure(SmallObject *r, const char *name, PyObject *args, PyObject *kwargs) {
    if (small_import() < 0) return NULL;
    PyObject *pure = PyObject_CallOneArg(py_small, zero_long);
    if (pure == NULL) return NULL;
    PyObject *state = small_getstate(r, NULL);
    PyObject *res = NULL, *after = NULL, *method = NULL;
    if (state == NULL) goto done;
    PyObject *ok = PyObject_CallMethod(pure, "setstate", "(O)", state);
    if (ok == NULL) goto done;
    Py_DECREF(ok);
    method = PyObject_GetAttrString(pure, name);
    if (method == NULL) goto done;
    res = PyObject_Call(method, args, kwargs);
    {
        /* The state is copied back even when the method raised (its error kept). */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        after = PyObject_CallMethod(pure, "getstate", NULL);
        if (after == NULL || small_set_words(r, after) < 0) {
            Py_CLEAR(res);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(type, value, tb);
        }
    }
done:
    Py_XDECREF(method);
    Py_XDECREF(after);
    Py_XDECREF(state);
    Py_DECREF(pure);
    return res;
}

static PyObject *small_pure_fast(SmallObject *r, const char *name, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *kwargs = NULL;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        kwargs = PyDict_New();
        if (kwargs == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < nk; i++) {
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
                Py_DECREF(tuple);
                Py_DECREF(kwargs);
                return NULL;
            }
        }
    }
    PyObject *res = small_pure(r, name, tuple, kwargs);
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return res;
}

static uint64_t small_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A new object holds SmallRandom(0)'s state until __init__ seeds it: never all zero. */
static PyObject *small_new(PyTypeObject *type, PyObject *Py_UNUSED(args),
                           PyObject *Py_UNUSED(kwargs)) {
    SmallObject *r = (SmallObject *)type->tp_alloc(type, 0);
    if (r == NULL) return NULL;
    uint64_t hi = 0, lo = 0;
    r->s[0] = small_splitmix(&hi);
    r->s[1] = small_splitmix(&hi);
    r->s[2] = small_splitmix(&lo);
    r->s[3] = small_splitmix(&lo);
    return (PyObject *)r;
}

static int small_init(SmallObject *r, PyObject *args, PyObject *kwargs) {
    if (small_import() < 0) return -1;
    PyObject *pure = PyObject_Call(py_small, args, kwargs); /* checks and seeds */
    if (pure == NULL) return -1;
    PyObject *state = PyObject_CallMethod(pure, "getstate", NULL);
    Py_DECREF(pure);
    if (state == NULL) return -1;
    int err = small_set_words(r, state);
    Py_DECREF(state);
    return err;
}

static PyObject *small_m_random(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    if (nargs == 0 && kwnames == NULL) return PyFloat_FromDouble(small_random(r));
    return small_pure_fast(r, "random", args, nargs, kwnames); /* its error */
}

static PyObject *small_m_getstate(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    if (nargs == 0 && kwnames == NULL) return small_getstate(r, NULL);
    return small_pure_fast(r, "getstate", args, nargs, kwnames); /* its error */
}

static PyObject *small_m_uniform(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    if (nargs == 2 && kwnames == NULL && PyFloat_CheckExact(args[0]) &&
        PyFloat_CheckExact(args[1])) {
        double a = PyFloat_AS_DOUBLE(args[0]), b = PyFloat_AS_DOUBLE(args[1]);
        return PyFloat_FromDouble(a + (b - a) * small_random(r));
    }
    return small_pure_fast(r, "uniform", args, nargs, kwnames);
}

static PyObject *small_m_expovariate(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames) {
    if (kwnames == NULL && nargs <= 1) {
        double lambd = 1.0;
        if (nargs == 1) {
            if (!PyFloat_CheckExact(args[0]))
                return small_pure_fast(r, "expovariate", args, nargs, kwnames);
            lambd = PyFloat_AS_DOUBLE(args[0]);
        }
        if (lambd != 0.0) return PyFloat_FromDouble(-log(1.0 - small_random(r)) / lambd);
    }
    return small_pure_fast(r, "expovariate", args, nargs, kwnames);
}

static PyObject *small_m_getrandbits(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames) {
    if (nargs == 1 && kwnames == NULL && PyLong_CheckExact(args[0])) {
        long k = PyLong_AsLong(args[0]);
        if (k >= 1 && k <= 64) return PyLong_FromUnsignedLongLong(small_next(r) >> (64 - k));
        PyErr_Clear();
    }
    return small_pure_fast(r, "getrandbits", args, nargs, kwnames);
}

/* An exact int of 64 bits into *out; 0 when it is not one (no error set). */
static inline int small_int64(PyObject *o, long long *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

static PyObject *small_range(SmallObject *r, long long start, long long stop) {
    uint64_t n = (uint64_t)stop - (uint64_t)start;
    return PyLong_FromLongLong((long long)((uint64_t)start + small_below(r, n)));
}

static PyObject *small_m_randrange(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    long long a, b;
    if (kwnames == NULL) {
        if (nargs == 1 && small_int64(args[0], &b) && b > 0) return small_range(r, 0, b);
        if (nargs == 2 && small_int64(args[0], &a) && small_int64(args[1], &b) && b > a)
            return small_range(r, a, b);
    }
    return small_pure_fast(r, "randrange", args, nargs, kwnames);
}

static PyObject *small_m_randint(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    long long a, b;
    if (kwnames == NULL && nargs == 2 && small_int64(args[0], &a) && small_int64(args[1], &b) &&
        b >= a && b < LLONG_MAX)
        return small_range(r, a, b + 1);
    return small_pure_fast(r, "randint", args, nargs, kwnames);
}

static PyObject *small_m_choice(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    if (nargs != 1 || kwnames != NULL) return small_pure_fast(r, "choice", args, nargs, kwnames);
    PyObject *seq = args[0];
    if (PyList_CheckExact(seq) && PyList_GET_SIZE(seq) > 0) {
        PyObject *item = PyList_GET_ITEM(seq, small_below(r, (uint64_t)PyList_GET_SIZE(seq)));
        Py_INCREF(item);
        return item;
    }
    if (PyTuple_CheckExact(seq) && PyTuple_GET_SIZE(seq) > 0) {
        PyObject *item = PyTuple_GET_ITEM(seq, small_below(r, (uint64_t)PyTuple_GET_SIZE(seq)));
        Py_INCREF(item);
        return item;
    }
    return small_pure_fast(r, "choice", args, 1, NULL);
}

static PyObject *small_m_shuffle(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    if (nargs != 1 || kwnames != NULL) return small_pure_fast(r, "shuffle", args, nargs, kwnames);
    PyObject *x = args[0];
    if (PyList_CheckExact(x)) {
        for (Py_ssize_t i = PyList_GET_SIZE(x) - 1; i > 0; i--) {
            if (i >= PyList_GET_SIZE(x)) continue; /* never: nothing here runs Python code */
            Py_ssize_t j = (Py_ssize_t)small_below(r, (uint64_t)i + 1);
            PyObject *tmp = PyList_GET_ITEM(x, i);
            PyList_SET_ITEM(x, i, PyList_GET_ITEM(x, j));
            PyList_SET_ITEM(x, j, tmp);
        }
        Py_RETURN_NONE;
    }
    return small_pure_fast(r, "shuffle", args, 1, NULL);
}

static PyObject *small_m_setstate(SmallObject *r, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    if (nargs == 1 && kwnames == NULL) return small_setstate(r, args[0]);
    return small_pure_fast(r, "setstate", args, nargs, kwnames); /* its error, or it is set */
}

static PyObject *small_reduce(SmallObject *r, PyObject *Py_UNUSED(ignored)) {
    if (small_import() < 0) return NULL;
    PyObject *state = small_getstate(r, NULL);
    if (state == NULL) return NULL;
    return Py_BuildValue("(O(N))", py_rebuild, state);
}

static PyObject *small_repr(PyObject *Py_UNUSED(self)) {
    return PyUnicode_FromString("SmallRandom(<xoshiro256++>)");
}

static PyMethodDef small_methods[] = {
    {"random", (PyCFunction)(void (*)(void))small_m_random, METH_FASTCALL | METH_KEYWORDS,
     "A float in [0, 1)."},
    {"uniform", (PyCFunction)(void (*)(void))small_m_uniform, METH_FASTCALL | METH_KEYWORDS,
     "a + (b - a) * random()."},
    {"expovariate", (PyCFunction)(void (*)(void))small_m_expovariate,
     METH_FASTCALL | METH_KEYWORDS, "-log(1.0 - random()) / lambd."},
    {"getrandbits", (PyCFunction)(void (*)(void))small_m_getrandbits,
     METH_FASTCALL | METH_KEYWORDS, "An int of k random bits."},
    {"randrange", (PyCFunction)(void (*)(void))small_m_randrange, METH_FASTCALL | METH_KEYWORDS,
     "A random int of range(start, stop, step)."},
    {"randint", (PyCFunction)(void (*)(void))small_m_randint, METH_FASTCALL | METH_KEYWORDS,
     "A random int of [a, b]."},
    {"choice", (PyCFunction)(void (*)(void))small_m_choice, METH_FASTCALL | METH_KEYWORDS,
     "A random element of seq."},
    {"shuffle", (PyCFunction)(void (*)(void))small_m_shuffle, METH_FASTCALL | METH_KEYWORDS,
     "Shuffle x in place."},
    {"getstate", (PyCFunction)(void (*)(void))small_m_getstate, METH_FASTCALL | METH_KEYWORDS,
     "The four state words."},
    {"setstate", (PyCFunction)(void (*)(void))small_m_setstate, METH_FASTCALL | METH_KEYWORDS,
     "Continue from state."},
    {"__reduce__", (PyCFunction)small_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SmallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulacra.SmallRandom",
    .tp_basicsize = sizeof(SmallObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A random stream of 32 bytes of state (xoshiro256++); see "
              "simulacra.rng._small.",
    .tp_new = small_new,
    .tp_init = (initproc)small_init,
    .tp_methods = small_methods,
    .tp_repr = small_repr,
};

static PyMethodDef module_methods[] = {
    {"install", (PyCFunction)install, METH_O,
     "install(kernel_module)\n--\n\nPut the compiled fast paths into simulacra.core._kernel's "
     "classes."},
    {"install_resources", (PyCFunction)install_resources, METH_O,
     "install_resources(resources_module)\n--\n\nThe same for "
     "simulacra.resources._resources."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ckernel_module = {
    PyModuleDef_HEAD_INIT, "simulacra.core._ckernel",
    "Compiled fast paths of the kernel's own classes (see docs/design.md, Compiled kernel).",
    -1, module_methods,
};

#define INTERN(var, s) \
    if (!(var = PyUnicode_InternFromString(s))) return NULL

PyMODINIT_FUNC PyInit__ckernel(void) {
    INTERN(n_cbs, "_cbs");
    INTERN(n_data, "_data");
    INTERN(n_ok, "_ok");
    INTERN(n_owner, "_owner");
    INTERN(n_value, "_value");
    INTERN(n_waiter, "_waiter");
    INTERN(n_sim, "sim");
    INTERN(n_gen, "_gen");
    INTERN(n_target, "_target");
    INTERN(n_send, "send");
    INTERN(n_finish, "_finish");
    INTERN(n_wait_on, "_wait_on");
    INTERN(n_process_failed, "_process_failed");
    INTERN(n_requeue_stopped, "_requeue_stopped");
    INTERN(n_resume, "_resume");
    INTERN(n_popleft, "popleft");
    INTERN(n_append, "append");
    INTERN(n_extend, "extend");
    INTERN(n_cancel, "_cancel");
    INTERN(n_grant_head, "_grant_head");
    INTERN(n_when, "when");
    INTERN(n_ELIDE_REFS, "_ELIDE_REFS");
    INTERN(n_submit, "_submit");
    INTERN(n_now_append, "_now_append");
    INTERN(n_tracer, "_tracer");
    INTERN(n_record, "record");
    INTERN(n_who, "who");
    INTERN(n_now, "now");
    INTERN(n_active, "active_process");
    INTERN(n_throw, "throw");
    INTERN(n_copy_exception, "_copy_exception");
    INTERN(s_resume, "resume");
    INTERN(s_throw, "throw");
    if (!(one = PyLong_FromLong(1))) return NULL;
    if (!(zero_f = PyFloat_FromDouble(0.0))) return NULL;
    if (!(zero_long = PyLong_FromLong(0))) return NULL;
    if (PyType_Ready(&SmallType) < 0) return NULL;
    PyObject *module = PyModule_Create(&ckernel_module);
    if (module == NULL) return NULL;
    Py_INCREF(&SmallType);
    if (PyModule_AddObject(module, "SmallRandom", (PyObject *)&SmallType) < 0) {
        Py_DECREF(&SmallType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
