/* Feasibility prototype for issue 16: the hot loop of the kernel in hand-written C.
 *
 * Not the real kernel: one heap of (time, priority, seq, event) in a C array
 * (SimPy's total order, no tuples), a single-waiter slot, generator resume by
 * PyIter_Send (no StopIteration), a Resource whose `with res.request()` exit
 * schedules a release processed one step later (SimPy's order), and
 * `bare_run`: the bare C loop (heap pop, generator resume, heap push) for the
 * timeout-only workload, whose generators yield plain floats.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct SimObject SimObject;
typedef struct ProcessObject ProcessObject;
typedef struct ResourceObject ResourceObject;

enum { K_PLAIN = 0, K_REQUEST = 1, K_RELEASE = 2 };

typedef struct {
    PyObject_HEAD
    SimObject *sim;
    PyObject *value;          /* NULL = pending */
    ProcessObject *waiter;    /* single waiter */
    PyObject *owner;          /* resource for requests/releases */
    int ok;
    int kind;
} EventObject;

struct ProcessObject {
    EventObject ev;
    PyObject *gen;
    PyObject *target;
};

typedef struct { double when; long long key; PyObject *ev; } Entry; /* key = prio<<62 | seq */

struct SimObject {
    PyObject_HEAD
    double now;
    PyObject *now_obj;
    Entry *heap; Py_ssize_t n, cap;
    long long seq;
};

struct ResourceObject {
    PyObject_HEAD
    SimObject *sim;
    Py_ssize_t capacity, users;
    PyObject *queue;   /* list used as FIFO with a head index */
    Py_ssize_t qhead;
};

static PyTypeObject EventType, ProcessType, SimType, ResourceType;

/* ---------------------------------------------------------------- heap */
static inline int entry_lt(const Entry *a, const Entry *b) {
    return a->when < b->when || (a->when == b->when && a->key < b->key);
}
static int heap_push(SimObject *s, double when, int prio, PyObject *ev) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 1024;
        Entry *h = PyMem_Realloc(s->heap, cap * sizeof(Entry));
        if (!h) { PyErr_NoMemory(); return -1; }
        s->heap = h; s->cap = cap;
    }
    Entry e = {when, ((long long)prio << 62) | s->seq++, ev};
    Py_INCREF(ev);
    Py_ssize_t i = s->n++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) >> 1;
        if (!entry_lt(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p]; i = p;
    }
    s->heap[i] = e;
    return 0;
}
static Entry heap_pop(SimObject *s) {
    Entry top = s->heap[0];
    Entry last = s->heap[--s->n];
    Py_ssize_t i = 0, n = s->n;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && entry_lt(&s->heap[c + 1], &s->heap[c])) c++;
        if (!entry_lt(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c]; i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* ---------------------------------------------------------------- events */
static EventObject *new_event(SimObject *sim, PyTypeObject *tp) {
    EventObject *e = PyObject_GC_New(EventObject, tp);
    if (!e) return NULL;
    Py_INCREF(sim); e->sim = sim;
    e->value = NULL; e->waiter = NULL; e->owner = NULL; e->ok = 1; e->kind = K_PLAIN;
    if (tp == &ProcessType) { ((ProcessObject *)e)->gen = NULL; ((ProcessObject *)e)->target = NULL; }
    PyObject_GC_Track(e);
    return e;
}
static int event_traverse(EventObject *e, visitproc visit, void *arg) {
    Py_VISIT(e->sim); Py_VISIT(e->value); Py_VISIT(e->waiter); Py_VISIT(e->owner);
    if (Py_TYPE(e) == &ProcessType) { Py_VISIT(((ProcessObject *)e)->gen); Py_VISIT(((ProcessObject *)e)->target); }
    return 0;
}
static int event_clear(EventObject *e) {
    Py_CLEAR(e->sim); Py_CLEAR(e->value); Py_CLEAR(e->waiter); Py_CLEAR(e->owner);
    if (Py_TYPE(e) == &ProcessType) { Py_CLEAR(((ProcessObject *)e)->gen); Py_CLEAR(((ProcessObject *)e)->target); }
    return 0;
}
static void event_dealloc(EventObject *e) {
    PyObject_GC_UnTrack(e); event_clear(e); PyObject_GC_Del(e);
}

static PyObject *resource_exit(ResourceObject *r, EventObject *req);

static PyObject *event_enter(PyObject *self, PyObject *unused) { Py_INCREF(self); return self; }
static PyObject *event_exit(EventObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (self->kind == K_REQUEST) return resource_exit((ResourceObject *)self->owner, self);
    Py_RETURN_NONE;
}
static PyObject *event_get_value(EventObject *e, void *c) {
    if (!e->value) { PyErr_SetString(PyExc_AttributeError, "pending"); return NULL; }
    Py_INCREF(e->value); return e->value;
}
static PyMethodDef event_methods[] = {
    {"__enter__", event_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))event_exit, METH_FASTCALL, NULL},
    {NULL}
};
static PyGetSetDef event_getset[] = {{"value", (getter)event_get_value, NULL, NULL, NULL}, {NULL}};

