/*
 * ``async for record in consumer``: the next record of the batch being handed out, in C.
 *
 * The Python reference is RecordPolling.__anext__ (polling.py): its usual case takes the next
 * record of the batch the previous record came from (_take_within_batch) after the checks every
 * poll makes (_ready_for_buffered). In Python that case cost a coroutine, three method calls
 * and a dozen attribute reads per record, more than decoding the record did. RecordIterator
 * makes the same checks and the same changes without any of them, and hands every other case
 * (nothing being handed out, a batch's last record, a pending error, a seek or pause since,
 * time to give the event loop a turn) to the consumer's own __anext__, before changing anything:
 * every error is still raised by Python.
 *
 * CompletedFetch, PartitionState and Record are __slots__ classes: their slots are read and
 * written at the offsets their member descriptors give (configure()), as the interpreter's own
 * slot descriptors do, and only on objects of exactly those classes (or, for records, of Record's
 * subclasses, which add no slots of their own).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "../../slot_access.h"
#include <stdint.h>
#include <time.h>

#include "_peeked_records.h"

typedef struct {
    PyTypeObject *fetch, *state, *record, *poll;
    Py_ssize_t off_fetch_state, off_fetch_epoch, off_fetch_index, off_fetch_items;
    Py_ssize_t off_fetch_are_records;
    Py_ssize_t off_state_epoch, off_state_paused, off_state_position, off_state_processed;
    Py_ssize_t off_record_offset;
    Py_ssize_t off_poll_fetch, off_poll_returned, off_poll_closed;
} layout;

static layout classes;
static int configured = 0;
static PyObject *str_poll_state, *str_fetcher, *str_group, *str_positions;
static PyObject *str_errors, *str_error, *str_error_private, *str_polled;
static PyObject *str_since_yield, *str_anext;

PyDoc_STRVAR(configure_doc,
"configure(completed_fetch, partition_state, record, poll_state)\n"
"\n"
"Tell the fast path the classes whose slots it reads (once, when kayak's consumer loads).");

static PyObject *
configure(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *f, *s, *r, *p;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:configure", &PyType_Type, &f, &PyType_Type, &s,
                          &PyType_Type, &r, &PyType_Type, &p)) {
        return NULL;
    }
    layout fresh;
    fresh.fetch = (PyTypeObject *)f;
    fresh.state = (PyTypeObject *)s;
    fresh.record = (PyTypeObject *)r;
    fresh.poll = (PyTypeObject *)p;
    if (slot_offset(fresh.fetch, "state", &fresh.off_fetch_state) < 0
        || slot_offset(fresh.fetch, "epoch", &fresh.off_fetch_epoch) < 0
        || slot_offset(fresh.fetch, "_index", &fresh.off_fetch_index) < 0
        || slot_offset(fresh.fetch, "_items", &fresh.off_fetch_items) < 0
        || slot_offset(fresh.fetch, "_items_are_records", &fresh.off_fetch_are_records) < 0
        || slot_offset(fresh.state, "epoch", &fresh.off_state_epoch) < 0
        || slot_offset(fresh.state, "paused", &fresh.off_state_paused) < 0
        || slot_offset(fresh.state, "position", &fresh.off_state_position) < 0
        || slot_offset(fresh.state, "processed", &fresh.off_state_processed) < 0
        || slot_offset(fresh.record, "offset", &fresh.off_record_offset) < 0
        || slot_offset(fresh.poll, "fetch", &fresh.off_poll_fetch) < 0
        || slot_offset(fresh.poll, "returned", &fresh.off_poll_returned) < 0
        || slot_offset(fresh.poll, "closed", &fresh.off_poll_closed) < 0) {
        return NULL;
    }
    if (configured) {
        Py_DECREF(classes.fetch);
        Py_DECREF(classes.state);
        Py_DECREF(classes.record);
        Py_DECREF(classes.poll);
    }
    Py_INCREF(fresh.fetch);
    Py_INCREF(fresh.state);
    Py_INCREF(fresh.record);
    Py_INCREF(fresh.poll);
    classes = fresh;
    configured = 1;
    Py_RETURN_NONE;
}

static inline double
monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Where obj's plain attributes are read from: its instance __dict__ (a new reference) when its
 * type reads attributes the generic way and has no class attribute or descriptor called name,
 * else NULL (PyObject_GetAttr then). A dict lookup costs a fifth of PyObject_GetAttr's type
 * lookup and inline-values search, and the fast path reads six attributes per record. */
