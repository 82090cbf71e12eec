/*
 * Avro binary writing in C for the compiled writers of schemas/fast_writer.py (issue 15: the processor's Avro work).
 *
 * Python plans each record type once (`native_writer.py`): a tree of small tuples naming what to write, with the
 * same acceptance rules as the generated Python writers. This module walks that tree over a record (dicts, lists,
 * tuples, str, bytes, int, float, bool, None) and returns its Avro body. It vouches for exactly what the generated
 * Python writer vouches for: any datum it is not sure of raises the `Unsure` it was configured with (or the error
 * CPython raised: an unhashable enum symbol, a float out of range), and the codec then writes the record the
 * careful way (the datum check, then fastavro), which writes it or says what is wrong. The test suite writes every
 * record both ways and compares (OSTINATO_CODEC_CROSSCHECK).
 *
 * Plan nodes (ints are the primitive kinds; tuples the rest):
 *   0 null, 1 boolean, 2 int, 3 long, 4 float, 5 double, 6 string, 7 bytes
 *   (8, {symbol: varint bytes}, (symbol, ...))           enum
 *   (9, [full name, ((field, default or MISSING, node), ...)])   record (a list, so recursive types can refer to it)
 *   (10, node)                                            array
 *   (11, node)                                            map (string keys)
 *   (12, node, record full name or None)                  union of null and one type
 *   (13, {full name: (index varint bytes, record list)}, ((full name, record list), ...))
 *                                                         union of records, given as (name, record)
 *
 * The same plans read: `read` returns what the generated Python readers of fast_reader.py return (what fastavro
 * returns with Ostinato's options), and raises `Unsure` for whatever they refuse (truncated, a varint past 64 bits,
 * an index out of range), or the UnicodeDecodeError of bad UTF-8; the codec then reads the careful way.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

enum { K_NULL, K_BOOLEAN, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_STRING, K_BYTES, K_ENUM, K_RECORD, K_ARRAY, K_MAP,
       K_NULL_UNION, K_RECORD_UNION };

#define MAX_DEPTH 200

static PyObject *Unsure = NULL;       /* fast_writer.Unsure */
static PyTypeObject *Encoded = NULL;  /* fast_writer.Encoded: a record carrying its own body */
static PyObject *Missing = NULL;      /* the plan's "no default" marker */
static PyObject *str_body = NULL, *str_type_name = NULL;

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int grow(Buf *b, Py_ssize_t need) {
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + need) cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const char *p, Py_ssize_t n) {
    if (b->len + n > b->cap && grow(b, n) < 0) return -1;
    memcpy(b->data + b->len, p, (size_t)n);
    b->len += n;
    return 0;
}

static inline int put_byte(Buf *b, unsigned char c) {
    if (b->len + 1 > b->cap && grow(b, 1) < 0) return -1;
    b->data[b->len++] = (char)c;
    return 0;
}

static inline int put_varint(Buf *b, unsigned long long z) {
    if (b->len + 10 > b->cap && grow(b, 10) < 0) return -1;
    unsigned char *p = (unsigned char *)b->data + b->len;
    while (z > 0x7F) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    b->len = (char *)p - b->data;
    return 0;
}

static inline int put_long(Buf *b, long long n) {
    return put_varint(b, ((unsigned long long)n << 1) ^ (unsigned long long)(n >> 63));
}

static int unsure(void) {
    PyErr_SetNone(Unsure);
    return -1;
}

