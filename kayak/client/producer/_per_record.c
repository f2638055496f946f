/*
 * kayak.client.producer._per_record: the producer's per-record work in C: produce's common
 * case (PlainAppender, here) and a stored batch's delivery reports (record_metadata and
 * deliver, in _delivery_reports.c).
 *
 * An optional accelerator of RecordAppender.produce (append.py), which stays the reference and
 * the path for everything else. A PlainAppender is installed as a started producer's
 * ``produce``. It takes the record the way the Python code would when everything is ordinary:
 * bytes value, no key, headers, partition or timestamp, a known topic whose sticky partition
 * has an open batch with room, no record waiting for metadata, room in buffer.memory, a batch
 * with no keyed records and this millisecond's timestamp. Anything else, and any doubt (an
 * unexpected type, a number that does not fit), goes to the Python method with the same
 * arguments, before anything has changed. So both paths leave identical batches, and every
 * error is raised by the Python code.
 *
 * It reads and writes the slots of TopicState, PartitionQueue, ProducerBatch and BufferMemory
 * at the offsets their member descriptors give (configure()), as the interpreter's own slot
 * loads do, and only on objects of exactly those classes. ProducerBatch's and BufferMemory's
 * counters are C integers of their base classes (_counters.c).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "../../slot_access.h"
#include "_counters.h"
#include "_delivery_reports.h"
#include <stdint.h>
#include <time.h>

/* -- the classes whose slots the fast path reads ---------------------------------------------- */

typedef struct {
    PyTypeObject *topic_state;
    Py_ssize_t off_sticky, off_queues;
    PyTypeObject *queue;
    Py_ssize_t off_open;
    PyTypeObject *batch;
    Py_ssize_t off_plain, off_reports, off_report_positions, off_values, off_timestamps,
        off_timestamp;
    PyTypeObject *memory;
    Py_ssize_t off_waiters;
} layout;

static layout classes;
static int configured = 0;
static PyObject *str_on_delivery, *str_key, *str_headers, *str_partition, *str_timestamp;

static int
exact_class(PyObject *candidate, PyTypeObject **into)
{
    if (!PyType_Check(candidate)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes classes");
        return -1;
    }
    *into = (PyTypeObject *)candidate;
    return 0;
}

PyDoc_STRVAR(configure_doc,
"configure(topic_state, partition_queue, producer_batch, buffer_memory)\n"
"\n"
"Tell the fast path the classes whose slots it reads (once, when kayak's producer loads).");

static PyObject *
configure(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *t, *q, *b, *m;
    if (!PyArg_ParseTuple(args, "OOOO:configure", &t, &q, &b, &m)) {
        return NULL;
    }
    layout fresh;
    if (exact_class(t, &fresh.topic_state) < 0 || exact_class(q, &fresh.queue) < 0
        || exact_class(b, &fresh.batch) < 0 || exact_class(m, &fresh.memory) < 0) {
        return NULL;
    }
    if (slot_offset(fresh.topic_state, "sticky", &fresh.off_sticky) < 0
        || slot_offset(fresh.topic_state, "queues", &fresh.off_queues) < 0
        || slot_offset(fresh.queue, "open", &fresh.off_open) < 0
        || slot_offset(fresh.batch, "plain", &fresh.off_plain) < 0
        || slot_offset(fresh.batch, "reports", &fresh.off_reports) < 0
        || slot_offset(fresh.batch, "report_positions", &fresh.off_report_positions) < 0
        || slot_offset(fresh.batch, "values", &fresh.off_values) < 0
        || slot_offset(fresh.batch, "timestamps", &fresh.off_timestamps) < 0
        || slot_offset(fresh.batch, "timestamp", &fresh.off_timestamp) < 0
        || slot_offset(fresh.memory, "waiters", &fresh.off_waiters) < 0) {
        return NULL;
    }
    if (!PyType_IsSubtype(fresh.batch, &BatchCountersType)
        || !PyType_IsSubtype(fresh.memory, &MemoryCountersType)) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(): the batch and memory classes must derive from "
                        "BatchCounters and MemoryCounters");
        return NULL;
    }
    if (configured) {
        Py_DECREF(classes.topic_state);
        Py_DECREF(classes.queue);
        Py_DECREF(classes.batch);
        Py_DECREF(classes.memory);
    }
    Py_INCREF(fresh.topic_state);
    Py_INCREF(fresh.queue);
    Py_INCREF(fresh.batch);
    Py_INCREF(fresh.memory);
    classes = fresh;
    configured = 1;
    Py_RETURN_NONE;
}

