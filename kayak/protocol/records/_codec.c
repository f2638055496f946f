/*
 * kayak.protocol.records._codec: the record-batch hot loops in C.
 *
 * An optional accelerator for the pure-Python reference code in batch.py and builder.py; it
 * is selected at import (KAYAK_PURE_PYTHON=1 forces the Python code).
 *
 * Decoding is *strict and partial*: decode_records/decode_values accept exactly the records
 * sections the Python decoders accept, and for everything else (truncated or lying data, a
 * varint wider than 64 bits, an int64 overflow, a header key that is not UTF-8, an object
 * without a flat buffer) they return None instead of raising, and the caller runs the Python
 * decoder (on bytes: keys and values are always bytes, whatever buffer they came from),
 * which raises its usual CorruptRecordError. So both paths give identical records and
 * identical errors, and the C code never has to reproduce error messages. Every read is
 * bounds-checked against the end of the current record (which is checked against the end of
 * the section, which is checked against the buffer): no input can read outside the buffer.
 *
 * Why records are accepted exactly when Python accepts them: the Python loop only succeeds
 * when every record's fields end exactly at the end its length gives, inside the section,
 * and positions only grow, so all of its reads lie inside the record; the C loop refuses any
 * read past the record's end, and otherwise takes the same branches (the null key/value is
 * the single byte 0x01, any other encoding of -1 is an error; any header count, key length
 * or value length Python refuses, C refuses).
 *
 * Encoding (encode_records) writes the records section build_record_batch would join from
 * its columns, byte for byte, in one pass into one bytes object.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "../../slot_access.h"
#include "_record_reads.h"
#include "_produced_batches.h"
#include <stdint.h>
#include <string.h>
#include <time.h>


/* Slot offsets of kayak.protocol.records.record.Record, read from its member descriptors by
 * configure(): the decoder stores straight into a new record's slots, as object.__new__ plus
 * five slot stores do in Python. */
typedef struct {
    PyTypeObject *record_type; /* strong reference, NULL until configure() */
    Py_ssize_t off_offset;
    Py_ssize_t off_timestamp;
    Py_ssize_t off_key;
    Py_ssize_t off_value;
    Py_ssize_t off_headers;
} codec_state;

static codec_state state = {NULL, 0, 0, 0, 0, 0};

/* -- decoding --------------------------------------------------------------------------------- */

/* A nullable length-prefixed field (key or value) at *pos, inside the record ending at end.
 * Sets *out to a new bytes object or a new reference to None. Returns 0, -1 for "not
 * strictly decodable" (fall back), or -2 with a Python exception set. */
static inline int
read_nullable_bytes(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, PyObject **out)
{
    Py_ssize_t i = *pos;
    int64_t length;
    if (i >= end) {
        return -1;
    }
    if (p[i] == 1) { /* -1 as the single byte 0x01: null */
        *pos = i + 1;
        *out = Py_NewRef(Py_None);
        return 0;
    }
    if (read_varint(p, &i, end, 5, &length) < 0 || length < 0 || length > end - i) {
        return -1;
    }
    PyObject *field = PyBytes_FromStringAndSize((const char *)p + i, (Py_ssize_t)length);
    if (field == NULL) {
        return -2;
    }
    *pos = i + (Py_ssize_t)length;
    *out = field;
    return 0;
}

/* The headers of one record (count already known to be nonzero-encoded). Same return
 * convention as read_nullable_bytes. */
