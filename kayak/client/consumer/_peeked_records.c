/*
 * The sync facade's ``for record in consumer``: handing out the records it peeked, in C.
 *
 * The Python reference is PeekedRecords in iteration.py. A Python __next__ cost a method call,
 * four attribute reads and time.monotonic() per record: as much as getmany spent making the
 * record. This base class hands out the next peeked record while there is one and the settle
 * deadline has not passed, and otherwise calls the subclass's _refill(), which settles,
 * peeks again and returns the next record (or raises StopIteration).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

#include "_peeked_records.h"

typedef struct {
    PyObject_HEAD
    PyObject *peeked;  /* the list of records peeked, or NULL before the subclass sets one */
    Py_ssize_t index;  /* how many of them were handed out */
    double settle_by;  /* time.monotonic() by which the handed-out ones are settled */
} PeekedRecords;

static PyObject *str_refill;

static int
peeked_traverse(PeekedRecords *self, visitproc visit, void *arg)
{
    /* A Python subclass's own type is visited (and released) by the interpreter's
     * subtype_traverse and subtype_dealloc, as for any static base type. */
    Py_VISIT(self->peeked);
    return 0;
}

static int
peeked_clear(PeekedRecords *self)
{
    Py_CLEAR(self->peeked);
    return 0;
}

static void
peeked_dealloc(PeekedRecords *self)
{
    PyObject_GC_UnTrack(self);
    peeked_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
peeked_next(PeekedRecords *self)
{
    PyObject *peeked = self->peeked;
    if (peeked != NULL && PyList_CheckExact(peeked) && self->index < PyList_GET_SIZE(peeked)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 < self->settle_by) {
            return Py_NewRef(PyList_GET_ITEM(peeked, self->index++));
        }
    }
    return PyObject_CallMethodNoArgs((PyObject *)self, str_refill);
}

static PyMemberDef peeked_members[] = {
    {"_peeked", T_OBJECT_EX, offsetof(PeekedRecords, peeked), 0,
     "The records peeked (a list)."},
    {"_index", T_PYSSIZET, offsetof(PeekedRecords, index), 0,
     "How many of them were handed out."},
    {"_settle_by", T_DOUBLE, offsetof(PeekedRecords, settle_by), 0,
     "The time.monotonic() by which the records handed out are settled."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject PeekedRecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kayak.client.consumer._next_record.PeekedRecords",
    .tp_basicsize = sizeof(PeekedRecords),
    .tp_dealloc = (destructor)peeked_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Hands out _peeked[_index] per next() until they run out or _settle_by passes, "
              "then returns self._refill().",
    .tp_traverse = (traverseproc)peeked_traverse,
    .tp_clear = (inquiry)peeked_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)peeked_next,
    .tp_members = peeked_members,
    .tp_new = PyType_GenericNew,
};

int
peeked_records_ready(void)
{
    str_refill = PyUnicode_InternFromString("_refill");
    if (str_refill == NULL) {
        return -1;
    }
    return PyType_Ready(&PeekedRecordsType);
}