/* The batch's last timestamp when it is ``timestamp`` (a new reference), else NULL: records of
 * one millisecond share one int. */
static PyObject *
same_millisecond(PyObject *stamps, long long timestamp)
{
    Py_ssize_t n = PyList_GET_SIZE(stamps);
    long long last;
    if (n == 0 || !small_int(PyList_GET_ITEM(stamps, n - 1), &last)) {
        PyErr_Clear();
        return NULL;
    }
    return last == timestamp ? Py_NewRef(PyList_GET_ITEM(stamps, n - 1)) : NULL;
}

/* -- PlainAppender ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback; /* the Python produce, bound to the producer */
    PyObject *topics;   /* dict: topic name -> TopicState (the producer's, shared) */
    PyObject *waiting;  /* dict: records waiting for a topic's metadata (shared) */
    PyObject *memory;   /* BufferMemory */
    long long batch_size, max_record_size, record_overhead, memory_overhead;
    long long callback_kind, future_kind; /* ProducerBatch.report_kinds bits */
    char enabled;
} PlainAppender;

static inline long long
now_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return -1; /* the Python path reads the clock and raises */
    }
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether the keyword arguments allow the fast path; *on_delivery gets the callback. */
static int
plain_keywords(PyObject *const *values, PyObject *kwnames, PyObject **on_delivery)
{
    Py_ssize_t count = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (name == str_on_delivery) {
            *on_delivery = values[i];
        } else if (values[i] != Py_None) {
            return 0;
        } else if (name != str_key && name != str_headers && name != str_partition
                   && name != str_timestamp) {
            return 0; /* not interned, misspelt, or given twice: Python says which */
        }
    }
    return 1;
}

/* Whether positional arguments after topic and value (key, headers, partition, timestamp,
 * on_delivery: the sync facade hands records over this way) allow the fast path. */
static inline int
plain_positionals(PyObject *const *args, Py_ssize_t nargs, PyObject **on_delivery)
{
    for (Py_ssize_t i = 2; i < nargs && i < 6; i++) {
        if (args[i] != Py_None) {
            return 0;
        }
    }
    if (nargs == 7) {
        *on_delivery = args[6];
    }
    return 1;
}

/* The open batch of the topic's sticky partition, if the fast path can use it (borrowed). */
static PyObject *
sticky_open_batch(PlainAppender *self, PyObject *topic)
{
    PyObject *state = PyDict_GetItemWithError(self->topics, topic);
    if (state == NULL || Py_TYPE(state) != classes.topic_state) {
        return NULL;
    }
    long long partition;
    PyObject *queues = SLOT(state, classes.off_queues);
    if (!small_int(SLOT(state, classes.off_sticky), &partition) || partition < 0
        || queues == NULL || !PyList_CheckExact(queues) || partition >= PyList_GET_SIZE(queues)) {
        return NULL;
    }
    PyObject *queue = PyList_GET_ITEM(queues, partition);
    if (Py_TYPE(queue) != classes.queue) {
        return NULL;
    }
    PyObject *batch = SLOT(queue, classes.off_open);
    if (batch == NULL || Py_TYPE(batch) != classes.batch) {
        return NULL;
    }
    return batch;
}

/* Append ``value`` to the open batch of ``topic``'s sticky partition, with ``on_delivery``
 * (a callback, or send's future, of report ``kind``; None: nothing reports it), the way
 * RecordAppender._append does. 1: appended; 0: nothing changed, the Python path's to do;
 * -1: an exception. */
