/* tgrad._native: the hot path of tgrad.Tensor in C (docs/performance.md, "The call path").
 *
 * TensorBase holds what a Tensor is at run time (a libtgrad handle, the shape tuple when known, a
 * weak-reference list) and does the few things a small product spends its time on outside the
 * library: `a @ b`, realize(), numpy() into a bfloat16 array, and releasing the handle when the
 * object dies. Everything else about Tensor stays Python (tensor.py), and so does every uncommon
 * case here: a released handle, a dtype given to numpy(), a product while tgrad.trace records,
 * each goes to the same method of tgrad._tensor_base.PythonTensorBase, the pure-Python twin of
 * this type (used where this module is not built, or with TGRAD_NATIVE=0).
 *
 * No link to libtgrad: bind() receives the addresses of four functions of the library cffi loaded
 * (TGRAD_LIB, the wheel's copy, ...), so both paths always talk to one library. Statuses become
 * exceptions through the binding's one `_check`. The stable ABI (3.11): one build serves every
 * CPython from 3.11. The GIL is released around each libtgrad call, as cffi does.
 */
#ifndef Py_LIMITED_API /* meson's limited_api : '3.11' defines it */
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t handle_t;
typedef int32_t (*matmul_fn)(handle_t, handle_t, handle_t *);
typedef int32_t (*read_fn)(handle_t, uint16_t *, size_t);
typedef int32_t (*handle_fn)(handle_t);

typedef struct {
    PyObject_HEAD
    handle_t handle;
    PyObject *shape; /* a tuple of ints once known, else NULL or None */
    PyObject *grad;  /* Tensor.grad (tgrad.autograd): NULL or None until a backward pass sets it */
    PyObject *weakrefs;
} TensorBase;

/* What bind() gave: the library's functions and the Python objects the slow paths need. Set once
 * (a second bind() replaces them, for tests); read with the GIL held. */
static struct {
    matmul_fn matmul;
    read_fn read_bf16;
    handle_fn realize, release;
    PyTypeObject *result;   /* tgrad.Tensor: what `a @ b` makes */
    PyObject *library;      /* cffi's library object, kept alive while handles may be released */
    PyObject *check;        /* tgrad.errors._check */
    PyObject *empty;        /* numpy.empty */
    PyObject *bf16;         /* tgrad._bf16.dtype: called once, on the first numpy() */
    PyObject *bf16_dtype;
    PyObject *recorder_get; /* the tgrad.trace ContextVar's get */
    PyObject *slow_matmul, *slow_numpy, *slow_realize; /* PythonTensorBase's methods */
} bound;

static PyTypeObject *base_type;

static PyObject *raise_status(int32_t status) {
    PyObject *r = PyObject_CallFunction(bound.check, "i", (int)status);
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "tgrad: status %d raised nothing", (int)status);
    return NULL;
}

static int is_tensor(PyObject *x) { return PyObject_TypeCheck(x, base_type); }

/* 0 once bind() ran; -1 with RuntimeError before (only a direct use of this module gets here). */
static int bound_yet(void) {
    if (bound.result)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "tgrad._native: bind() has not run (import tgrad instead)");
    return -1;
}

/* 1 while tgrad.trace records in this context, 0 if not, -1 with an exception. */
static int recording(void) {
    PyObject *r = PyObject_CallNoArgs(bound.recorder_get);
    if (!r)
        return -1;
    int on = r != Py_None;
    Py_DECREF(r);
    return on;
}

/* (M, N) from [M, K] and [K, N] when both shapes are known tuples; NULL (unknown) otherwise. */
static PyObject *product_shape(PyObject *sa, PyObject *sb) {
    if (!sa || !sb || !PyTuple_Check(sa) || !PyTuple_Check(sb) || PyTuple_Size(sa) != 2 ||
        PyTuple_Size(sb) != 2)
        return NULL;
    return PyTuple_Pack(2, PyTuple_GetItem(sa, 0), PyTuple_GetItem(sb, 1));
}