static int
read_headers(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, PyObject **out)
{
    Py_ssize_t i = *pos;
    int64_t count;
    if (read_varint(p, &i, end, 5, &count) < 0 || count < 0 || count > end - i) {
        return -1;
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) {
        return -2;
    }
    for (Py_ssize_t h = 0; h < (Py_ssize_t)count; h++) {
        int64_t key_length, value_length;
        PyObject *key, *value, *pair;
        if (read_varint(p, &i, end, 5, &key_length) < 0 || key_length < 0
            || key_length > end - i) {
            goto fallback;
        }
        key = PyUnicode_DecodeUTF8((const char *)p + i, (Py_ssize_t)key_length, NULL);
        if (key == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear(); /* Python raises CorruptRecordError for this: fall back */
                goto fallback;
            }
            goto error;
        }
        i += (Py_ssize_t)key_length;
        if (read_varint(p, &i, end, 5, &value_length) < 0) {
            Py_DECREF(key);
            goto fallback;
        }
        if (value_length < 0) {
            if (value_length != -1) {
                Py_DECREF(key);
                goto fallback;
            }
            value = Py_NewRef(Py_None);
        }
        else {
            if (value_length > end - i) {
                Py_DECREF(key);
                goto fallback;
            }
            value = PyBytes_FromStringAndSize((const char *)p + i, (Py_ssize_t)value_length);
            if (value == NULL) {
                Py_DECREF(key);
                goto error;
            }
            i += (Py_ssize_t)value_length;
        }
        pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, h, pair);
    }
    *pos = i;
    *out = headers;
    return 0;
fallback:
    Py_DECREF(headers); /* unfilled items are NULL: tuple dealloc skips them */
    return -1;
error:
    Py_DECREF(headers);
    return -2;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, start, stop, count, base_offset, base_timestamp, record_type,\n"
