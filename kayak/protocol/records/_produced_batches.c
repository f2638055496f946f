/*
 * The produce path's checks of a producer's batches, without building records: part of
 * kayak.protocol.records._codec (its module init adds produced_batch_methods).
 *
 * Like the decoders, these are *strict and partial*: they answer only for input the Python
 * reference accepts (kayak.protocol.records.scanner.produced_batches and
 * validation.validate_produced_records) and return None for everything else, so the caller
 * runs the Python code, which raises its own precise error. They never raise for bad data.
 */

#include "_produced_batches.h"
#include "_record_reads.h"
#include <string.h>

/* v2 batch layout (kayak.protocol.records.record): the header is 61 bytes, of which the
 * first 12 (base offset, batch length) are the log overhead; the CRC covers attributes on. */
#define LOG_OVERHEAD 12
#define MIN_BATCH_LENGTH 49
#define BATCH_HEADER_SIZE 61
#define MAGIC_POS 16
#define CRC_POS 17
#define ATTRIBUTES_POS 21
#define MAGIC_V2 2
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_BIT 0x08
#define CONTROL_BIT 0x20
#define HEADER_FIELDS 14
/* validation.CHUNK_RECORDS: a batch with more records is checked a slice at a time, in Python. */
#define CHUNK_RECORDS (1 << 16)

/* Whether p[0..n) is well-formed UTF-8 (what PyUnicode_DecodeUTF8 accepts: no surrogates, no
 * overlong forms, nothing past U+10FFFF). */
static int
valid_utf8(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned int c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int extra;
        unsigned int min;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1, min = 0x80;
        }
        else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2, min = 0x800;
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3, min = 0x10000;
        }
        else {
            return 0;
        }
        if (n - i <= extra) {
            return 0;
        }
        unsigned int cp = c & (0x3F >> extra);
        for (int k = 1; k <= extra; k++) {
            unsigned int b = p[i + k];
            if ((b & 0xC0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (b & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return 0;
        }
        i += extra + 1;
    }
    return 1;
}

/* A nullable length (key or value) at *pos inside the record ending at end: skips the bytes.
 * Sets *is_null. Returns 0, or -1 for "not strictly valid". */
static inline int
skip_nullable(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int *is_null)
{
    Py_ssize_t i = *pos;
    int64_t length;
    if (i >= end) {
        return -1;
    }
    if (p[i] == 1) {
        *pos = i + 1;
        *is_null = 1;
        return 0;
    }
    if (read_varint(p, &i, end, 5, &length) < 0 || length < 0 || length > end - i) {
        return -1;
    }
    *pos = i + (Py_ssize_t)length;
    *is_null = 0;
    return 0;
}

/* Walk count records in p[start..stop): record i with offsetDelta i, every field within its
 * record and ending where the record's length says, header keys UTF-8, nothing left over.
 * Returns 0 with the earliest and latest timestamp deltas and whether a key is null, or -1
 * for anything not strictly valid. */
static int
walk_records(const unsigned char *p, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t count,
             int64_t *min_out, int64_t *max_out, int *null_key_out)
{
    Py_ssize_t pos = start;
    int64_t min_delta = INT64_MAX, max_delta = INT64_MIN;
    int any_null_key = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, timestamp_delta, offset_delta, header_count;
        int null_key, null_value;
        if (read_varint(p, &pos, stop, 5, &length) < 0 || length < 0 || length > stop - pos) {
            return -1;
        }
        Py_ssize_t end = pos + (Py_ssize_t)length;
        if (pos >= end) {
            return -1; /* no attributes byte */
        }
        pos++; /* attributes: unused */
        if (read_varint(p, &pos, end, 10, &timestamp_delta) < 0
            || read_varint(p, &pos, end, 5, &offset_delta) < 0 || offset_delta != index) {
            return -1;
        }
        if (skip_nullable(p, &pos, end, &null_key) < 0
            || skip_nullable(p, &pos, end, &null_value) < 0) {
            return -1;
        }
        if (read_varint(p, &pos, end, 5, &header_count) < 0 || header_count < 0
            || header_count > end - pos) {
            return -1;
        }
        for (int64_t h = 0; h < header_count; h++) {
            int64_t key_length, value_length;
            if (read_varint(p, &pos, end, 5, &key_length) < 0 || key_length < 0
                || key_length > end - pos || !valid_utf8(p + pos, (Py_ssize_t)key_length)) {
                return -1;
            }
            pos += (Py_ssize_t)key_length;
            if (read_varint(p, &pos, end, 5, &value_length) < 0 || value_length < -1
                || value_length > end - pos) {
                return -1;
            }
            if (value_length > 0) {
                pos += (Py_ssize_t)value_length;
            }
        }
        if (pos != end) {
            return -1;
        }
        any_null_key |= null_key;
        if (timestamp_delta < min_delta) {
            min_delta = timestamp_delta;
        }
        if (timestamp_delta > max_delta) {
            max_delta = timestamp_delta;
        }
    }
    if (pos != stop) {
        return -1;
    }
    *min_out = min_delta;
    *max_out = max_delta;
    *null_key_out = any_null_key;
    return 0;
}