static PyObject *tensor_matmul(PyObject *a, PyObject *b) {
    if (!is_tensor(a) || !is_tensor(b))
        Py_RETURN_NOTIMPLEMENTED;
    TensorBase *ta = (TensorBase *)a, *tb = (TensorBase *)b;
    if (bound_yet() < 0)
        return NULL;
    int rec = recording();
    if (rec < 0)
        return NULL;
    if (rec || !ta->handle || !tb->handle)
        return PyObject_CallFunctionObjArgs(bound.slow_matmul, a, b, NULL);
    handle_t out = 0;
    int32_t status;
    Py_BEGIN_ALLOW_THREADS
    status = bound.matmul(ta->handle, tb->handle, &out);
    Py_END_ALLOW_THREADS
    if (status)
        return raise_status(status);
    allocfunc alloc = (allocfunc)PyType_GetSlot(bound.result, Py_tp_alloc);
    TensorBase *c = (TensorBase *)alloc(bound.result, 0);
    if (!c) {
        bound.release(out);
        return NULL;
    }
    c->handle = out; /* owned by c from here: its dealloc releases it */
    c->shape = product_shape(ta->shape, tb->shape);
    if (!c->shape && PyErr_Occurred()) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static PyObject *tensor_realize(PyObject *self, PyObject *unused) {
    (void)unused;
    TensorBase *t = (TensorBase *)self;
    if (bound_yet() < 0)
        return NULL;
    if (!t->handle)
        return PyObject_CallFunctionObjArgs(bound.slow_realize, self, NULL);
    int32_t status;
    Py_BEGIN_ALLOW_THREADS
    status = bound.realize(t->handle);
    Py_END_ALLOW_THREADS
    if (status)
        return raise_status(status);
    Py_INCREF(self);
    return self;
}

/* numpy(): a new bfloat16 array of the values (the one default); numpy(dtype) is Python's. */
static PyObject *read_bf16_array(TensorBase *t) {
    if (!bound.bf16_dtype && !(bound.bf16_dtype = PyObject_CallNoArgs(bound.bf16)))
        return NULL;
    PyObject *shape = t->shape && t->shape != Py_None ? (Py_INCREF(t->shape), t->shape)
                                                     : PyObject_GetAttrString((PyObject *)t, "shape");
    if (!shape)
        return NULL;
    PyObject *array = PyObject_CallFunctionObjArgs(bound.empty, shape, bound.bf16_dtype, NULL);
    Py_DECREF(shape);
    if (!array) {
        /* numpy's MemoryError: the Python method raises tgrad's OutOfMemoryError instead */
        if (!PyErr_ExceptionMatches(PyExc_MemoryError))
            return NULL;
        PyErr_Clear();
        return PyObject_CallFunctionObjArgs(bound.slow_numpy, (PyObject *)t, NULL);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(array, &view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(array);
        return NULL;
    }
    int32_t status;
    Py_BEGIN_ALLOW_THREADS
    status = bound.read_bf16(t->handle, (uint16_t *)view.buf, (size_t)view.len / 2);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (status) {
        Py_DECREF(array);
        if (status == 10) /* TGRAD_ERR_DTYPE_UNSUPPORTED: a float32 or int32 tensor, read by Python */
            return PyObject_CallFunctionObjArgs(bound.slow_numpy, (PyObject *)t, NULL);
        return raise_status(status);
    }
    return array;
}

static PyObject *tensor_numpy(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    TensorBase *t = (TensorBase *)self;
    if (bound_yet() < 0)
        return NULL;
    int plain = nargs == 0 && (!kwnames || PyTuple_Size(kwnames) == 0);
    if (!plain && nargs == 1 && !kwnames && args[0] == Py_None)
        plain = 1;
    if (plain && t->handle)
        return read_bf16_array(t);
    /* anything else (a dtype, a keyword, a released handle): the Python method, same arguments */
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    PyObject *pos = PyTuple_New(nargs + 1);
    if (!pos)
        return NULL;
    Py_INCREF(self);
    PyTuple_SetItem(pos, 0, self);
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SetItem(pos, i + 1, args[i]);
    }
    PyObject *kw = NULL;
    if (nkw) {
        if (!(kw = PyDict_New())) {
            Py_DECREF(pos);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < nkw; i++)
            if (PyDict_SetItem(kw, PyTuple_GetItem(kwnames, i), args[nargs + i]) < 0) {
                Py_DECREF(pos);
                Py_DECREF(kw);
                return NULL;
            }
    }
    PyObject *r = PyObject_Call(bound.slow_numpy, pos, kw);
    Py_DECREF(pos);
    Py_XDECREF(kw);
    return r;
}

static void tensor_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    TensorBase *t = (TensorBase *)self;
    if (t->weakrefs)
        PyObject_ClearWeakRefs(self);
    handle_t h = t->handle;
    t->handle = 0;
    if (h && bound.release)
        bound.release(h); /* a status here has no one to go to (as in __del__) */
    Py_CLEAR(t->shape);
    Py_CLEAR(t->grad);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(self);
    Py_DECREF(type);
}