"               append_time, untracked) -> list | None\n"
"\n"
"Decode the count records of data[start:stop] (bytes or any flat buffer) into new\n"
"record_type instances (Record or a subclass adding no slots). append_time, if not None, is\n"
"every record's timestamp (a log-append-time batch). untracked leaves the records untracked\n"
"by the garbage collector: only for classes that call track() on every assignment. None if\n"
"the section is not strictly valid: decode it in Python.");

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t start, stop, count;
    long long base_offset, base_timestamp, append_time = 0;
    int use_append_time;
    PyTypeObject *type;

    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 9 arguments");
        return NULL;
    }
    if (state.record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kayak.protocol.records._codec is not configured");
        return NULL;
    }
    PyObject *data = args[0];
    start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    stop = PyLong_AsSsize_t(args[2]);
    if (stop == -1 && PyErr_Occurred()) {
        return NULL;
    }
    count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    base_offset = PyLong_AsLongLong(args[4]);
    if (base_offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    base_timestamp = PyLong_AsLongLong(args[5]);
    if (base_timestamp == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyType_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a type");
        return NULL;
    }
    type = (PyTypeObject *)args[6];
    use_append_time = args[7] != Py_None;
    int untracked = PyObject_IsTrue(args[8]);
    if (untracked < 0) {
        return NULL;
    }
    if (use_append_time) {
        append_time = PyLong_AsLongLong(args[7]);
        if (append_time == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    /* The slots must be where Record keeps them: the same class or a subclass that adds
     * nothing to the instance layout. */
    if (type != state.record_type
        && (!PyType_IsSubtype(type, state.record_type)
            || type->tp_basicsize != state.record_type->tp_basicsize
            || type->tp_itemsize != 0 || type->tp_dictoffset != 0
            || type->tp_weaklistoffset != state.record_type->tp_weaklistoffset)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be Record or a slot-less subclass");
        return NULL;
    }
    Py_buffer section;
    if (get_section(data, start, stop, count, &section) < 0) {
        Py_RETURN_NONE;
    }
    const unsigned char *p = (const unsigned char *)section.buf;
    PyObject *records = PyList_New(count);
    if (records == NULL) {
        release_section(&section);
        return NULL;
    }
    /* Untracked while its items are being filled in: a collection run by an allocation
     * below (and whatever finalizer it calls) must not find a list with NULL items. */
    PyObject_GC_UnTrack(records);
    /* Records of one batch mostly share their timestamp (one millisecond, or the batch's
     * log-append time): reuse the last int object while the value repeats. */
    PyObject *shared_timestamp = NULL;
    int64_t shared_value = 0;
    allocfunc alloc = type->tp_alloc;
    Py_ssize_t pos = start;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, timestamp_delta, offset_delta, offset, timestamp = 0;
        PyObject *key = NULL, *value = NULL, *headers = NULL, *offset_obj, *timestamp_obj;
        PyObject *record;
        Py_ssize_t end;
        int rc;

        if (read_varint(p, &pos, stop, 5, &length) < 0 || length < 0 || length > stop - pos) {
            goto fallback;
        }
        end = pos + (Py_ssize_t)length;
        if (pos >= end) { /* attributes: int8, unused */
            goto fallback;
        }
        pos++;
        if (read_varint(p, &pos, end, 10, &timestamp_delta) < 0
            || read_varint(p, &pos, end, 5, &offset_delta) < 0) {
            goto fallback;
        }
        if (__builtin_add_overflow((int64_t)base_offset, offset_delta, &offset)) {
            goto fallback;
        }
        if (use_append_time) {
            timestamp = append_time;
        }
        else if (__builtin_add_overflow((int64_t)base_timestamp, timestamp_delta, &timestamp)) {
            goto fallback;
        }
        rc = read_nullable_bytes(p, &pos, end, &key);
        if (rc == 0) {
            rc = read_nullable_bytes(p, &pos, end, &value);
        }
        if (rc == 0) {
            if (pos >= end) {
                rc = -1;
            }
            else if (p[pos] == 0) {
                pos++;
                headers = PyTuple_New(0); /* the shared empty tuple, as NO_HEADERS is */
                if (headers == NULL) {
                    rc = -2;
                }
            }
            else {
                rc = read_headers(p, &pos, end, &headers);
            }
        }
        if (rc == 0 && pos != end) {
            rc = -1;
        }
        if (rc != 0) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_XDECREF(headers);
            if (rc == -2) {
                goto error;
            }
            goto fallback;
        }
        offset_obj = PyLong_FromLongLong(offset);
        if (shared_timestamp != NULL && timestamp == shared_value) {
            timestamp_obj = Py_NewRef(shared_timestamp);
        }
        else {
            timestamp_obj = PyLong_FromLongLong(timestamp);
            if (timestamp_obj != NULL) {
                Py_XSETREF(shared_timestamp, Py_NewRef(timestamp_obj));
                shared_value = timestamp;
            }
        }
        record = (offset_obj != NULL && timestamp_obj != NULL) ? alloc(type, 0) : NULL;
        if (record == NULL) {
            Py_XDECREF(offset_obj);
            Py_XDECREF(timestamp_obj);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto error;
        }
        /* Fresh slots are NULL: store the new references straight in. */
        *(PyObject **)((char *)record + state.off_offset) = offset_obj;
        *(PyObject **)((char *)record + state.off_timestamp) = timestamp_obj;
        *(PyObject **)((char *)record + state.off_key) = key;
        *(PyObject **)((char *)record + state.off_value) = value;
        *(PyObject **)((char *)record + state.off_headers) = headers;
        if (untracked) {
            /* Its slots hold ints, bytes, None and tuples of str and bytes: it cannot be
             * part of a reference cycle, so the collector need not follow it (as CPython
             * untracks such tuples). The class re-tracks it on any assignment (see
             * track()). A consumer holding tens of thousands of records otherwise spends
             * a third of its time in collections that walk them. */
            PyObject_GC_UnTrack(record);
        }
        PyList_SET_ITEM(records, index, record);
    }
    if (pos != stop) {
        goto fallback;
    }
    Py_XDECREF(shared_timestamp);
    release_section(&section);
    PyObject_GC_Track(records);
    return records;

fallback:
    Py_XDECREF(shared_timestamp);
    Py_DECREF(records); /* items not yet set are NULL: list dealloc skips them */
    release_section(&section);
    Py_RETURN_NONE;
error:
    Py_XDECREF(shared_timestamp);
    Py_DECREF(records);
    release_section(&section);
    return NULL;
}

PyDoc_STRVAR(decode_values_doc,
"decode_values(data, start, stop, count) -> list | None\n"
"\n"
"Every record's value in data[start:stop]; keys are bounds-checked and headers skipped, as\n"
"batch._decode_values does. None if the section is not strictly valid: decode it in Python.");