PyDoc_STRVAR(validate_records_doc,
"validate_records(data, start, stop, count) -> (min_timestamp_delta, max_timestamp_delta,\n"
"any_null_key) or None\n\n"
"Walk the records section data[start:stop] of a produced batch without building records:\n"
"exactly count records, record i with offsetDelta i, every field within its record and\n"
"ending where the record's length says, header keys UTF-8, nothing left over. None for\n"
"anything else (the caller decodes in Python for the precise error).");

static PyObject *
validate_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, stop, count;
    Py_buffer view;
    int64_t min_delta, max_delta;
    int any_null_key;
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "validate_records takes 4 arguments");
        return NULL;
    }
    if ((start = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((stop = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((count = PyLong_AsSsize_t(args[3])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (get_section(args[0], start, stop, count, &view) < 0) {
        Py_RETURN_NONE;
    }
    int walked = walk_records((const unsigned char *)view.buf, start, stop, count, &min_delta,
                              &max_delta, &any_null_key);
    release_section(&view);
    if (walked < 0) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LLO)", (long long)min_delta, (long long)max_delta,
                         any_null_key ? Py_True : Py_False);
}

/* -- whole produced batches ---------------------------------------------------------------- */

static inline uint64_t
get_be(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* A v2 batch header as read from the wire (the fields of BATCH_HEADER, ">qiibIhiqqqhii"). */
typedef struct {
    int64_t base_offset;
    int32_t batch_length;
    int32_t partition_leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t record_count;
} wire_header;

static void
read_wire_header(const unsigned char *p, wire_header *h)
{
    h->base_offset = (int64_t)get_be(p, 8);
    h->batch_length = (int32_t)(uint32_t)get_be(p + 8, 4);
    h->partition_leader_epoch = (int32_t)(uint32_t)get_be(p + 12, 4);
    h->magic = (int8_t)p[MAGIC_POS];
    h->crc = (uint32_t)get_be(p + CRC_POS, 4);
    h->attributes = (int16_t)(uint16_t)get_be(p + ATTRIBUTES_POS, 2);
    h->last_offset_delta = (int32_t)(uint32_t)get_be(p + 23, 4);
    h->base_timestamp = (int64_t)get_be(p + 27, 8);
    h->max_timestamp = (int64_t)get_be(p + 35, 8);
    h->producer_id = (int64_t)get_be(p + 43, 8);
    h->producer_epoch = (int16_t)(uint16_t)get_be(p + 51, 2);
    h->base_sequence = (int32_t)(uint32_t)get_be(p + 53, 4);
    h->record_count = (int32_t)(uint32_t)get_be(p + 57, 4);
}

/* Whether the batch at p (whole, length bytes from p) passes every check of the Python path
 * for an uncompressed, non-control batch: strict validate_batch (bar the CRC, checked by the
 * caller), the size limit, and validate_produced_records' walk and summary rules. */
static int
batch_passes(const unsigned char *p, const wire_header *h, long long max_batch_size,
             int compacted, int log_append_time)
{
    int64_t count = h->record_count, earliest, latest, latest_at;
    int null_key;
    if (h->magic != MAGIC_V2 || h->batch_length < MIN_BATCH_LENGTH
        || (h->attributes & CODEC_MASK) != 0 || (h->attributes & CONTROL_BIT)
        || (long long)LOG_OVERHEAD + h->batch_length > max_batch_size) {
        return 0;
    }
    if (count <= 0 || count > CHUNK_RECORDS || count != (int64_t)h->last_offset_delta + 1
        || h->batch_length - MIN_BATCH_LENGTH < 6 * count) {
        return 0;
    }
    Py_ssize_t stop = LOG_OVERHEAD + (Py_ssize_t)h->batch_length;
    if (count > (stop - BATCH_HEADER_SIZE) / MIN_RECORD_SIZE) {
        return 0; /* the walk's own bound (get_section) */
    }
    if (walk_records(p, BATCH_HEADER_SIZE, stop, (Py_ssize_t)count, &earliest, &latest,
                     &null_key) < 0) {
        return 0;
    }
    if (!log_append_time && !(h->attributes & TIMESTAMP_TYPE_BIT)) {
        /* base + latest <= max, base + earliest >= INT64_MIN, in Python's unbounded ints:
         * an overflow here is left to Python. */
        int64_t earliest_at;
        if (__builtin_add_overflow(h->base_timestamp, latest, &latest_at)
            || __builtin_add_overflow(h->base_timestamp, earliest, &earliest_at)
            || latest_at > h->max_timestamp) {
            return 0;
        }
    }
    return !(compacted && null_key);
}

static PyObject *
stored_header(PyTypeObject *type, Py_ssize_t position, int64_t base_offset, long long epoch,
              const wire_header *h)
{
    long long fields[HEADER_FIELDS] = {
        position, base_offset, h->batch_length, epoch, h->magic, h->crc, h->attributes,
        h->last_offset_delta, h->base_timestamp, h->max_timestamp, h->producer_id,
        h->producer_epoch, h->base_sequence, h->record_count,
    };
    PyObject *header = type->tp_alloc(type, HEADER_FIELDS);
    if (header == NULL) {
        return NULL;
    }
    for (int i = 0; i < HEADER_FIELDS; i++) {
        PyObject *value = PyLong_FromLongLong(fields[i]);
        if (value == NULL) {
            Py_DECREF(header);
            return NULL;
        }
        PyTuple_SET_ITEM(header, i, value);
    }
    return header;
}

/* CRC-32C of p[0..n) by the crc32c package's function: 0 and *out, or -1 with an error set. */
static int
crc_of(PyObject *crc32c, const unsigned char *p, Py_ssize_t n, uint32_t *out)
{
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (view == NULL) {
        return -1;
    }
    PyObject *crc = PyObject_CallOneArg(crc32c, view);
    Py_DECREF(view);
    if (crc == NULL) {
        return -1;
    }
    unsigned long value = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (uint32_t)value;
    return 0;
}

static int
arg_long_long(PyObject *arg, long long *out)
{
    *out = PyLong_AsLongLong(arg);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

PyDoc_STRVAR(check_produced_batches_doc,
"check_produced_batches(data, base_offset, leader_epoch, max_batch_size, compacted,\n"
"log_append_time, header_type, crc32c) -> list of header_type, or None\n\n"
"The headers of a producer's v2 batches as they will be stored (base offsets assigned from\n"
"base_offset, the leader epoch set), when every batch is uncompressed, not a control batch,\n"
"at most max_batch_size bytes, passes its CRC-32C (crc32c(view) -> int) and the strict\n"
"header checks, and its records pass validate_records and the timestamp and key rules.\n"
"None for anything else, including a trailing partial batch: the caller checks in Python.");

static PyObject *
check_produced_batches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long base_offset, leader_epoch, max_batch_size;
    int compacted, log_append_time;
    Py_buffer view;
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "check_produced_batches takes 8 arguments");
        return NULL;
    }
    if (arg_long_long(args[1], &base_offset) < 0 || arg_long_long(args[2], &leader_epoch) < 0
        || arg_long_long(args[3], &max_batch_size) < 0) {
        return NULL;
    }
    if ((compacted = PyObject_IsTrue(args[4])) < 0
        || (log_append_time = PyObject_IsTrue(args[5])) < 0) {
        return NULL;
    }
    PyObject *type = args[6];
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
        || ((PyTypeObject *)type)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple subclass (BatchHeader)");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not a flat buffer: Python decides what that means */
        Py_RETURN_NONE;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0, size = view.len;
    int64_t next_offset = (int64_t)base_offset;
    PyObject *headers = PyList_New(0);
    if (headers == NULL || size == 0) {
        goto fall_back;
    }
    while (pos < size) {
        wire_header h;
        uint32_t crc;
        int64_t after;
        if (size - pos < BATCH_HEADER_SIZE) {
            goto fall_back;
        }
        read_wire_header(p + pos, &h);
        if (h.batch_length < MIN_BATCH_LENGTH
            || h.batch_length > size - pos - LOG_OVERHEAD
            || !batch_passes(p + pos, &h, max_batch_size, compacted, log_append_time)) {
            goto fall_back;
        }
        Py_ssize_t end = pos + LOG_OVERHEAD + h.batch_length;
        if (crc_of(args[7], p + pos + ATTRIBUTES_POS, end - pos - ATTRIBUTES_POS, &crc) < 0) {
            goto error;
        }
        if (crc != h.crc || __builtin_add_overflow(next_offset, (int64_t)h.record_count, &after)) {
            goto fall_back;
        }
        PyObject *header = stored_header((PyTypeObject *)type, pos, next_offset,
                                         leader_epoch, &h);
        if (header == NULL) {
            goto error;
        }
        int appended = PyList_Append(headers, header);
        Py_DECREF(header);
        if (appended < 0) {
            goto error;
        }
        next_offset = after;
        pos = end;
    }
    PyBuffer_Release(&view);
    return headers;
fall_back:
    PyBuffer_Release(&view);
    Py_XDECREF(headers);
    if (PyErr_Occurred()) {
        return NULL; /* PyList_New failed */
    }
    Py_RETURN_NONE;
error:
    PyBuffer_Release(&view);
    Py_XDECREF(headers);
    return NULL;
}

PyMethodDef produced_batch_methods[] = {
    {"validate_records", (PyCFunction)(void (*)(void))validate_records, METH_FASTCALL,
     validate_records_doc},
    {"check_produced_batches", (PyCFunction)(void (*)(void))check_produced_batches,
     METH_FASTCALL, check_produced_batches_doc},
    {NULL, NULL, 0, NULL},
};
