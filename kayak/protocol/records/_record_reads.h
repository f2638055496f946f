/*
 * Bounds-checked reads of a v2 records section, shared by the decoders (_codec.c) and the
 * produce-path checks (_produced_batches.c): varints that refuse what Python's readers
 * refuse, and the section's bytes held through the buffer protocol.
 */
#ifndef KAYAK_RECORD_READS_H
#define KAYAK_RECORD_READS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The smallest record: length, attributes, timestampDelta, offsetDelta, key length, value
 * length and header count, one byte each. A count above section_size / 7 cannot fit. */
#define MIN_RECORD_SIZE 7

/* -- varints ---------------------------------------------------------------------------------- */

/* Read an unsigned varint of at most max_bytes bytes from p[*pos..limit). Returns 0 and
 * advances *pos, or -1 if it is truncated, longer than max_bytes or wider than 64 bits. */
static inline int
read_uvarint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
             uint64_t *out)
{
    Py_ssize_t i = *pos;
    uint64_t result = 0;
    for (int n = 0; n < max_bytes; n++) {
        if (i >= limit) {
            return -1;
        }
        unsigned int b = p[i++];
        uint64_t chunk = b & 0x7F;
        if (n == 9 && chunk > 1) {
            return -1; /* bits 64 and up: Python would carry on with a big int */
        }
        result |= chunk << (7 * n);
        if (b < 0x80) {
            *pos = i;
            *out = result;
            return 0;
        }
    }
    return -1;
}

/* Zigzag-decode: (raw >> 1) ^ -(raw & 1), without signed overflow. */
static inline int64_t
unzigzag(uint64_t raw)
{
    return (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
}

/* A signed varint (zigzag) of at most max_bytes bytes. */
static inline int
read_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
            int64_t *out)
{
    uint64_t raw;
    if (read_uvarint(p, pos, limit, max_bytes, &raw) < 0) {
        return -1;
    }
    *out = unzigzag(raw);
    return 0;
}

/* Skip a varint of at most max_bytes bytes, whatever its width (Python's skip_varint reads
 * up to 10 bytes and never looks at the value). */
static inline int
skip_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes)
{
    Py_ssize_t i = *pos;
    for (int n = 0; n < max_bytes; n++) {
        if (i >= limit) {
            return -1;
        }
        if (p[i++] < 0x80) {
            *pos = i;
            return 0;
        }
    }
    return -1;
}

/* The section's bytes: a bytes object directly, anything else exporting a flat buffer (the
 * consumer's memoryviews of a network frame, decoded in place) through the buffer protocol,
 * held until release_section so that it cannot be resized under us. Returns 0 if the section
 * can be decoded in C. */
static inline int
get_section(PyObject *data, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t count,
            Py_buffer *view)
{
    view->obj = NULL;
    if (PyBytes_CheckExact(data)) {
        view->buf = PyBytes_AS_STRING(data);
        view->len = PyBytes_GET_SIZE(data);
    }
    else if (PyObject_GetBuffer(data, view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not a flat buffer: Python decides what that means */
        view->obj = NULL;
        return -1;
    }
    if (start < 0 || stop < start || stop > view->len || count < 0
        || count > (stop - start) / MIN_RECORD_SIZE) {
        /* Outside the buffer, or more records than can fit: Python reports it. */
        if (view->obj != NULL) {
            PyBuffer_Release(view);
        }
        return -1;
    }
    return 0;
}

static inline void
release_section(Py_buffer *view)
{
    if (view->obj != NULL) {
        PyBuffer_Release(view);
    }
}

#endif