static int put_bytes_obj(Buf *b, PyObject *bytes) {
    return put(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

static int write_node(PyObject *node, PyObject *v, Buf *b, int depth);

static int write_record(PyObject *record, PyObject *v, Buf *b, int depth) {
    PyObject *name = PyList_GET_ITEM(record, 0);
    if (Py_TYPE(v) != &PyDict_Type) {
        if (Py_TYPE(v) != Encoded) return unsure();
        PyObject *type_name = PyObject_GetAttr(v, str_type_name);
        if (type_name == NULL) return -1;
        int same = PyUnicode_CheckExact(type_name) && PyUnicode_Compare(type_name, name) == 0;
        Py_DECREF(type_name);
        if (!same) return unsure();
        PyObject *body = PyObject_GetAttr(v, str_body);
        if (body == NULL) return -1;
        int rc = PyBytes_CheckExact(body) ? put_bytes_obj(b, body) : unsure();
        Py_DECREF(body);
        return rc;
    }
    PyObject *fields = PyList_GET_ITEM(record, 1);
    Py_ssize_t n = PyTuple_GET_SIZE(fields), present = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *field = PyTuple_GET_ITEM(fields, i);
        PyObject *x = PyDict_GetItemWithError(v, PyTuple_GET_ITEM(field, 0));
        if (x == NULL) {
            if (PyErr_Occurred()) return -1;
            x = PyTuple_GET_ITEM(field, 1);
            if (x == Missing) return unsure();  /* a field without a default is missing: the careful path names it */
        } else {
            present++;
        }
        if (write_node(PyTuple_GET_ITEM(field, 2), x, b, depth + 1) < 0) return -1;
    }
    if (present != PyDict_GET_SIZE(v)) return unsure();  /* a key that is no field (a typo) */
    return 0;
}

static int write_node(PyObject *node, PyObject *v, Buf *b, int depth) {
    if (depth > MAX_DEPTH) return unsure();
    if (PyLong_CheckExact(node)) {
        switch (PyLong_AsLong(node)) {
        case K_NULL:
            return v == Py_None ? 0 : unsure();
        case K_BOOLEAN:
            if (v == Py_True) return put_byte(b, 1);
            if (v == Py_False) return put_byte(b, 0);
            return unsure();
        case K_INT:
        case K_LONG: {
            if (!PyLong_CheckExact(v)) return unsure();
            int overflow = 0;
            long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow) return unsure();
            if (n == -1 && PyErr_Occurred()) return -1;
            if (PyLong_AsLong(node) == K_INT && (n < -2147483648LL || n > 2147483647LL)) return unsure();
            return put_long(b, n);
        }
        case K_FLOAT:
        case K_DOUBLE: {
            if (!PyFloat_CheckExact(v) && !PyLong_CheckExact(v)) return unsure();
            double d = PyFloat_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred()) return -1;
            char packed[8];
            if (PyLong_AsLong(node) == K_FLOAT) {
                if (PyFloat_Pack4(d, packed, 1) < 0) return -1;
                return put(b, packed, 4);
            }
            if (PyFloat_Pack8(d, packed, 1) < 0) return -1;
            return put(b, packed, 8);
        }
        case K_STRING: {
            if (!PyUnicode_CheckExact(v)) return unsure();
            Py_ssize_t size;
            const char *utf8 = PyUnicode_AsUTF8AndSize(v, &size);
            if (utf8 == NULL) return -1;
            if (put_long(b, size) < 0) return -1;
            return put(b, utf8, size);
        }
        case K_BYTES:
            if (!PyBytes_CheckExact(v)) return unsure();
            if (put_long(b, PyBytes_GET_SIZE(v)) < 0) return -1;
            return put_bytes_obj(b, v);
        default:
            PyErr_SetString(PyExc_SystemError, "unknown Avro plan node");
            return -1;
        }
    }
    PyObject *arg = PyTuple_GET_ITEM(node, 1);
    switch (PyLong_AsLong(PyTuple_GET_ITEM(node, 0))) {
    case K_ENUM: {
        /* only exact str is looked up: no Python code (a __hash__ or __eq__) runs while a record is written */
        if (!PyUnicode_CheckExact(v)) return unsure();
        PyObject *index = PyDict_GetItemWithError(arg, v);
        if (index == NULL) return PyErr_Occurred() ? -1 : unsure();
        return put_bytes_obj(b, index);
    }
    case K_RECORD:
        return write_record(arg, v, b, depth);
    case K_ARRAY: {
        if (!PyList_CheckExact(v) && !PyTuple_CheckExact(v)) return unsure();
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (n > 0) {
            if (put_long(b, n) < 0) return -1;
            for (Py_ssize_t i = 0; i < n; i++) {
                /* re-read the size each time: nothing here runs Python code, but a list is never trusted */
                if (i >= PySequence_Fast_GET_SIZE(v)) return unsure();
                if (write_node(arg, PySequence_Fast_GET_ITEM(v, i), b, depth + 1) < 0) return -1;
            }
        }
        return put_byte(b, 0);
    }
    case K_MAP: {
        if (!PyDict_CheckExact(v)) return unsure();
        Py_ssize_t n = PyDict_GET_SIZE(v), pos = 0;
        PyObject *key, *value;
        if (n > 0) {
            if (put_long(b, n) < 0) return -1;
            while (PyDict_Next(v, &pos, &key, &value)) {
                if (!PyUnicode_CheckExact(key)) return unsure();
                Py_ssize_t size;
                const char *utf8 = PyUnicode_AsUTF8AndSize(key, &size);
                if (utf8 == NULL) return -1;
                if (put_long(b, size) < 0 || put(b, utf8, size) < 0) return -1;
                if (write_node(arg, value, b, depth + 1) < 0) return -1;
            }
        }
        return put_byte(b, 0);
    }
    case K_NULL_UNION: {
        if (v == Py_None) return put_byte(b, 0);
        if (put_byte(b, 2) < 0) return -1;
        PyObject *record_name = PyTuple_GET_ITEM(node, 2);
        if (record_name != Py_None && PyTuple_CheckExact(v)) {  /* fastavro also takes a tagged (name, record) */
            PyObject *tag = PyTuple_GET_SIZE(v) == 2 ? PyTuple_GET_ITEM(v, 0) : NULL;
            if (tag == NULL || !PyUnicode_CheckExact(tag) || PyUnicode_Compare(tag, record_name) != 0) return unsure();
            v = PyTuple_GET_ITEM(v, 1);
        }
        return write_node(arg, v, b, depth + 1);
    }
    case K_RECORD_UNION: {
        if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(v, 0)))
            return unsure();
        PyObject *branch = PyDict_GetItemWithError(arg, PyTuple_GET_ITEM(v, 0));
        if (branch == NULL) return PyErr_Occurred() ? -1 : unsure();
        if (put_bytes_obj(b, PyTuple_GET_ITEM(branch, 0)) < 0) return -1;
        return write_record(PyTuple_GET_ITEM(branch, 1), PyTuple_GET_ITEM(v, 1), b, depth + 1);
    }
    default:
        PyErr_SetString(PyExc_SystemError, "unknown Avro plan node");
        return -1;
    }
}