/* ---------------------------------------------------------------- sim */
static PyObject *sim_new(PyTypeObject *tp, PyObject *a, PyObject *k) {
    SimObject *s = (SimObject *)tp->tp_alloc(tp, 0);
    if (!s) return NULL;
    s->now = 0.0; s->now_obj = PyFloat_FromDouble(0.0); s->heap = NULL; s->n = s->cap = 0; s->seq = 0;
    return (PyObject *)s;
}
static void sim_dealloc(SimObject *s) {
    for (Py_ssize_t i = 0; i < s->n; i++) Py_DECREF(s->heap[i].ev);
    PyMem_Free(s->heap); Py_XDECREF(s->now_obj); Py_TYPE(s)->tp_free(s);
}
static PyObject *sim_get_now(SimObject *s, void *c) {
    if (!s->now_obj) s->now_obj = PyFloat_FromDouble(s->now);
    Py_XINCREF(s->now_obj); return s->now_obj;
}
static PyObject *sim_delay(SimObject *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1) { PyErr_SetString(PyExc_TypeError, "delay(d)"); return NULL; }
    double d = PyFloat_AsDouble(args[0]);
    if (d == -1.0 && PyErr_Occurred()) return NULL;
    if (!(d >= 0)) { PyErr_SetString(PyExc_ValueError, "negative delay"); return NULL; }
    EventObject *e = new_event(s, &EventType);
    if (!e) return NULL;
    PyObject *v = nargs > 1 ? args[1] : Py_None; Py_INCREF(v); e->value = v;
    if (heap_push(s, s->now + d, 1, (PyObject *)e) < 0) { Py_DECREF(e); return NULL; }
    return (PyObject *)e;
}
static PyObject *sim_spawn(SimObject *s, PyObject *gen) {
    ProcessObject *p = (ProcessObject *)new_event(s, &ProcessType);
    if (!p) return NULL;
    Py_INCREF(gen); p->gen = gen;
    if (heap_push(s, s->now, 0, (PyObject *)p) < 0) { Py_DECREF(p); return NULL; }
    return (PyObject *)p;
}

/* resume proc with value; on finish schedule the process as a triggered event */
static int resume(SimObject *s, ProcessObject *p, PyObject *value) {
    PyObject *res;
    PySendResult r = PyIter_Send(p->gen, value, &res);
    if (r == PYGEN_NEXT) {
        if (Py_TYPE(res) != &EventType && Py_TYPE(res) != &ProcessType) {
            Py_DECREF(res); PyErr_SetString(PyExc_TypeError, "yielded a non-event"); return -1;
        }
        EventObject *nxt = (EventObject *)res;
        if (nxt->waiter) { Py_DECREF(res); PyErr_SetString(PyExc_NotImplementedError, "2nd waiter"); return -1; }
        Py_INCREF(p); nxt->waiter = p;
        Py_XSETREF(p->target, res);
        return 0;
    }
    if (r == PYGEN_RETURN) {
        Py_XSETREF(p->ev.value, res);
        Py_CLEAR(p->target);
        return heap_push(s, s->now, 1, (PyObject *)p);
    }
    return -1;
}