static PyObject *
plain_attributes(PyObject *obj, PyObject *name)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (type->tp_getattro != PyObject_GenericGetAttr || _PyType_Lookup(type, name) != NULL) {
        return NULL;
    }
    PyObject *dict = PyObject_GenericGetDict(obj, NULL);
    if (dict == NULL || !PyDict_CheckExact(dict)) {
        PyErr_Clear();
        Py_XDECREF(dict);
        return NULL;
    }
    return dict;
}

/* obj.name (a new reference), read from ``dict`` when plain_attributes gave one. NULL without
 * an error when the dict has no such key: the fast path then steps aside, and Python's own
 * read raises whatever it raises. */
static PyObject *
read_attribute(PyObject *obj, PyObject *dict, PyObject *name)
{
    if (dict != NULL) {
        return Py_XNewRef(PyDict_GetItemWithError(dict, name));
    }
    return PyObject_GetAttr(obj, name);
}

/* An attribute read per record, and the dict version it was read at. */
typedef struct {
    PyObject *value; /* as last read (a strong reference), or NULL */
    uint64_t version;
} CachedAttribute;

/* obj.name (borrowed: ``cached`` holds it), read from ``dict`` again only when the dict changed
 * since the last read. Between two records nothing usually runs that sets these attributes, and
 * three dict lookups were 5 % of a record's instructions; a value changed in place (an error
 * appended to a list) is the same object, so the caller still sees it. Python 3.12 deprecates
 * the dicts' version tags: there every read looks the attribute up. */
static PyObject *
cached_attribute(PyObject *obj, PyObject *dict, PyObject *name, CachedAttribute *cached)
{
#if PY_VERSION_HEX < 0x030C0000
    if (dict != NULL && cached->value != NULL
        && ((PyDictObject *)dict)->ma_version_tag == cached->version) {
        return cached->value;
    }
#endif
    PyObject *value = read_attribute(obj, dict, name);
    if (value == NULL) {
        return NULL;
    }
    Py_XSETREF(cached->value, value);
#if PY_VERSION_HEX < 0x030C0000
    cached->version = dict != NULL ? ((PyDictObject *)dict)->ma_version_tag : 0;
#endif
    return value;
}

/* An attribute that must be None, False or an empty list for the fast
 * path: 1 if it is, 0 if not, -1 on error (or when it could not be read). */
static int
attribute_is_clear(PyObject *obj, PyObject *dict, PyObject *name, CachedAttribute *cached)
{
    PyObject *value = cached_attribute(obj, dict, name, cached);
    if (value == NULL) {
        return -1;
    }
    return value == Py_None || value == Py_False
           || (PyList_CheckExact(value) && PyList_GET_SIZE(value) == 0);
}

/* -- ReadyRecord: an awaitable that is already done ------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *record; /* NULL once awaited */
} ReadyRecord;

static void
ready_dealloc(ReadyRecord *self)
{
    Py_XDECREF(self->record);
    PyObject_Free(self);
}

static PyObject *
ready_await(PyObject *self)
{
    return Py_NewRef(self);
}

/* The await's result without a StopIteration (PyIter_Send, which `await` uses in 3.10+). */
static PySendResult
ready_send(ReadyRecord *self, PyObject *arg, PyObject **result)
{
    (void)arg;
    if (self->record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited __anext__()");
        *result = NULL;
        return PYGEN_ERROR;
    }
    *result = self->record; /* hands the reference over */
    self->record = NULL;
    return PYGEN_RETURN;
}

static PyObject *
ready_next(ReadyRecord *self)
{
    PyObject *record;
    if (ready_send(self, Py_None, &record) == PYGEN_ERROR) {
        return NULL;
    }
    PyErr_SetObject(PyExc_StopIteration, record);
    Py_DECREF(record);
    return NULL;
}

static PyAsyncMethods ready_async = {
    .am_await = ready_await,
    .am_send = (sendfunc)ready_send,
};

static PyTypeObject ReadyRecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kayak.client.consumer._next_record.ReadyRecord",
    .tp_basicsize = sizeof(ReadyRecord),
    .tp_dealloc = (destructor)ready_dealloc,
    .tp_as_async = &ready_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)ready_next,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What RecordIterator.__anext__ returns when the next record is at hand.",
};

