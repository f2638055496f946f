/* The sync facade's record handout (_peeked_records.c), in the _next_record module. */
#ifndef KAYAK_PEEKED_RECORDS_H
#define KAYAK_PEEKED_RECORDS_H

#include <Python.h>

extern PyTypeObject PeekedRecordsType;

/* Readies the type (once, when the module loads): 0, or -1 with an exception set. */
int peeked_records_ready(void);

#endif