static int grant_next(ResourceObject *r);

static PyObject *sim_run(SimObject *s, PyObject *unused) {
    while (s->n) {
        Entry e = heap_pop(s);
        if (e.when != s->now) { s->now = e.when; Py_CLEAR(s->now_obj); }
        EventObject *ev = (EventObject *)e.ev;
        if (ev->value == NULL && Py_TYPE(ev) == &ProcessType) {   /* start */
            if (resume(s, (ProcessObject *)ev, Py_None) < 0) { Py_DECREF(ev); return NULL; }
            Py_DECREF(ev); continue;
        }
        if (ev->kind == K_RELEASE) {   /* a release: grant the head of the queue */
            if (grant_next((ResourceObject *)ev->owner) < 0) { Py_DECREF(ev); return NULL; }
        }
        ProcessObject *w = ev->waiter;
        if (w) {
            ev->waiter = NULL;
            int rc = resume(s, w, ev->value);
            Py_DECREF(w);
            if (rc < 0) { Py_DECREF(ev); return NULL; }
        }
        Py_DECREF(ev);
    }
    Py_RETURN_NONE;
}

/* The bare loop: generators yield delays (floats); heap pop, resume, push. */
static PyObject *sim_bare_run(SimObject *s, PyObject *gens) {
    Py_ssize_t n = PyList_GET_SIZE(gens);
    for (Py_ssize_t i = 0; i < n; i++) if (heap_push(s, s->now, 0, PyList_GET_ITEM(gens, i)) < 0) return NULL;
    long long events = 0;
    while (s->n) {
        Entry e = heap_pop(s);
        s->now = e.when;
        PyObject *res;
        PySendResult r = PyIter_Send(e.ev, Py_None, &res);
        events++;
        if (r == PYGEN_NEXT) {
            double d = PyFloat_AS_DOUBLE(res); Py_DECREF(res);
            if (heap_push(s, s->now + d, 1, e.ev) < 0) return NULL;
        } else if (r == PYGEN_RETURN) {
            Py_DECREF(res);
        } else { Py_DECREF(e.ev); return NULL; }
        Py_DECREF(e.ev);
    }
    return PyLong_FromLongLong(events);
}

static PyMethodDef sim_methods[] = {
    {"delay", (PyCFunction)(void (*)(void))sim_delay, METH_FASTCALL, NULL},
    {"spawn", (PyCFunction)sim_spawn, METH_O, NULL},
    {"run", (PyCFunction)sim_run, METH_NOARGS, NULL},
    {"bare_run", (PyCFunction)sim_bare_run, METH_O, NULL},
    {NULL}
};
static PyGetSetDef sim_getset[] = {{"now", (getter)sim_get_now, NULL, NULL, NULL}, {NULL}};