/* -- RecordIterator --------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *consumer;
    PyObject *poll; /* the consumer's PollState (set in its __init__, never replaced), or NULL */
    PyObject *fetcher, *group, *positions; /* set once the consumer started (never replaced) */
    /* Their instance dicts where their attributes are plain (see plain_attributes), or NULL */
    PyObject *fetcher_dict, *group_dict, *positions_dict;
    CachedAttribute fetch_errors, group_error, position_error; /* what nothing_pending reads */
    ReadyRecord *spare;                    /* reused while nothing else holds it */
    long long since_yield, yield_every;
    double polled_at, poll_every;
} RecordIterator;

static int
iterator_init(RecordIterator *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"consumer", "yield_every", NULL};
    PyObject *consumer;
    long long yield_every;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OL:RecordIterator", keywords, &consumer,
                                     &yield_every)) {
        return -1;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "kayak.client.consumer._next_record is not configured");
        return -1;
    }
    if (yield_every < 1) {
        PyErr_SetString(PyExc_ValueError, "yield_every must be at least 1");
        return -1;
    }
    Py_XSETREF(self->consumer, Py_NewRef(consumer));
    Py_CLEAR(self->fetcher);
    Py_CLEAR(self->group);
    Py_CLEAR(self->positions);
    Py_CLEAR(self->fetcher_dict);
    Py_CLEAR(self->group_dict);
    Py_CLEAR(self->positions_dict);
    Py_CLEAR(self->fetch_errors.value);
    Py_CLEAR(self->group_error.value);
    Py_CLEAR(self->position_error.value);
    /* Without a PollState of exactly the configured class every record goes to Python. */
    PyObject *poll = PyObject_GetAttr(consumer, str_poll_state);
    if (poll == NULL) {
        PyErr_Clear();
    }
    else if (Py_TYPE(poll) != classes.poll) {
        Py_CLEAR(poll);
    }
    Py_XSETREF(self->poll, poll);
    self->since_yield = 0;
    self->yield_every = yield_every;
    self->polled_at = 0.0;
    self->poll_every = 0.001;
    return 0;
}

static int
iterator_traverse(RecordIterator *self, visitproc visit, void *arg)
{
    Py_VISIT(self->consumer);
    Py_VISIT(self->fetcher);
    Py_VISIT(self->group);
    Py_VISIT(self->positions);
    Py_VISIT(self->poll);
    Py_VISIT(self->fetcher_dict);
    Py_VISIT(self->group_dict);
    Py_VISIT(self->positions_dict);
    Py_VISIT(self->fetch_errors.value);
    Py_VISIT(self->group_error.value);
    Py_VISIT(self->position_error.value);
    Py_VISIT(self->spare);
    return 0;
}

static int
iterator_clear(RecordIterator *self)
{
    Py_CLEAR(self->consumer);
    Py_CLEAR(self->fetcher);
    Py_CLEAR(self->group);
    Py_CLEAR(self->positions);
    Py_CLEAR(self->poll);
    Py_CLEAR(self->fetcher_dict);
    Py_CLEAR(self->group_dict);
    Py_CLEAR(self->positions_dict);
    Py_CLEAR(self->fetch_errors.value);
    Py_CLEAR(self->group_error.value);
    Py_CLEAR(self->position_error.value);
    Py_CLEAR(self->spare);
    return 0;
}