/* write(record_plan, record, out): append the Avro body of `record` to the bytearray `out`. */
static PyObject *py_write(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyByteArray_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "write(record_plan: list, record, out: bytearray)");
        return NULL;
    }
    if (Unsure == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    Buf b = {NULL, 0, 0};
    if (write_record(args[0], args[1], &b, 0) < 0) {
        PyMem_Free(b.data);
        return NULL;
    }
    PyObject *out = args[2];
    Py_ssize_t start = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, start + b.len) < 0) {
        PyMem_Free(b.data);
        return NULL;
    }
    memcpy(PyByteArray_AS_STRING(out) + start, b.data, (size_t)b.len);
    PyMem_Free(b.data);
    Py_RETURN_NONE;
}


/* -- reading ----------------------------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *d;
    Py_ssize_t p, len;
} In;

static int get_varint(In *in, unsigned long long *out) {
    unsigned long long x = 0;
    int shift = 0;
    for (;;) {
        if (in->p >= in->len) return unsure();
        unsigned int c = in->d[in->p++];
        if (shift == 63 && c > 1) return unsure();  /* past 64 bits: fastavro wraps it, the readers do not guess */
        x |= (unsigned long long)(c & 0x7F) << shift;
        if (c < 0x80) break;
        shift += 7;
        if (shift > 63) return unsure();
    }
    *out = x;
    return 0;
}

