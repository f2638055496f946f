/* The producer's per-record counters (_counters.c), in the _per_record module. */
#ifndef KAYAK_COUNTERS_H
#define KAYAK_COUNTERS_H

#include <Python.h>

typedef struct {
    PyObject_HEAD
    long long limit;
    long long used;
} MemoryCounters;

typedef struct {
    PyObject_HEAD
    long long record_count;
    long long size;
    long long report_kinds;
} BatchCounters;

extern PyTypeObject MemoryCountersType;
extern PyTypeObject BatchCountersType;

/* Readies both types (once, when the module loads): 0, or -1 with an exception set. */
int counters_ready(void);

#endif
