/* The produce path's batch checks (_produced_batches.c), added to _codec's module. */
#ifndef KAYAK_PRODUCED_BATCHES_H
#define KAYAK_PRODUCED_BATCHES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyMethodDef produced_batch_methods[];

#endif