static PyMemberDef tensor_members[] = {
    {"_handle", T_ULONGLONG, offsetof(TensorBase, handle), 0, "the libtgrad handle (0 once released)"},
    {"_shape", T_OBJECT, offsetof(TensorBase, shape), 0, "the shape when known, else None"},
    {"_grad", T_OBJECT, offsetof(TensorBase, grad), 0, "Tensor.grad: the gradient a backward pass left, else None"},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(TensorBase, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef tensor_methods[] = {
    {"realize", tensor_realize, METH_NOARGS,
     "realize($self, /)\n--\n\nCompute a lazy tensor now (no-op when realized); returns self."},
    {"numpy", (PyCFunction)(void (*)(void))tensor_numpy, METH_FASTCALL | METH_KEYWORDS,
     "numpy($self, /, dtype=None)\n--\n\nA new numpy array of the values: ml_dtypes.bfloat16 by "
     "default, or float32 (exact)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_doc, "The hot path of tgrad.Tensor (its base class): handle, shape, @, realize, numpy."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_members, tensor_members},
    {Py_tp_methods, tensor_methods},
    {Py_nb_matrix_multiply, tensor_matmul},
    {0, NULL},
};

static PyType_Spec tensor_spec = {
    .name = "tgrad._native.TensorBase",
    .basicsize = sizeof(TensorBase),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = tensor_slots,
};

static void *address(PyObject *value) {
    void *p = PyLong_AsVoidPtr(value);
    if (!p && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "bind: a function address is NULL");
    return p;
}

static void keep(PyObject **slot, PyObject *value) {
    PyObject *old = *slot;
    Py_INCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

static int keep_method(PyObject **slot, PyObject *owner, const char *name) {
    PyObject *m = PyObject_GetAttrString(owner, name);
    if (!m)
        return -1;
    keep(slot, m);
    Py_DECREF(m);
    return 0;
}

/* bind(result, fallback, library, addresses, check, empty, bf16, recorder_get)
 * addresses: (tgrad_matmul, tgrad_tensor_read_bf16, tgrad_tensor_realize, tgrad_tensor_release). */
static PyObject *bind(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *result, *fallback, *library, *check, *empty, *bf16, *recorder_get;
    PyObject *m, *r, *z, *l;
    if (!PyArg_ParseTuple(args, "OOO(OOOO)OOOO:bind", &result, &fallback, &library, &m, &r, &z, &l,
                          &check, &empty, &bf16, &recorder_get))
        return NULL;
    if (!PyType_Check(result) || !PyType_IsSubtype((PyTypeObject *)result, base_type)) {
        PyErr_SetString(PyExc_TypeError, "bind: result must be a subclass of TensorBase");
        return NULL;
    }
    void *pm = address(m), *pr = pm ? address(r) : NULL, *pz = pr ? address(z) : NULL;
    void *pl = pz ? address(l) : NULL;
    if (!pl)
        return NULL;
    if (keep_method(&bound.slow_matmul, fallback, "__matmul__") < 0 ||
        keep_method(&bound.slow_numpy, fallback, "numpy") < 0 ||
        keep_method(&bound.slow_realize, fallback, "realize") < 0)
        return NULL;
    keep((PyObject **)&bound.result, result);
    keep(&bound.library, library);
    keep(&bound.check, check);
    keep(&bound.empty, empty);
    keep(&bound.bf16, bf16);
    keep(&bound.recorder_get, recorder_get);
    Py_CLEAR(bound.bf16_dtype);
    bound.matmul = (matmul_fn)pm;
    bound.read_bf16 = (read_fn)pr;
    bound.realize = (handle_fn)pz;
    bound.release = (handle_fn)pl;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(result, fallback, library, addresses, check, empty, bf16, recorder_get): connect "
     "TensorBase to the libtgrad cffi loaded (tgrad._tensor_base does this at import)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "tgrad._native", "The hot path of tgrad.Tensor in C (see tensor_base.c).",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (!module)
        return NULL;
    base_type = (PyTypeObject *)PyType_FromSpec(&tensor_spec);
    if (!base_type || PyModule_AddObject(module, "TensorBase", (PyObject *)base_type) < 0) {
        Py_XDECREF((PyObject *)base_type);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF((PyObject *)base_type); /* the module's reference went to AddObject; this one is ours */
    return module;
}