static PyObject *
decode_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t start, stop, count;

    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "decode_values takes 4 arguments");
        return NULL;
    }
    PyObject *data = args[0];
    start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    stop = PyLong_AsSsize_t(args[2]);
    if (stop == -1 && PyErr_Occurred()) {
        return NULL;
    }
    count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer section;
    if (get_section(data, start, stop, count, &section) < 0) {
        Py_RETURN_NONE;
    }
    const unsigned char *p = (const unsigned char *)section.buf;
    PyObject *values = PyList_New(count);
    if (values == NULL) {
        release_section(&section);
        return NULL;
    }
    PyObject_GC_UnTrack(values); /* while it has NULL items: see decode_records */
    Py_ssize_t pos = start;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, key_length, value_length;
        Py_ssize_t end;
        PyObject *value;

        if (read_varint(p, &pos, stop, 5, &length) < 0 || length < 0 || length > stop - pos) {
            goto fallback;
        }
        end = pos + (Py_ssize_t)length;
        if (pos >= end) {
            goto fallback;
        }
        pos++; /* attributes */
        /* timestampDelta and offsetDelta are skipped, at most 10 bytes each as in Python. */
        if (skip_varint(p, &pos, end, 10) < 0 || skip_varint(p, &pos, end, 10) < 0) {
            goto fallback;
        }
        if (pos >= end) {
            goto fallback;
        }
        if (p[pos] == 1) {
            pos++;
        }
        else {
            if (read_varint(p, &pos, end, 5, &key_length) < 0 || key_length < 0
                || key_length > end - pos) {
                goto fallback;
            }
            pos += (Py_ssize_t)key_length;
        }
        if (pos >= end) {
            goto fallback;
        }
        if (p[pos] == 1) {
            pos++;
            value = Py_NewRef(Py_None);
        }
        else {
            if (read_varint(p, &pos, end, 5, &value_length) < 0 || value_length < 0
                || value_length > end - pos) {
                goto fallback;
            }
            value = PyBytes_FromStringAndSize((const char *)p + pos, (Py_ssize_t)value_length);
            if (value == NULL) {
                Py_DECREF(values);
                release_section(&section);
                return NULL;
            }
            pos += (Py_ssize_t)value_length;
        }
        PyList_SET_ITEM(values, index, value);
        /* At least the header count must be left; the headers themselves are skipped. */
        if (pos >= end) {
            goto fallback;
        }
        pos = end;
    }
    if (pos != stop) {
        goto fallback;
    }
    release_section(&section);
    PyObject_GC_Track(values);
    return values;

fallback:
    Py_DECREF(values);
    release_section(&section);
    Py_RETURN_NONE;
}

/* -- encoding --------------------------------------------------------------------------------- */