static void
iterator_dealloc(RecordIterator *self)
{
    PyObject_GC_UnTrack(self);
    iterator_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The consumer's fetcher, group and position lookup, read once it has started. 1 when read,
 * 0 if it has not started, -1 on error. */
static int
learn_parts(RecordIterator *self)
{
    if (self->fetcher != NULL) {
        return 1;
    }
    PyObject *fetcher = PyObject_GetAttr(self->consumer, str_fetcher);
    if (fetcher == NULL) {
        return -1;
    }
    if (fetcher == Py_None) {
        Py_DECREF(fetcher);
        return 0;
    }
    PyObject *group = PyObject_GetAttr(self->consumer, str_group);
    PyObject *positions = group ? PyObject_GetAttr(self->consumer, str_positions) : NULL;
    if (positions == NULL) {
        Py_DECREF(fetcher);
        Py_XDECREF(group);
        return -1;
    }
    self->fetcher = fetcher;
    self->group = group;
    self->positions = positions;
    self->fetcher_dict = plain_attributes(fetcher, str_errors);
    self->group_dict = group == Py_None ? NULL : plain_attributes(group, str_error);
    self->positions_dict =
        positions == Py_None ? NULL : plain_attributes(positions, str_error_private);
    return 1;
}

/* Whether nothing is pending that a poll would raise first (_ready_for_buffered's checks):
 * 1 if so, 0 if not, -1 on error. */
static int
nothing_pending(RecordIterator *self)
{
    int clear = SLOT(self->poll, classes.off_poll_closed) == Py_False;
    if (clear == 1) {
        PyObject *errors =
            cached_attribute(self->fetcher, self->fetcher_dict, str_errors, &self->fetch_errors);
        if (errors == NULL) {
            return -1;
        }
        clear = PyList_CheckExact(errors) && PyList_GET_SIZE(errors) == 0;
    }
    if (clear == 1 && self->group != Py_None) {
        clear = attribute_is_clear(self->group, self->group_dict, str_error, &self->group_error);
    }
    if (clear == 1 && self->positions != Py_None) {
        clear = attribute_is_clear(self->positions, self->positions_dict, str_error_private,
                                   &self->position_error);
    }
    return clear;
}

/* The partitions the last poll returned records of, if each is a PartitionState (new
 * reference), else None (new reference) or NULL on error. */
static PyObject *
returned_states(RecordIterator *self)
{
    PyObject *returned = Py_XNewRef(SLOT(self->poll, classes.off_poll_returned));
    if (returned == NULL) {
        Py_RETURN_NONE; /* never set: Python's own read raises */
    }
    if (!PyList_CheckExact(returned)) {
        Py_DECREF(returned);
        Py_RETURN_NONE;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(returned); i++) {
        if (Py_TYPE(PyList_GET_ITEM(returned, i)) != classes.state) {
            Py_DECREF(returned);
            Py_RETURN_NONE;
        }
    }
    return returned;
}

/* A ReadyRecord holding ``record`` (a new reference, taken over). */
static PyObject *
ready_with(RecordIterator *self, PyObject *record)
{
    ReadyRecord *ready = self->spare;
    if (ready == NULL || Py_REFCNT(ready) != 1 || ready->record != NULL) {
        ready = PyObject_New(ReadyRecord, &ReadyRecordType);
        if (ready == NULL) {
            Py_DECREF(record);
            return NULL;
        }
        Py_XSETREF(self->spare, ready);
    }
    ready->record = record;
    return Py_NewRef(ready);
}

/* The record the fast path takes (a new reference), or NULL without an error when the
 * consumer's own __anext__ must run; NULL with an error set on failure. */
static PyObject *
take_within_batch(RecordIterator *self)
{
    int started = learn_parts(self);
    if (started <= 0) {
        return NULL;
    }
    PyObject *fetch = self->poll == NULL ? NULL : SLOT(self->poll, classes.off_poll_fetch);
    if (fetch == NULL) {
        return NULL;
    }
    Py_INCREF(fetch);
    PyObject *record = NULL;
    PyObject *returned = NULL;
    if (Py_TYPE(fetch) != classes.fetch) { /* None: nothing being handed out */
        goto done;
    }
    PyObject *state = SLOT(fetch, classes.off_fetch_state);
    long long fetch_epoch, state_epoch, index;
    PyObject *items = SLOT(fetch, classes.off_fetch_items);
    if (state == NULL || Py_TYPE(state) != classes.state
        || !small_int(SLOT(fetch, classes.off_fetch_epoch), &fetch_epoch)
        || !small_int(SLOT(state, classes.off_state_epoch), &state_epoch)
        || fetch_epoch != state_epoch                                   /* seeked, unassigned */
        || SLOT(state, classes.off_state_paused) != Py_False
        || SLOT(fetch, classes.off_fetch_are_records) != Py_True
        || items == NULL || !PyList_CheckExact(items)
        || !small_int(SLOT(fetch, classes.off_fetch_index), &index)
        || index < 0 || index + 1 >= PyList_GET_SIZE(items)) {        /* the batch's last */
        goto done;
    }
    PyObject *candidate = PyList_GET_ITEM(items, index);
    long long offset;
    if (!PyObject_TypeCheck(candidate, classes.record)
        || !small_int(SLOT(candidate, classes.off_record_offset), &offset)) {
        goto done;
    }
    int clear = nothing_pending(self);
    if (clear <= 0) {
        goto done;
    }
    returned = returned_states(self);
    if (returned == NULL || returned == Py_None) {
        goto done;
    }
    PyObject *next_index = PyLong_FromLongLong(index + 1);
    PyObject *position = next_index ? PyLong_FromLongLong(offset + 1) : NULL;
    if (position == NULL) {
        Py_XDECREF(next_index);
        goto done;
    }
    /* From here on the record is taken: what _ready_for_buffered and take_within_batch do. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(returned); i++) {
        PyObject *returned_state = PyList_GET_ITEM(returned, i);
        PyObject *at = SLOT(returned_state, classes.off_state_position);
        set_slot(returned_state, classes.off_state_processed, Py_XNewRef(at));
    }
    if (self->group != Py_None) {
        /* Liveness (max.poll.interval.ms) to the millisecond: calling polled() per record
         * cost more than the record. */
        double now = monotonic();
        if (now - self->polled_at >= self->poll_every) {
            PyObject *done = PyObject_CallMethodNoArgs(self->group, str_polled);
            if (done == NULL) {
                Py_DECREF(next_index);
                Py_DECREF(position);
                goto done;
            }
            Py_DECREF(done);
            self->polled_at = now;
        }
    }
    set_slot(fetch, classes.off_fetch_index, next_index);
    set_slot(state, classes.off_state_position, position);
    record = Py_NewRef(candidate);
done:
    Py_XDECREF(returned);
    Py_DECREF(fetch);
    return record;
}

