/*
 * A stored batch's delivery reports, for kayak.client.producer._per_record: the RecordMetadata
 * of its reported records (record_metadata, a list) and the reports themselves (deliver: each
 * record's callback called, or its future's result set). ProducerBatch.succeed and _metadata
 * (batch.py) are the reference.
 *
 * The tuples are filled as tuple.__new__ fills them, without an argument tuple and a zip per
 * record, and left untracked: a str and three ints cannot be part of a cycle. deliver() makes
 * each record's metadata just before its report, so one a callback does not keep is freed at
 * once: the collector's count of young objects then stays flat over a batch, where a list of
 * a thousand live tuples set off a collection pass every few hundred records.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../../slot_access.h"
#include "_delivery_reports.h"

/* What makes each record's metadata: record_metadata's and deliver's common arguments. */
typedef struct {
    PyTypeObject *type;
    PyObject *topic, *partition, *positions, *stamps, *timestamp;
    PyObject *unknown; /* -1, when the offsets are unknown (owned) */
    long long count, base_offset;
} batch_metadata;

/* Item ``index`` of ``list`` as a long long; -1 with an exception if it is not a small int. */
static inline int
list_int(PyObject *list, Py_ssize_t index, long long *out)
{
    if (index < 0 || index >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "record_metadata: a position outside the batch");
        return -1;
    }
    PyObject *item = PyList_GET_ITEM(list, index);
    if (!small_int(item, out)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "record_metadata: positions are ints");
        }
        return -1;
    }
    return 0;
}

/* function's arguments from ``first`` on: metadata_type, count, topic, partition, base_offset,
 * positions, timestamps, timestamp (the last). 0, or -1 with an exception. */
static int
read_batch_metadata(const char *function, PyObject *const *all, Py_ssize_t nargs,
                    Py_ssize_t first, batch_metadata *m)
{
    if (nargs != first + 8) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments", function, first + 8);
        return -1;
    }
    PyObject *const *args = all + first;
    m->type = (PyTypeObject *)args[0];
    m->topic = args[2];
    m->partition = args[3];
    m->positions = args[5];
    m->stamps = args[6];
    m->timestamp = args[7];
    m->unknown = NULL;
    if (!PyType_Check(args[0]) || !PyType_IsSubtype(m->type, &PyTuple_Type)
        || m->type->tp_basicsize != PyTuple_Type.tp_basicsize
        || m->type->tp_itemsize != PyTuple_Type.tp_itemsize || !small_int(args[1], &m->count)
        || m->count < 0 || !small_int(args[4], &m->base_offset)
        || (m->positions != Py_None && !PyList_CheckExact(m->positions))
        || (m->stamps != Py_None && !PyList_CheckExact(m->stamps))) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "record_metadata: unexpected argument types");
        }
        return -1;
    }
    if (m->base_offset < 0) {
        m->unknown = PyLong_FromLong(-1);
        if (m->unknown == NULL) {
            return -1;
        }
    }
    return 0;
}

/* The metadata of the i-th reported record (a new reference), or NULL with an exception. */
static PyObject *
one_metadata(const batch_metadata *m, Py_ssize_t i)
{
    long long position = i;
    if (m->positions != Py_None && list_int(m->positions, i, &position) < 0) {
        return NULL;
    }
    PyObject *stamp = m->timestamp;
    if (m->stamps != Py_None) {
        if (position >= PyList_GET_SIZE(m->stamps)) {
            PyErr_SetString(PyExc_IndexError, "record_metadata: a record without a timestamp");
            return NULL;
        }
        stamp = PyList_GET_ITEM(m->stamps, position);
    }
    PyObject *offset = m->unknown != NULL ? Py_NewRef(m->unknown)
                                          : PyLong_FromLongLong(m->base_offset + position);
    if (offset == NULL) {
        return NULL;
    }
    PyObject *metadata = m->type->tp_alloc(m->type, 4);
    if (metadata == NULL) {
        Py_DECREF(offset);
        return NULL;
    }
    PyTuple_SET_ITEM(metadata, 0, Py_NewRef(m->topic));
    PyTuple_SET_ITEM(metadata, 1, Py_NewRef(m->partition));
    PyTuple_SET_ITEM(metadata, 2, offset);
    PyTuple_SET_ITEM(metadata, 3, Py_NewRef(stamp));
    /* Untracked, the collector passes made while many of them live do not walk them (the
     * collector untracks such tuples itself, but only once it has walked them). */
    PyObject_GC_UnTrack(metadata);
    return metadata;
}

