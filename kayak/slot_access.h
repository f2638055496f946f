/*
 * Reading and writing the __slots__ of kayak's own classes from C, for kayak's C extensions
 * (the record codec, the producer's per-record append, the consumer's next record).
 *
 * A slot's offset comes from its member descriptor, once (each extension's configure()), as the
 * interpreter's own slot descriptors find it; the extensions then touch slots only on objects of
 * exactly the classes they were configured with.
 */

#ifndef KAYAK_SLOT_ACCESS_H
#define KAYAK_SLOT_ACCESS_H

#include <Python.h>
#include <structmember.h>

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* Offset of the object slot ``name`` of ``type``, from its member descriptor. */
static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name); /* borrowed */
    if (descr == NULL || !PyObject_TypeCheck(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)
        || member->offset < (Py_ssize_t)sizeof(PyObject)
        || member->offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a plain object slot", type->tp_name, name);
        return -1;
    }
    *offset = member->offset;
    return 0;
}

/* A slot holding an exact int that fits a long long, into *out; 0 if it is anything else. */
static inline int
small_int(PyObject *value, long long *out)
{
    if (value == NULL || !PyLong_CheckExact(value)) {
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    return !overflow && !(*out == -1 && PyErr_Occurred());
}

static inline void
set_slot(PyObject *obj, Py_ssize_t offset, PyObject *fresh)
{
    PyObject *old = SLOT(obj, offset);
    SLOT(obj, offset) = fresh; /* takes the reference */
    Py_XDECREF(old);
}

#endif