static int
append_plain(PlainAppender *self, PyObject *topic, PyObject *value, PyObject *on_delivery,
             long long kind)
{
    if (!self->enabled || !configured || !PyUnicode_CheckExact(topic)
        || !PyBytes_CheckExact(value) || PyDict_GET_SIZE(self->waiting) != 0) {
        return 0;
    }
    long long size = (long long)PyBytes_GET_SIZE(value) + self->record_overhead;
    if (size > self->max_record_size) {
        return 0;
    }

    /* buffer.memory: nobody waiting for room, and room for this record. */
    MemoryCounters *memory = (MemoryCounters *)self->memory;
    PyObject *waiters = SLOT(memory, classes.off_waiters);
    if (waiters == NULL || PyObject_Size(waiters) != 0) {
        PyErr_Clear();
        return 0;
    }
    long long charge = size + self->memory_overhead;
    if (memory->used + charge > memory->limit) {
        return 0;
    }

    PyObject *batch = sticky_open_batch(self, topic);
    if (batch == NULL) {
        if (PyErr_Occurred()) {
            return -1; /* the topic's hash or comparison failed */
        }
        return 0;
    }
    BatchCounters *counters = (BatchCounters *)batch;
    long long count = counters->record_count, first_timestamp = 0;
    PyObject *reports = SLOT(batch, classes.off_reports);
    PyObject *positions = SLOT(batch, classes.off_report_positions);
    PyObject *values = SLOT(batch, classes.off_values);
    PyObject *stamps = SLOT(batch, classes.off_timestamps);
    if ((counters->size + size > self->batch_size && count)
        || SLOT(batch, classes.off_plain) != Py_True
        || values == NULL || !PyList_CheckExact(values)
        || reports == NULL || !PyList_CheckExact(reports)
        || positions == NULL || (positions != Py_None && !PyList_CheckExact(positions))
        || (on_delivery == Py_None && positions == Py_None) /* Python starts the positions */
        || stamps == NULL || (stamps != Py_None && !PyList_CheckExact(stamps))
        || (stamps == Py_None
            && !small_int(SLOT(batch, classes.off_timestamp), &first_timestamp))) {
        PyErr_Clear();
        return 0;
    }
    long long timestamp = now_ms();
    if (timestamp < 0 || (stamps == Py_None && timestamp != first_timestamp)) {
        return 0; /* a new millisecond: Python starts the batch's per-record timestamps */
    }

    /* Everything checked: make the new objects, then change the batch and the memory. */
    PyObject *position =
        positions == Py_None || on_delivery == Py_None ? NULL : PyLong_FromLongLong(count);
    PyObject *stamp = stamps == Py_None ? NULL : same_millisecond(stamps, timestamp);
    if (stamp == NULL && stamps != Py_None) {
        stamp = PyLong_FromLongLong(timestamp);
    }
    if ((positions != Py_None && on_delivery != Py_None && position == NULL)
        || (stamps != Py_None && stamp == NULL)) {
        goto failed;
    }
    if (on_delivery != Py_None) {
        if ((position != NULL && PyList_Append(positions, position) < 0)
            || PyList_Append(reports, on_delivery) < 0) {
            goto failed;
        }
        counters->report_kinds |= kind;
    }
    if (PyList_Append(values, value) < 0 || (stamp != NULL && PyList_Append(stamps, stamp) < 0)) {
        goto failed;
    }
    memory->used += charge;
    counters->record_count = count + 1;
    counters->size += size;
    Py_XDECREF(position);
    Py_XDECREF(stamp);
    return 1;

failed:
    Py_XDECREF(position);
    Py_XDECREF(stamp);
    return -1;
}

static PyObject *
appender_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PlainAppender *self = (PlainAppender *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *on_delivery = Py_None;
    if (nargs >= 2 && nargs <= 7 && plain_positionals(args, nargs, &on_delivery)
        && (kwnames == NULL || plain_keywords(args + nargs, kwnames, &on_delivery))) {
        int appended = append_plain(self, args[0], args[1], on_delivery, self->callback_kind);
        if (appended < 0) {
            return NULL;
        }
        if (appended) {
            Py_RETURN_NONE;
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

PyDoc_STRVAR(append_future_doc,
"append_future(topic, value, future) -> bool\n"
"\n"
"``send``'s common case: append the record with ``future`` to report it, as ``produce`` does\n"
"with a callback. False when the Python path must do it (nothing changed then).");

static PyObject *
appender_append_future(PlainAppender *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "append_future() takes topic, value and future");
        return NULL;
    }
    int appended = append_plain(self, args[0], args[1], args[2], self->future_kind);
    if (appended < 0) {
        return NULL;
    }
    return PyBool_FromLong(appended);
}

static PyObject *
appender_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"fallback", "topics", "waiting", "memory", "batch_size",
                            "max_record_size", "record_overhead", "memory_overhead",
                            "callback_kind", "future_kind", NULL};
    PyObject *fallback, *topics, *waiting, *memory;
    long long batch_size, max_record_size, record_overhead, memory_overhead, callback_kind,
        future_kind;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!OLLLLLL:PlainAppender", names,
                                     &fallback, &PyDict_Type, &topics, &PyDict_Type, &waiting,
                                     &memory, &batch_size, &max_record_size, &record_overhead,
                                     &memory_overhead, &callback_kind, &future_kind)) {
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "kayak.client.producer._per_record is not configured");
        return NULL;
    }
    if (!PyCallable_Check(fallback) || Py_TYPE(memory) != classes.memory) {
        PyErr_SetString(PyExc_TypeError,
                        "PlainAppender takes the Python produce and a BufferMemory");
        return NULL;
    }
    PlainAppender *self = (PlainAppender *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = appender_vectorcall;
    self->fallback = Py_NewRef(fallback);
    self->topics = Py_NewRef(topics);
    self->waiting = Py_NewRef(waiting);
    self->memory = Py_NewRef(memory);
    self->batch_size = batch_size;
    self->max_record_size = max_record_size;
    self->record_overhead = record_overhead;
    self->memory_overhead = memory_overhead;
    self->callback_kind = callback_kind;
    self->future_kind = future_kind;
    self->enabled = 1;
    return (PyObject *)self;
}