const char record_metadata_doc[] =
    "record_metadata(metadata_type, count, topic, partition, base_offset, positions, timestamps,\n"
    "                timestamp) -> list\n"
    "\n"
    "The metadata of ``count`` reported records: the i-th is record ``positions[i]`` (``i`` when\n"
    "positions is None), at ``base_offset`` plus that (-1 for all when base_offset < 0), with\n"
    "``timestamps[position]`` (``timestamp`` when timestamps is None).";

PyObject *
record_metadata(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    batch_metadata m;
    if (read_batch_metadata("record_metadata", args, nargs, 0, &m) < 0) {
        return NULL;
    }
    PyObject *result = PyList_New((Py_ssize_t)m.count);
    if (result == NULL) {
        goto failed;
    }
    for (Py_ssize_t i = 0; i < (Py_ssize_t)m.count; i++) {
        PyObject *metadata = one_metadata(&m, i);
        if (metadata == NULL) {
            goto failed;
        }
        PyList_SET_ITEM(result, i, metadata);
    }
    Py_XDECREF(m.unknown);
    return result;

failed:
    Py_XDECREF(m.unknown);
    Py_XDECREF(result);
    return NULL;
}

const char deliver_doc[] =
    "deliver(set_result, reports, on_error, metadata_type, count, topic, partition, base_offset,\n"
    "        positions, timestamps, timestamp) -> None\n"
    "\n"
    "Report each of ``count`` records stored, in order, with its metadata (record_metadata's\n"
    "arguments): ``set_result(reports[i], metadata)``, or ``reports[i](None, metadata)`` when\n"
    "set_result is None. A report raising an Exception is handed to ``on_error(exception)`` and\n"
    "the next record is reported; any other exception, or one from on_error, ends the call.";

PyObject *
deliver(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    batch_metadata m;
    if (read_batch_metadata("deliver", args, nargs, 3, &m) < 0) {
        return NULL;
    }
    PyObject *set_result = args[0], *reports = args[1], *on_error = args[2];
    if (!PyList_CheckExact(reports) || PyList_GET_SIZE(reports) != m.count) {
        PyErr_SetString(PyExc_TypeError, "deliver: reports is a list of count items");
        Py_XDECREF(m.unknown);
        return NULL;
    }
    Py_INCREF(reports); /* a callback's code cannot free it under us */
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)m.count; i++) {
        if (i >= PyList_GET_SIZE(reports)) {
            PyErr_SetString(PyExc_RuntimeError, "deliver: the reports changed while delivered");
            result = NULL;
            break;
        }
        PyObject *metadata = one_metadata(&m, i);
        if (metadata == NULL) {
            result = NULL;
            break;
        }
        PyObject *report = Py_NewRef(PyList_GET_ITEM(reports, i));
        PyObject *outcome;
        if (set_result == Py_None) {
            PyObject *argv[3] = {NULL, Py_None, metadata};
            outcome = PyObject_Vectorcall(report, argv + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                          NULL);
        }
        else {
            PyObject *argv[3] = {NULL, report, metadata};
            outcome = PyObject_Vectorcall(set_result, argv + 1,
                                          2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        }
        Py_DECREF(report);
        Py_DECREF(metadata);
        if (outcome != NULL) {
            Py_DECREF(outcome);
            continue;
        }
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            result = NULL; /* KeyboardInterrupt, SystemExit: not a report's failure */
            break;
        }
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        if (traceback != NULL) {
            PyException_SetTraceback(value, traceback);
        }
        PyObject *handled = PyObject_CallOneArg(on_error, value);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        if (handled == NULL) {
            result = NULL;
            break;
        }
        Py_DECREF(handled);
    }
    Py_DECREF(reports);
    Py_XDECREF(m.unknown);
    return Py_XNewRef(result);
}
