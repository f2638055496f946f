/* A stored batch's delivery reports (_delivery_reports.c), in the _per_record module's table. */
#ifndef KAYAK_DELIVERY_REPORTS_H
#define KAYAK_DELIVERY_REPORTS_H

#include <Python.h>

extern const char record_metadata_doc[];
PyObject *record_metadata(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

extern const char deliver_doc[];
PyObject *deliver(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