static PyObject *
iterator_anext(RecordIterator *self)
{
    if (self->consumer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RecordIterator.__init__ was not called");
        return NULL;
    }
    if (self->since_yield < self->yield_every) {
        PyObject *record = take_within_batch(self);
        if (record != NULL) {
            self->since_yield++;
            return ready_with(self, record);
        }
        if (PyErr_Occurred()) {
            return NULL;
        }
    } else {
        /* The consumer's __anext__ gives the event loop its turn: tell it one is due. */
        PyObject *due = PyLong_FromLongLong(self->yield_every);
        if (due == NULL || PyObject_SetAttr(self->consumer, str_since_yield, due) < 0) {
            Py_XDECREF(due);
            return NULL;
        }
        Py_DECREF(due);
        self->since_yield = 0;
    }
    return PyObject_CallMethodNoArgs(self->consumer, str_anext);
}

static PyObject *
iterator_aiter(PyObject *self)
{
    return Py_NewRef(self);
}

static PyAsyncMethods iterator_async = {
    .am_aiter = iterator_aiter,
    .am_anext = (unaryfunc)iterator_anext,
};

static PyTypeObject RecordIteratorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kayak.client.consumer._next_record.RecordIterator",
    .tp_basicsize = sizeof(RecordIterator),
    .tp_dealloc = (destructor)iterator_dealloc,
    .tp_as_async = &iterator_async,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RecordIterator(consumer, yield_every): async for over a consumer's records.",
    .tp_traverse = (traverseproc)iterator_traverse,
    .tp_clear = (inquiry)iterator_clear,
    .tp_init = (initproc)iterator_init,
    .tp_new = PyType_GenericNew,
};

/* -- the module ------------------------------------------------------------------------------- */

static PyMethodDef next_record_methods[] = {
    {"configure", (PyCFunction)configure, METH_VARARGS, configure_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef next_record_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kayak.client.consumer._next_record",
    .m_doc = "async for over a consumer's records, its usual case in C (see polling.py), and "
             "the sync facade's handout of peeked records (see iteration.py).",
    .m_size = -1,
    .m_methods = next_record_methods,
};

static int
intern_names(void)
{
    struct {
        PyObject **into;
        const char *name;
    } names[] = {
        {&str_poll_state, "_poll_state"},
        {&str_fetcher, "_fetcher"},         {&str_group, "_group"},
        {&str_positions, "_positions"},
        {&str_errors, "_errors"},           {&str_error, "error"},
        {&str_error_private, "_error"},     {&str_polled, "polled"},
        {&str_since_yield, "_since_yield"}, {&str_anext, "__anext__"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].into = PyUnicode_InternFromString(names[i].name);
        if (*names[i].into == NULL) {
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC
PyInit__next_record(void)
{
    if (intern_names() < 0 || PyType_Ready(&ReadyRecordType) < 0
        || PyType_Ready(&RecordIteratorType) < 0 || peeked_records_ready() < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&next_record_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "RecordIterator", (PyObject *)&RecordIteratorType) < 0
        || PyModule_AddObjectRef(module, "PeekedRecords", (PyObject *)&PeekedRecordsType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