/* Bytes of the zigzag varint of v. */
static inline Py_ssize_t
varint_size(int64_t v)
{
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    Py_ssize_t n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *
write_varint(unsigned char *out, int64_t v)
{
    uint64_t raw = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (raw >= 0x80) {
        *out++ = (unsigned char)(raw | 0x80);
        raw >>= 7;
    }
    *out++ = (unsigned char)raw;
    return out;
}

/* One key or value: a borrowed buffer, or null. */
typedef struct {
    Py_buffer view;
    int held; /* view must be released */
    int is_null;
} field;

/* Acquire item as a field. Returns 0, or -1 (no exception set) for anything but None, bytes,
 * bytearray or a flat byte memoryview: the Python encoder then handles (and reports) it. No
 * Python code runs here, so nothing can change the lists being encoded. */
static int
get_field(PyObject *item, field *f)
{
    f->held = 0;
    f->is_null = 0;
    if (item == Py_None) {
        f->is_null = 1;
        return 0;
    }
    if (PyBytes_CheckExact(item)) {
        /* The common case, without the buffer protocol's bookkeeping. */
        f->view.buf = PyBytes_AS_STRING(item);
        f->view.len = PyBytes_GET_SIZE(item);
        return 0;
    }
    if (!PyByteArray_CheckExact(item) && !PyMemoryView_Check(item)) {
        return -1;
    }
    if (PyObject_GetBuffer(item, &f->view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return -1;
    }
    f->held = 1;
    /* Python writes len(item) as the length: for a memoryview of wider items that is not
     * the byte count, and what Python then does is Python's business. */
    if (PyMemoryView_Check(item)) {
        Py_ssize_t n = PyObject_Size(item);
        if (n < 0) {
            PyErr_Clear();
        }
        if (n != f->view.len) {
            PyBuffer_Release(&f->view);
            f->held = 0;
            return -1;
        }
    }
    return 0;
}

static void
release_field(field *f)
{
    if (f->held) {
        PyBuffer_Release(&f->view);
        f->held = 0;
    }
}

static inline Py_ssize_t
field_size(const field *f)
{
    return f->is_null ? 1 : varint_size(f->view.len) + f->view.len;
}

static inline unsigned char *
write_field(unsigned char *out, const field *f)
{
    if (f->is_null) {
        *out++ = 1;
        return out;
    }
    out = write_varint(out, f->view.len);
    if (f->view.len) {
        memcpy(out, f->view.buf, (size_t)f->view.len);
    }
    return out + f->view.len;
}

/* The records section of values/keys/headers/timestamps (args[0..3]) in a new bytes object,
 * after head_room bytes left for the caller to fill. Each record's timestampDelta is its
 * timestamp less base; *max_seen is raised to the largest timestamp. NULL with *fallback set
 * for input it leaves to Python (no exception then), NULL without it for a Python error. */
static PyObject *
encode_section(PyObject *const *args, Py_ssize_t head_room, int64_t base, int64_t *max_seen,
               int *fallback)
{
    PyObject *values = args[0], *keys = args[1], *headers = args[2], *deltas = args[3];
    *fallback = 1;
    if (!PyList_CheckExact(values) || (keys != Py_None && !PyList_CheckExact(keys))
        || (headers != Py_None && !PyList_CheckExact(headers))
        || (deltas != Py_None && !PyList_CheckExact(deltas))) {
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(values);
    if (count == 0 || (keys != Py_None && PyList_GET_SIZE(keys) != count)
        || (headers != Py_None && PyList_GET_SIZE(headers) != count)
        || (deltas != Py_None && PyList_GET_SIZE(deltas) != count)) {
        return NULL;
    }
    /* Two passes: sizes (holding every buffer), then one exact allocation and the copy. No
     * Python code runs in between (see get_field), so the lists cannot change under us. */
    /* Not zeroed (a thousand records' fields are ~200 KB): each is set below before use. */
    field *fields = PyMem_Malloc((size_t)count * 2 * sizeof(field));
    int64_t *ts = PyMem_Malloc((size_t)count * sizeof(int64_t));
    Py_ssize_t *record_sizes = PyMem_Malloc((size_t)count * sizeof(Py_ssize_t));
    PyObject *result = NULL;
    Py_ssize_t acquired = 0, total = 0;
    if (fields == NULL || ts == NULL || record_sizes == NULL) {
        *fallback = 0;
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        field *key = &fields[2 * i], *value = &fields[2 * i + 1];
        Py_ssize_t size;
        ts[i] = 0;
        if (keys == Py_None) {
            key->is_null = 1;
            key->held = 0;
        }
        else if (get_field(PyList_GET_ITEM(keys, i), key) < 0) {
            goto done;
        }
        acquired = 2 * i + 1;
        if (get_field(PyList_GET_ITEM(values, i), value) < 0) {
            goto done;
        }
        acquired = 2 * i + 2;
        if (deltas != Py_None) {
            PyObject *delta = PyList_GET_ITEM(deltas, i);
            int overflow = 0;
            long long d;
            if (!PyLong_Check(delta)) { /* its __index__ could run any code */
                goto done;
            }
            d = PyLong_AsLongLongAndOverflow(delta, &overflow);
            if (overflow) {
                goto done;
            }
            if (d == -1 && PyErr_Occurred()) {
                *fallback = 0;
                goto done;
            }
            if (d > *max_seen) {
                *max_seen = d;
            }
            if (__builtin_sub_overflow((int64_t)d, base, &ts[i])) {
                goto done;
            }
        }
        size = 1 + varint_size(ts[i]) + varint_size(i) + field_size(key) + field_size(value);
        if (headers == Py_None) {
            size += 1;
        }
        else {
            PyObject *header_bytes = PyList_GET_ITEM(headers, i);
            if (!PyBytes_CheckExact(header_bytes)) {
                goto done;
            }
            size += PyBytes_GET_SIZE(header_bytes);
        }
        if (size > PY_SSIZE_T_MAX / 4 - total) {
            goto done; /* cannot be allocated anyway: let Python say so */
        }
        record_sizes[i] = size;
        total += varint_size(size) + size;
    }
    *fallback = 0;
    result = PyBytes_FromStringAndSize(NULL, head_room + total);
    if (result == NULL) {
        goto done;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result) + head_room;
    for (Py_ssize_t i = 0; i < count; i++) {
        out = write_varint(out, record_sizes[i]);
        *out++ = 0; /* attributes */
        out = write_varint(out, ts[i]);
        out = write_varint(out, i);
        out = write_field(out, &fields[2 * i]);
        out = write_field(out, &fields[2 * i + 1]);
        if (headers == Py_None) {
            *out++ = 0;
        }
        else {
            PyObject *header_bytes = PyList_GET_ITEM(headers, i);
            Py_ssize_t n = PyBytes_GET_SIZE(header_bytes);
            memcpy(out, PyBytes_AS_STRING(header_bytes), (size_t)n);
            out += n;
        }
    }
    if (out != (unsigned char *)PyBytes_AS_STRING(result) + head_room + total) {
        Py_CLEAR(result); /* cannot happen: the sizes above are exact */
        PyErr_SetString(PyExc_SystemError, "encode_records: size mismatch");
    }
done:
    if (fields != NULL) {
        for (Py_ssize_t i = 0; i < acquired; i++) {
            release_field(&fields[i]);
        }
    }
    PyMem_Free(fields);
    PyMem_Free(ts);
    PyMem_Free(record_sizes);
    return result;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(values, keys, encoded_headers, timestamp_deltas) -> bytes | None\n"
"\n"
"The records section of a v2 batch: record i has offsetDelta i, timestampDelta\n"
"timestamp_deltas[i] (0 if timestamp_deltas is None), key keys[i] (null if keys is None),\n"
"value values[i] and the already-encoded headers encoded_headers[i] (an empty header list if\n"
"encoded_headers is None). The columns are lists of one length. None for any item it does\n"
"not take (not bytes, bytearray, a flat memoryview or None; a delta not an int64): the\n"
"Python encoder then does the work, errors included.");

static PyObject *
encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int fallback;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_records takes 4 arguments");
        return NULL;
    }
    int64_t unused = INT64_MIN;
    PyObject *result = encode_section(args, 0, 0, &unused, &fallback);
    if (result == NULL && fallback) {
        Py_RETURN_NONE;
    }
    return result;
}

/* Header fields: big-endian stores, and int64 arguments checked against their field width. */
static inline void
put_be(unsigned char *out, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        out[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* 1 if arg is an int that fits a signed field of bits bits (stored in *out), else 0; -1 with
 * an exception only for errors no input should cause. */
static int
field_int(PyObject *arg, int bits, int64_t *out)
{
    int overflow = 0;
    long long v;
    if (!PyLong_Check(arg)) {
        return 0;
    }
    v = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (overflow) {
        return 0;
    }
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (bits < 64) {
        long long limit = 1LL << (bits - 1);
        if (v < -limit || v >= limit) {
            return 0;
        }
    }
    *out = v;
    return 1;
}

#define BATCH_HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CRC_START 21

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(values, keys, encoded_headers, timestamps, base_offset,\n"
"             partition_leader_epoch, attributes, base_timestamp, max_timestamp,\n"
"             producer_id, producer_epoch, base_sequence, crc32c) -> bytes | None\n"
"\n"
"A whole uncompressed v2 batch (records as encode_records), its header and CRC-32C (computed\n"
"by calling crc32c on a memoryview of the covered bytes) in one allocation. timestamps is\n"
"None (every record at base_timestamp) or each record's own: its delta is taken from\n"
"base_timestamp here, and the header's max timestamp is the largest of them and\n"
"max_timestamp. None when encode_records would decline, a delta does not fit int64 or a\n"
"header field does not fit its width.");

static PyObject *
encode_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    /* base_offset, partition_leader_epoch, attributes, base_timestamp, max_timestamp,
     * producer_id, producer_epoch, base_sequence, with their widths */
    static const int widths[8] = {64, 32, 16, 64, 64, 64, 16, 32};
    int64_t f[8];
    int fallback;
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "encode_batch takes 13 arguments");
        return NULL;
    }
    for (int i = 0; i < 8; i++) {
        int rc = field_int(args[4 + i], widths[i], &f[i]);
        if (rc < 0) {
            return NULL;
        }
        if (rc == 0) {
            Py_RETURN_NONE;
        }
    }
    Py_ssize_t count = PyList_Check(args[0]) ? PyList_GET_SIZE(args[0]) : 0;
    if (count <= 0 || count > 0x7FFFFFFF) {
        Py_RETURN_NONE;
    }
    /* Deltas and the max timestamp in the pass that reads each record: a producer's batch
     * spans a few milliseconds, and a Python list of deltas cost more than the rest of the
     * encoding. */
    PyObject *result = encode_section(args, BATCH_HEADER_SIZE, f[3], &f[4], &fallback);
    if (result == NULL) {
        if (fallback) {
            Py_RETURN_NONE;
        }
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(result);
    if (size - LOG_OVERHEAD > 0x7FFFFFFF) {
        Py_DECREF(result);
        Py_RETURN_NONE; /* batchLength does not fit: Python reports it */
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    put_be(out + 0, (uint64_t)f[0], 8);
    put_be(out + 8, (uint64_t)(size - LOG_OVERHEAD), 4);
    put_be(out + 12, (uint64_t)f[1], 4);
    out[16] = 2; /* magic */
    put_be(out + 21, (uint64_t)f[2], 2);
    put_be(out + 23, (uint64_t)(count - 1), 4);
    put_be(out + 27, (uint64_t)f[3], 8);
    put_be(out + 35, (uint64_t)f[4], 8);
    put_be(out + 43, (uint64_t)f[5], 8);
    put_be(out + 51, (uint64_t)f[6], 2);
    put_be(out + 53, (uint64_t)f[7], 4);
    put_be(out + 57, (uint64_t)count, 4);
    /* The CRC of bytes 21.. through the crc32c package (already C), over a read-only view of
     * the new object: nobody else holds it yet. */
    PyObject *view = PyMemoryView_FromMemory((char *)out + CRC_START, size - CRC_START,
                                             PyBUF_READ);
    if (view == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    PyObject *crc = PyObject_CallOneArg(args[12], view);
    Py_DECREF(view);
    if (crc == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    unsigned long value = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        Py_DECREF(result);
        return NULL;
    }
    put_be(out + 17, (uint64_t)value, 4);
    return result;
}

/* -- configuration ---------------------------------------------------------------------------- */

PyDoc_STRVAR(configure_doc,
"configure(record_type)\n"
"\n"
"Tell the decoder the Record class (a __slots__ class with offset, timestamp, key, value and\n"
"headers) whose slots it fills.");

static PyObject *
configure(PyObject *module, PyObject *record_type)
{
    (void)module;
    codec_state fresh;
    if (!PyType_Check(record_type)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes the Record class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)record_type;
    if (type->tp_itemsize != 0 || type->tp_dictoffset != 0
        || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        PyErr_SetString(PyExc_TypeError, "Record must be a __slots__ class without __dict__");
        return NULL;
    }
    if (slot_offset(type, "offset", &fresh.off_offset) < 0
        || slot_offset(type, "timestamp", &fresh.off_timestamp) < 0
        || slot_offset(type, "key", &fresh.off_key) < 0
        || slot_offset(type, "value", &fresh.off_value) < 0
        || slot_offset(type, "headers", &fresh.off_headers) < 0) {
        return NULL;
    }
    fresh.record_type = (PyTypeObject *)Py_NewRef(record_type);
    Py_XDECREF(state.record_type);
    state = fresh;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(now_ms_doc,
"now_ms() -> int\n"
"\n"
"Wall-clock time in milliseconds since the epoch: time.time_ns() // 1_000_000 without the\n"
"big-int division (a producer stamps every record it sends).");

static PyObject *
now_ms(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    struct timespec ts;
    /* The clock time.time_ns() reads. tv_nsec is in [0, 1e9) even before 1970, so this is
     * the floor division time_ns() // 1_000_000 is. */
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

PyDoc_STRVAR(unfilled_bytearray_doc,
"unfilled_bytearray(size) -> bytearray\n"
"\n"
"A bytearray of size bytes not zeroed first: for a frame the socket fills whole before anyone\n"
"reads it (bytearray(size) writes every byte twice, and a fetch answer is a megabyte).");

static PyObject *
unfilled_bytearray(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "unfilled_bytearray: a negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, size);
}

PyDoc_STRVAR(track_doc,
"track(record)\n"
"\n"
"Let the garbage collector follow a record again (after an assignment to one of its slots,\n"
"which may have made it part of a cycle). Anything but an untracked record is left alone.");

static PyObject *
track(PyObject *module, PyObject *obj)
{
    (void)module;
    if (state.record_type != NULL && PyObject_TypeCheck(obj, state.record_type)
        && PyObject_IS_GC(obj) && !PyObject_GC_IsTracked(obj)) {
        PyObject_GC_Track(obj);
    }
    Py_RETURN_NONE;
}

/* -- murmur2 (the producer's key hash) ------------------------------------------------------- */

/* Kafka's murmur2 over p[0..n): org.apache.kafka.common.utils.Utils.murmur2, in uint32_t
 * arithmetic (unsigned wrap-around gives the same 32 bits as Java's int overflow; >> on
 * uint32_t is Java's >>>). */
static uint32_t
murmur2_u32(const unsigned char *p, Py_ssize_t n)
{
    const uint32_t m = 0x5bd1e995u;
    /* Java's length is an int: only its low 32 bits enter the hash. */
    uint32_t h = 0x9747b28cu ^ (uint32_t)n;
    Py_ssize_t body = n & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < body; i += 4) {
        /* Little-endian, byte by byte: no unaligned load, any host byte order. */
        uint32_t k = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16
                     | (uint32_t)p[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (n & 3) { /* Java's fall-through switch over the 1-3 trailing bytes */
    case 3:
        h ^= (uint32_t)p[body + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)p[body + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)p[body];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

PyDoc_STRVAR(murmur2_doc,
"murmur2(data, /) -> int\n"
"\n"
"Kafka's murmur2 hash of a bytes-like object: a signed 32-bit int, as Java's\n"
"Utils.murmur2 returns (the producer's key hash). TypeError for anything else.");

static PyObject *
murmur2(PyObject *module, PyObject *data)
{
    (void)module;
    uint32_t h;
    if (PyBytes_CheckExact(data)) { /* the usual key: no buffer to acquire */
        h = murmur2_u32((const unsigned char *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
    }
    else {
        Py_buffer view;
        /* PyBUF_SIMPLE: one contiguous run of bytes; raises TypeError for str, int, None. */
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            return NULL;
        }
        h = murmur2_u32((const unsigned char *)view.buf, view.len);
        PyBuffer_Release(&view);
    }
    /* Java's int: the same 32 bits read as two's complement (int32_t conversion of a value
     * above INT32_MAX is implementation-defined in C, so subtract instead). */
    long long value = h & 0x80000000u ? (long long)h - 0x100000000LL : (long long)h;
    return PyLong_FromLongLong(value);
}

static PyMethodDef codec_methods[] = {
    {"track", (PyCFunction)track, METH_O, track_doc},
    {"now_ms", (PyCFunction)now_ms, METH_NOARGS, now_ms_doc},
    {"unfilled_bytearray", (PyCFunction)unfilled_bytearray, METH_O, unfilled_bytearray_doc},
    {"murmur2", (PyCFunction)murmur2, METH_O, murmur2_doc},
    {"configure", (PyCFunction)configure, METH_O, configure_doc},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     decode_records_doc},
    {"decode_values", (PyCFunction)(void (*)(void))decode_values, METH_FASTCALL,
     decode_values_doc},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     encode_records_doc},
    {"encode_batch", (PyCFunction)(void (*)(void))encode_batch, METH_FASTCALL,
     encode_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef codec_module = {
    PyModuleDef_HEAD_INIT,
    "kayak.protocol.records._codec",
    "Record-batch encode/decode loops in C; see kayak.protocol.records.batch.",
    -1,
    codec_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__codec(void)
{
    PyObject *module = PyModule_Create(&codec_module);
    if (module != NULL && PyModule_AddFunctions(module, produced_batch_methods) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