static int get_long(In *in, long long *out) {
    unsigned long long z;
    if (get_varint(in, &z) < 0) return -1;
    *out = (long long)(z >> 1) ^ -(long long)(z & 1);
    return 0;
}

static PyObject *read_node(PyObject *node, In *in, int depth);

static PyObject *read_record(PyObject *record, In *in, int depth) {
    PyObject *fields = PyList_GET_ITEM(record, 1);
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    PyObject *out = _PyDict_NewPresized(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *field = PyTuple_GET_ITEM(fields, i);
        PyObject *x = read_node(PyTuple_GET_ITEM(field, 2), in, depth + 1);
        if (x == NULL || PyDict_SetItem(out, PyTuple_GET_ITEM(field, 0), x) < 0) {
            Py_XDECREF(x);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(x);
    }
    return out;
}

static PyObject *read_string(In *in, int text) {
    long long n;
    if (get_long(in, &n) < 0) return NULL;
    if (n < 0 || n > in->len - in->p) {
        unsure();
        return NULL;
    }
    const char *start = (const char *)in->d + in->p;
    in->p += (Py_ssize_t)n;
    return text ? PyUnicode_DecodeUTF8(start, (Py_ssize_t)n, NULL) : PyBytes_FromStringAndSize(start, (Py_ssize_t)n);
}

/* A block count: its items, or 0 at the end; a negative count is followed by the block's size in bytes. */
static int get_count(In *in, long long *n) {
    if (get_long(in, n) < 0) return -1;
    if (*n < 0) {
        long long size;
        *n = -*n;
        if (get_long(in, &size) < 0) return -1;
    }
    return 0;
}

static PyObject *read_node(PyObject *node, In *in, int depth) {
    if (depth > MAX_DEPTH) {
        unsure();
        return NULL;
    }
    if (PyLong_CheckExact(node)) {
        switch (PyLong_AsLong(node)) {
        case K_NULL:
            Py_RETURN_NONE;
        case K_BOOLEAN: {
            if (in->p >= in->len) break;
            unsigned int c = in->d[in->p++];
            if (c > 1) break;
            return PyBool_FromLong(c);
        }
        case K_INT:
        case K_LONG: {
            long long n;
            if (get_long(in, &n) < 0) return NULL;
            return PyLong_FromLongLong(n);
        }
        case K_FLOAT:
        case K_DOUBLE: {
            int four = PyLong_AsLong(node) == K_FLOAT;
            Py_ssize_t size = four ? 4 : 8;
            if (in->len - in->p < size) break;
            const char *at = (const char *)in->d + in->p;
            in->p += size;
            double d = four ? PyFloat_Unpack4(at, 1) : PyFloat_Unpack8(at, 1);
            if (d == -1.0 && PyErr_Occurred()) return NULL;
            return PyFloat_FromDouble(d);
        }
        case K_STRING:
            return read_string(in, 1);
        case K_BYTES:
            return read_string(in, 0);
        default:
            PyErr_SetString(PyExc_SystemError, "unknown Avro plan node");
            return NULL;
        }
        unsure();
        return NULL;
    }
    PyObject *arg = PyTuple_GET_ITEM(node, 1);
    switch (PyLong_AsLong(PyTuple_GET_ITEM(node, 0))) {
    case K_ENUM: {
        PyObject *symbols = PyTuple_GET_ITEM(node, 2);
        long long i;
        if (get_long(in, &i) < 0) return NULL;
        if (i < 0 || i >= PyTuple_GET_SIZE(symbols)) break;
        return Py_NewRef(PyTuple_GET_ITEM(symbols, (Py_ssize_t)i));
    }
    case K_RECORD:
        return read_record(arg, in, depth);
    case K_ARRAY:
    case K_MAP: {
        int map = PyLong_AsLong(PyTuple_GET_ITEM(node, 0)) == K_MAP;
        PyObject *out = map ? PyDict_New() : PyList_New(0);
        if (out == NULL) return NULL;
        for (;;) {
            long long n;
            if (get_count(in, &n) < 0) goto failed;
            if (n == 0) return out;
            for (long long i = 0; i < n; i++) {
                PyObject *key = NULL;
                if (map && (key = read_string(in, 1)) == NULL) goto failed;
                PyObject *item = read_node(arg, in, depth + 1);
                int rc = item == NULL ? -1 : map ? PyDict_SetItem(out, key, item) : PyList_Append(out, item);
                Py_XDECREF(key);
                Py_XDECREF(item);
                if (rc < 0) goto failed;
            }
        }
    failed:
        Py_DECREF(out);
        return NULL;
    }
    case K_NULL_UNION: {
        long long i;
        if (get_long(in, &i) < 0) return NULL;
        if (i == 0) Py_RETURN_NONE;
        if (i != 1) break;
        return read_node(arg, in, depth + 1);
    }
    case K_RECORD_UNION: {
        PyObject *branches = PyTuple_GET_ITEM(node, 2);
        long long i;
        if (get_long(in, &i) < 0) return NULL;
        if (i < 0 || i >= PyTuple_GET_SIZE(branches)) break;
        PyObject *branch = PyTuple_GET_ITEM(branches, (Py_ssize_t)i);
        PyObject *record = read_record(PyTuple_GET_ITEM(branch, 1), in, depth + 1);
        if (record == NULL) return NULL;
        PyObject *tagged = PyTuple_Pack(2, PyTuple_GET_ITEM(branch, 0), record);
        Py_DECREF(record);
        return tagged;
    }
    default:
        PyErr_SetString(PyExc_SystemError, "unknown Avro plan node");
        return NULL;
    }
    unsure();
    return NULL;
}

/* read(record_plan, data, pos): (the record at data[pos:], the offset after it). */
static PyObject *py_read(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) || !PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "read(record_plan: list, data: bytes, pos: int)");
        return NULL;
    }
    if (Unsure == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    In in = {(const unsigned char *)PyBytes_AS_STRING(args[1]), PyLong_AsSsize_t(args[2]), PyBytes_GET_SIZE(args[1])};
    if (in.p < 0 || in.p > in.len) return PyErr_Occurred() ? NULL : (unsure(), NULL);
    PyObject *record = read_record(args[0], &in, 0);
    if (record == NULL) return NULL;
    PyObject *end = PyLong_FromSsize_t(in.p);
    if (end == NULL) {
        Py_DECREF(record);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, record, end);
    Py_DECREF(record);
    Py_DECREF(end);
    return result;
}

