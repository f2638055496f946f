/*
 * The producer's per-record counters as C integers: BufferMemory's ``limit`` and ``used`` and
 * ProducerBatch's ``record_count``, ``size`` and ``report_kinds`` live in these base classes.
 *
 * As __slots__ they were Python ints: each produce() call read five of them back into C and made
 * three new ones (the counts pass 256 at once, so each was an allocation and a free), a sixth of
 * produce's instructions. Python reads and writes them as ints all the same, through member
 * descriptors; the Python reference classes (accumulator.py, batch.py) have the same names.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#include "_counters.h"

/* A counter's getter and setter; ``offset`` is where it lives in the object. (A T_LONGLONG
 * member would do, but it stores -1 before it notices a value that does not fit.) */
static PyObject *
get_counter(PyObject *self, void *offset)
{
    return PyLong_FromLongLong(*(long long *)((char *)self + (Py_ssize_t)offset));
}

static int
set_counter(PyObject *self, PyObject *value, void *offset)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a counter cannot be deleted");
        return -1;
    }
    long long number = PyLong_AsLongLong(value);
    if (number == -1 && PyErr_Occurred()) {
        return -1;
    }
    *(long long *)((char *)self + (Py_ssize_t)offset) = number;
    return 0;
}

#define COUNTER(name, type, field, doc) \
    {name, get_counter, set_counter, doc, (void *)offsetof(type, field)}

static PyGetSetDef memory_counters[] = {
    COUNTER("limit", MemoryCounters, limit, "buffer.memory, in bytes."),
    COUNTER("used", MemoryCounters, used, "Bytes charged for buffered records."),
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject MemoryCountersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kayak.client.producer._per_record.MemoryCounters",
    .tp_basicsize = sizeof(MemoryCounters),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "BufferMemory's limit and used bytes, as C integers.",
    .tp_getset = memory_counters,
    .tp_new = PyType_GenericNew,
};

static PyGetSetDef batch_counters[] = {
    COUNTER("record_count", BatchCounters, record_count, "Records appended to the batch."),
    COUNTER("size", BatchCounters, size, "The batch's encoded size estimate, uncompressed."),
    COUNTER("report_kinds", BatchCounters, report_kinds,
            "Which kinds of delivery report the batch holds (FUTURE | CALLBACK)."),
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject BatchCountersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kayak.client.producer._per_record.BatchCounters",
    .tp_basicsize = sizeof(BatchCounters),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "ProducerBatch's record count, size and report kinds, as C integers.",
    .tp_getset = batch_counters,
    .tp_new = PyType_GenericNew,
};

int
counters_ready(void)
{
    if (PyType_Ready(&MemoryCountersType) < 0 || PyType_Ready(&BatchCountersType) < 0) {
        return -1;
    }
    return 0;
}