static int
appender_traverse(PlainAppender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->topics);
    Py_VISIT(self->waiting);
    Py_VISIT(self->memory);
    return 0;
}

static int
appender_clear(PlainAppender *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->topics);
    Py_CLEAR(self->waiting);
    Py_CLEAR(self->memory);
    return 0;
}

static void
appender_dealloc(PlainAppender *self)
{
    PyObject_GC_UnTrack(self);
    appender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
appender_doc_get(PlainAppender *self, void *closure)
{
    (void)closure;
    return PyObject_GetAttrString(self->fallback, "__doc__");
}

static PyMemberDef appender_members[] = {
    {"enabled", T_BOOL, offsetof(PlainAppender, enabled), 0,
     "False once the producer closes: every call goes to the Python produce"},
    {"fallback", T_OBJECT, offsetof(PlainAppender, fallback), READONLY,
     "the Python produce, which takes every call the fast path does not"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PlainAppender, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef appender_methods[] = {
    {"append_future", (PyCFunction)(void (*)(void))appender_append_future, METH_FASTCALL,
     append_future_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef appender_getset[] = {
    {"__doc__", (getter)appender_doc_get, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PlainAppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kayak.client.producer._per_record.PlainAppender",
    .tp_basicsize = sizeof(PlainAppender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = appender_new,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_traverse = (traverseproc)appender_traverse,
    .tp_clear = (inquiry)appender_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(PlainAppender, vectorcall),
    .tp_members = appender_members,
    .tp_methods = appender_methods,
    .tp_getset = appender_getset,
};

/* -- the module ------------------------------------------------------------------------------- */

static PyMethodDef per_record_methods[] = {
    {"configure", (PyCFunction)configure, METH_VARARGS, configure_doc},
    {"record_metadata", (PyCFunction)(void (*)(void))record_metadata, METH_FASTCALL,
     record_metadata_doc},
    {"deliver", (PyCFunction)(void (*)(void))deliver, METH_FASTCALL, deliver_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef per_record_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kayak.client.producer._per_record",
    .m_doc = "The producer's per-record work in C (see append.py and batch.py).",
    .m_size = -1,
    .m_methods = per_record_methods,
};

PyMODINIT_FUNC
PyInit__per_record(void)
{
    str_on_delivery = PyUnicode_InternFromString("on_delivery");
    str_key = PyUnicode_InternFromString("key");
    str_headers = PyUnicode_InternFromString("headers");
    str_partition = PyUnicode_InternFromString("partition");
    str_timestamp = PyUnicode_InternFromString("timestamp");
    if (str_on_delivery == NULL || str_key == NULL || str_headers == NULL || str_partition == NULL
        || str_timestamp == NULL || PyType_Ready(&PlainAppenderType) < 0 || counters_ready() < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&per_record_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "PlainAppender", (PyObject *)&PlainAppenderType) < 0
        || PyModule_AddObjectRef(module, "MemoryCounters", (PyObject *)&MemoryCountersType) < 0
        || PyModule_AddObjectRef(module, "BatchCounters", (PyObject *)&BatchCountersType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