/* configure(Unsure, Encoded, MISSING): the exception to raise, the spliced record class, the no-default marker. */
static PyObject *py_configure(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *unsure_cls, *encoded_cls, *missing;
    if (!PyArg_ParseTuple(args, "OOO", &unsure_cls, &encoded_cls, &missing)) return NULL;
    if (!PyType_Check(encoded_cls) || !PyExceptionClass_Check(unsure_cls)) {
        PyErr_SetString(PyExc_TypeError, "configure(Unsure: exception class, Encoded: type, MISSING)");
        return NULL;
    }
    Py_XSETREF(Unsure, Py_NewRef(unsure_cls));
    Py_XSETREF(Encoded, (PyTypeObject *)Py_NewRef(encoded_cls));
    Py_XSETREF(Missing, Py_NewRef(missing));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"write", (PyCFunction)(void (*)(void))py_write, METH_FASTCALL, "write(record_plan, record, out)"},
    {"read", (PyCFunction)(void (*)(void))py_read, METH_FASTCALL, "read(record_plan, data, pos) -> (record, end)"},
    {"configure", py_configure, METH_VARARGS, "configure(Unsure, Encoded, MISSING)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avro_native",
                                    "Avro binary writing and reading over planned schemas (see native_writer.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__avro_native(void) {
    str_body = PyUnicode_InternFromString("body");
    str_type_name = PyUnicode_InternFromString("type_name");
    if (str_body == NULL || str_type_name == NULL) return NULL;
    return PyModule_Create(&module);
}