/* ---------------------------------------------------------------- resource */
static PyObject *res_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *sim; Py_ssize_t cap = 1;
    if (!PyArg_ParseTuple(args, "O!|n", &SimType, &sim, &cap)) return NULL;
    ResourceObject *r = (ResourceObject *)tp->tp_alloc(tp, 0);
    if (!r) return NULL;
    Py_INCREF(sim); r->sim = (SimObject *)sim; r->capacity = cap; r->users = 0;
    r->queue = PyList_New(0); r->qhead = 0;
    return (PyObject *)r;
}
static void res_dealloc(ResourceObject *r) { Py_XDECREF(r->sim); Py_XDECREF(r->queue); Py_TYPE(r)->tp_free(r); }
static PyObject *res_request(ResourceObject *r, PyObject *unused) {
    SimObject *s = r->sim;
    EventObject *req = new_event(s, &EventType);
    if (!req) return NULL;
    req->kind = K_REQUEST; Py_INCREF(r); req->owner = (PyObject *)r;
    if (PyList_GET_SIZE(r->queue) == r->qhead && r->users < r->capacity) {
        r->users++; Py_INCREF(Py_None); req->value = Py_None;
        if (heap_push(s, s->now, 1, (PyObject *)req) < 0) { Py_DECREF(req); return NULL; }
    } else if (PyList_Append(r->queue, (PyObject *)req) < 0) { Py_DECREF(req); return NULL; }
    return (PyObject *)req;
}
static int grant_next(ResourceObject *r) {
    if (PyList_GET_SIZE(r->queue) > r->qhead && r->users < r->capacity) {
        EventObject *req = (EventObject *)PyList_GET_ITEM(r->queue, r->qhead);
        r->qhead++;
        r->users++; Py_INCREF(Py_None); req->value = Py_None;
        int rc = heap_push(r->sim, r->sim->now, 1, (PyObject *)req);
        if (r->qhead > 4096 && r->qhead * 2 > PyList_GET_SIZE(r->queue)) {  /* compact */
            if (PyList_SetSlice(r->queue, 0, r->qhead, NULL) < 0) return -1;
            r->qhead = 0;
        }
        return rc;
    }
    return 0;
}
static PyObject *resource_exit(ResourceObject *r, EventObject *req) {
    if (req->value == NULL) { PyErr_SetString(PyExc_NotImplementedError, "cancel"); return NULL; }
    r->users--;
    EventObject *rel = new_event(r->sim, &EventType);
    if (!rel) return NULL;
    rel->kind = K_RELEASE; Py_INCREF(r); rel->owner = (PyObject *)r; Py_INCREF(Py_None); rel->value = Py_None;
    int rc = heap_push(r->sim, r->sim->now, 1, (PyObject *)rel);
    Py_DECREF(rel);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}
static PyMethodDef res_methods[] = {{"request", (PyCFunction)res_request, METH_NOARGS, NULL}, {NULL}};

/* ---------------------------------------------------------------- module */
static PyTypeObject EventType = {
    PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "ck.Event", .tp_basicsize = sizeof(EventObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_dealloc = (destructor)event_dealloc, .tp_traverse = (traverseproc)event_traverse,
    .tp_clear = (inquiry)event_clear, .tp_methods = event_methods, .tp_getset = event_getset,
};
static PyTypeObject ProcessType = {
    PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "ck.Process", .tp_basicsize = sizeof(ProcessObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)event_dealloc, .tp_traverse = (traverseproc)event_traverse,
    .tp_clear = (inquiry)event_clear,
};
static PyTypeObject SimType = {
    PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "ck.Sim", .tp_basicsize = sizeof(SimObject),
    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = sim_new, .tp_dealloc = (destructor)sim_dealloc,
    .tp_methods = sim_methods, .tp_getset = sim_getset,
};
static PyTypeObject ResourceType = {
    PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "ck.Resource", .tp_basicsize = sizeof(ResourceObject),
    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = res_new, .tp_dealloc = (destructor)res_dealloc,
    .tp_methods = res_methods,
};
static struct PyModuleDef ckmodule = {PyModuleDef_HEAD_INIT, "ck", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_ck(void) {
    ProcessType.tp_base = &EventType;
    if (PyType_Ready(&EventType) < 0 || PyType_Ready(&ProcessType) < 0 ||
        PyType_Ready(&SimType) < 0 || PyType_Ready(&ResourceType) < 0) return NULL;
    PyObject *m = PyModule_Create(&ckmodule);
    if (!m) return NULL;
    PyModule_AddObjectRef(m, "Event", (PyObject *)&EventType);
    PyModule_AddObjectRef(m, "Process", (PyObject *)&ProcessType);
    PyModule_AddObjectRef(m, "Sim", (PyObject *)&SimType);
    PyModule_AddObjectRef(m, "Resource", (PyObject *)&ResourceType);
    return m;
}
