/* View arithmetic: shape + strides + offset. Pure functions, no allocation; each checks its
 * arguments and reports a typed status with a detail message. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

int tg_format_shape(char *dst, size_t cap, const tg_view *v) {
    size_t n = (size_t)snprintf(dst, cap, "[");
    for (int32_t i = 0; i < v->ndim && n < cap; i++)
        n += (size_t)snprintf(dst + n, cap - n, "%s%lld", i ? ", " : "", (long long)v->shape[i]);
    if (n < cap) n += (size_t)snprintf(dst + n, cap - n, "]");
    return (int)n;
}

static tgrad_status check_ndim(int32_t ndim, const char *what) {
    if (ndim < 0 || ndim > TGRAD_MAX_DIMS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: ndim %d outside 0..%d", what, ndim, TGRAD_MAX_DIMS);
    return TGRAD_OK;
}

/* The one size rule for a shape (numpy's, for 2-byte elements): 2 times the product of the
 * non-zero extents fits in int64. Every view a handle holds obeys it, so that the element count,
 * the byte count, every contiguous stride and every product of some of the extents fit in int64
 * and can be computed without checks. An extent of 0 does not lift the rule: the contiguous
 * strides of [INT64_MAX, 0, INT64_MAX] would overflow. Extents must be >= 0. */
static tgrad_status check_size(int32_t ndim, const int64_t *shape, int64_t *numel, const char *what) {
    int64_t product = 1, bytes;
    bool empty = false;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] == 0) empty = true;
        else if (tg_mul_ovf(product, shape[i], &product))
            return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "%s: element count overflows 64 bits", what);
    }
    if (tg_mul_ovf(product, 2, &bytes))
        return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "%s: byte count overflows 64 bits", what);
    *numel = empty ? 0 : product;
    return TGRAD_OK;
}

tgrad_status tg_view_contiguous(int32_t ndim, const int64_t *shape, tg_view *out) {
    tgrad_status s = check_ndim(ndim, "shape");
    if (s) return s;
    tg_view v = { .ndim = ndim };
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "shape: extent %lld of axis %d is negative",
                           (long long)shape[i], i);
        v.shape[i] = shape[i];
    }
    int64_t numel;
    if ((s = check_size(ndim, shape, &numel, "shape"))) return s;
    int64_t stride = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        v.strides[i] = stride;
        stride *= shape[i] ? shape[i] : 1; /* cannot overflow: a product of non-zero extents (check_size) */
    }
    *out = v;
    return TGRAD_OK;
}

/* Can axis i be merged into axis i + 1 for this view (one stride walks both)? */
static bool merges(const tg_view *v, int32_t i) {
    return v->strides[i] == v->strides[i + 1] * v->shape[i + 1];
}

static void drop_axis(tg_view *v, int32_t i, bool merge) {
    if (merge) v->shape[i + 1] *= v->shape[i]; /* the merged axis steps by the inner stride */
    for (int32_t j = i; j + 1 < v->ndim; j++) v->shape[j] = v->shape[j + 1], v->strides[j] = v->strides[j + 1];
    v->ndim--;
}

void tg_views_coalesce(tg_view *const *views, int32_t n) {
    const tg_view *shape = views[0];
    for (int32_t i = shape->ndim - 1; i >= 0; i--)
        if (shape->shape[i] == 1)
            for (int32_t v = n - 1; v >= 0; v--) drop_axis(views[v], i, false);
    for (int32_t i = shape->ndim - 2; i >= 0; i--) {
        bool all = true;
        for (int32_t v = 0; v < n && all; v++) all = merges(views[v], i);
        if (all)
            for (int32_t v = n - 1; v >= 0; v--) drop_axis(views[v], i, true);
    }
}

tgrad_status tg_view_numel(const tg_view *v, int64_t *numel) {
    return check_size(v->ndim, v->shape, numel, "view");
}

int64_t tg_view_element_offset(const tg_view *v, int64_t lin) {
    int64_t at = v->offset;
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        at += (lin % v->shape[d]) * v->strides[d];
        lin /= v->shape[d];
    }
    return at;
}

bool tg_view_is_compact_rowmajor(const tg_view *v) {
    int64_t expect = 1;
    for (int32_t i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] == 0) return true;
        if (v->shape[i] != 1 && v->strides[i] != expect) return false;
        expect *= v->shape[i]; /* a product of non-zero extents: fits (check_size) */
    }
    return true;
}

static tgrad_status norm_axis(int32_t axis, int32_t ndim, const char *what, int32_t *out) {
    int32_t a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= ndim)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "%s: axis %d is out of range for %d dimensions",
                       what, axis, ndim);
    *out = a;
    return TGRAD_OK;
}

tgrad_status tg_view_transpose(const tg_view *v, int32_t axis0, int32_t axis1, tg_view *out) {
    int32_t a = 0, b = 0;
    tgrad_status s = norm_axis(axis0, v->ndim, "transpose", &a);
    if (!s) s = norm_axis(axis1, v->ndim, "transpose", &b);
    if (s) return s;
    tg_view r = *v;
    r.shape[a] = v->shape[b], r.strides[a] = v->strides[b];
    r.shape[b] = v->shape[a], r.strides[b] = v->strides[a];
    *out = r;
    return TGRAD_OK;
}

tgrad_status tg_view_permute(const tg_view *v, const int32_t *axes, int32_t naxes, tg_view *out) {
    if (naxes != v->ndim)
        return tg_fail(TGRAD_ERR_BAD_PERMUTATION, "permute: %d axes given for a tensor of %d dimensions",
                       naxes, v->ndim);
    bool seen[TGRAD_MAX_DIMS] = { false };
    tg_view r = *v;
    for (int32_t i = 0; i < naxes; i++) {
        int32_t a = axes[i] < 0 ? axes[i] + v->ndim : axes[i];
        if (a < 0 || a >= v->ndim || seen[a])
            return tg_fail(TGRAD_ERR_BAD_PERMUTATION, "permute: axis %d %s", axes[i],
                           (a < 0 || a >= v->ndim) ? "is out of range" : "is repeated");
        seen[a] = true;
        r.shape[i] = v->shape[a];
        r.strides[i] = v->strides[a];
    }
    *out = r;
    return TGRAD_OK;
}

tgrad_status tg_view_expand(const tg_view *v, const int64_t *shape, int32_t ndim, tg_view *out) {
    tgrad_status s = check_ndim(ndim, "expand");
    if (s) return s;
    if (ndim < v->ndim)
        return tg_fail(TGRAD_ERR_BAD_EXPAND, "expand: %d dimensions requested for a tensor of %d",
                       ndim, v->ndim);
    tg_view r = { .ndim = ndim, .offset = v->offset };
    int32_t lead = ndim - v->ndim;
    for (int32_t i = 0; i < ndim; i++) {
        int64_t want = shape[i];
        if (i < lead) {
            if (want < 0)
                return tg_fail(TGRAD_ERR_BAD_EXPAND, "expand: new leading axis %d needs an extent >= 0, got %lld",
                               i, (long long)want);
            r.shape[i] = want, r.strides[i] = 0;
            continue;
        }
        int64_t have = v->shape[i - lead];
        if (want == -1 || want == have) {
            r.shape[i] = have, r.strides[i] = v->strides[i - lead];
        } else if (have == 1 && want >= 0) {
            r.shape[i] = want, r.strides[i] = 0;
        } else {
            return tg_fail(TGRAD_ERR_BAD_EXPAND, "expand: axis %d has extent %lld, cannot expand to %lld (only size-1 axes expand)",
                           i, (long long)have, (long long)want);
        }
    }
    int64_t numel;
    if ((s = check_size(r.ndim, r.shape, &numel, "expand"))) return s;
    *out = r;
    return TGRAD_OK;
}

tgrad_status tg_view_slice(const tg_view *v, int32_t axis, int64_t start, int64_t stop, int64_t step,
                           uint32_t flags, tg_view *out) {
    int32_t a = 0;
    tgrad_status s = norm_axis(axis, v->ndim, "slice", &a);
    if (s) return s;
    if (flags & ~(uint32_t)(TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "slice: unknown flags 0x%x", flags);
    if (step == 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "slice: step cannot be zero");
    if (step == INT64_MIN) return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "slice: step overflows");
    int64_t len = v->shape[a];
    /* numpy / CPython PySlice_AdjustIndices semantics */
    if (flags & TGRAD_SLICE_START_NONE) {
        start = step < 0 ? len - 1 : 0;
    } else if (start < 0) {
        start = start < -len ? (step < 0 ? -1 : 0) : start + len;
    } else if (start >= len) {
        start = step < 0 ? len - 1 : len;
    }
    if (flags & TGRAD_SLICE_STOP_NONE) {
        stop = step < 0 ? -1 : len;
    } else if (stop < 0) {
        stop = stop < -len ? (step < 0 ? -1 : 0) : stop + len;
    } else if (stop >= len) {
        stop = step < 0 ? len - 1 : len;
    }
    /* start and stop now lie in [-1, len], so stop - start - 1 and start - stop - 1 are below len,
     * and -step fits (step != INT64_MIN): the count needs no checks. */
    int64_t count = 0;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
    tg_view r = *v;
    r.strides[a] = v->strides[a]; /* with 0 or 1 element the stride is never used */
    if (count > 0) {
        int64_t off;
        if (tg_mul_ovf(start, v->strides[a], &off) || tg_add_ovf(r.offset, off, &r.offset) ||
            (count > 1 && tg_mul_ovf(v->strides[a], step, &r.strides[a])))
            return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "slice: stride arithmetic overflows");
    }
    r.shape[a] = count;
    *out = r;
    return TGRAD_OK;
}

tgrad_status tg_view_select(const tg_view *v, int32_t axis, int64_t index, tg_view *out) {
    int32_t a = 0;
    tgrad_status s = norm_axis(axis, v->ndim, "index", &a);
    if (s) return s;
    int64_t len = v->shape[a];
    int64_t i = index < 0 ? index + len : index;
    if (i < 0 || i >= len)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "index %lld is out of range for axis %d with extent %lld",
                       (long long)index, axis, (long long)len);
    /* An empty view's strides and offset are arbitrary (nothing is read through them), so the new
     * offset is checked; for a view with elements it lies inside the buffer. */
    tg_view r = { .ndim = v->ndim - 1 };
    int64_t off;
    if (tg_mul_ovf(i, v->strides[a], &off) || tg_add_ovf(v->offset, off, &r.offset))
        return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "index: offset arithmetic overflows");
    for (int32_t d = 0, o = 0; d < v->ndim; d++) {
        if (d == a) continue;
        r.shape[o] = v->shape[d], r.strides[o] = v->strides[d], o++;
    }
    *out = r;
    return TGRAD_OK;
}

tgrad_status tg_view_resolve_shape(const tg_view *v, const int64_t *shape, int32_t ndim, int64_t *resolved) {
    tgrad_status s = check_ndim(ndim, "reshape");
    if (s) return s;
    int64_t numel = 0, known = 1;
    if ((s = tg_view_numel(v, &numel))) return s;
    int32_t infer = -1;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return tg_fail(TGRAD_ERR_BAD_RESHAPE, "reshape: only one extent may be -1");
            infer = i;
            continue;
        }
        if (shape[i] < 0)
            return tg_fail(TGRAD_ERR_BAD_RESHAPE, "reshape: extent %lld is negative", (long long)shape[i]);
        if (tg_mul_ovf(known, shape[i], &known))
            return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "reshape: element count overflows 64 bits");
        resolved[i] = shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return tg_fail(TGRAD_ERR_BAD_RESHAPE, "reshape: cannot infer -1 for %lld elements",
                           (long long)numel);
        resolved[infer] = numel / known;
        known = numel;
    }
    if (known != numel) {
        char from[160];
        tg_format_shape(from, sizeof from, v);
        return tg_fail(TGRAD_ERR_BAD_RESHAPE, "reshape: %s holds %lld elements, new shape holds %lld",
                       from, (long long)numel, (long long)known);
    }
    return check_size(ndim, resolved, &known, "reshape"); /* an empty shape's other extents too */
}

/* Express a new shape with strides over the same elements, when the old view's axes can be
 * grouped into runs that are each laid out like a compact block. Walk both shapes from the last
 * axis: each run of old axes whose strides chain (stride[d-1] == extent*stride[d]) is one
 * contiguous chunk, and the new axes that multiply to the chunk's size take strides inside it.
 * `shape` has been through tg_view_resolve_shape (it obeys the size rule, with v's element count).
 * Runs are products of some extents (they fit); a run times its chunk's stride is at most twice
 * the chunk's span inside a buffer of at most INT64_MAX / 2 elements, so it fits too, but it is
 * checked anyway: an overflow answers "not expressible". */
tgrad_status tg_view_reshape_nocopy(const tg_view *v, const int64_t *shape, int32_t ndim, tg_view *out) {
    tg_view r = { .ndim = ndim, .offset = v->offset };
    for (int32_t i = 0; i < ndim; i++) r.shape[i] = shape[i];
    int64_t numel;
    tg_view_numel(v, &numel);
    if (numel == 0 || v->ndim == 0) { /* no element or a single one: any strides do */
        tg_view c;
        if (tg_view_contiguous(ndim, shape, &c)) return TGRAD_ERR_VIEW_NOT_EXPRESSIBLE; /* not for a resolved shape */
        for (int32_t i = 0; i < ndim; i++) r.strides[i] = c.strides[i];
        *out = r;
        return TGRAD_OK;
    }
    int32_t nd = ndim - 1;
    int64_t base = v->strides[v->ndim - 1], old_run = 1, new_run = 1, chained;
    for (int32_t od = v->ndim - 1; od >= 0; od--) {
        old_run *= v->shape[od];
        bool chunk_ends = od == 0 ||
            (v->shape[od - 1] != 1 && (tg_mul_ovf(old_run, base, &chained) || v->strides[od - 1] != chained));
        if (!chunk_ends) continue;
        while (nd >= 0 && (new_run < old_run || r.shape[nd] == 1)) {
            if (tg_mul_ovf(new_run, base, &r.strides[nd])) return TGRAD_ERR_VIEW_NOT_EXPRESSIBLE;
            new_run *= r.shape[nd];
            nd--;
        }
        if (new_run != old_run) return TGRAD_ERR_VIEW_NOT_EXPRESSIBLE;
        if (od > 0) { base = v->strides[od - 1]; old_run = 1; new_run = 1; }
    }
    if (nd != -1) return TGRAD_ERR_VIEW_NOT_EXPRESSIBLE;
    *out = r;
    return TGRAD_OK;
}

tgrad_status tg_view_matmul(const tg_view *a, const tg_view *b, const char *fn, tg_view *out) {
    tgrad_status s = TGRAD_OK;
    if (a->ndim == 2 && b->ndim == 2 && a->shape[1] == b->shape[0]) {
        int64_t shape[2] = { a->shape[0], b->shape[1] };
        if (!(s = tg_view_contiguous(2, shape, out))) return TGRAD_OK;
    }
    char sa[160], sb[160]; /* the shapes are formatted for the message only: a matmul is made often */
    tg_format_shape(sa, sizeof sa, a);
    tg_format_shape(sb, sizeof sb, b);
    if (a->ndim != 2 || b->ndim != 2)
        return tg_fail(TGRAD_ERR_RANK_MISMATCH, "%s: %s @ %s: both operands must be 2-D (got %d-D and %d-D)", fn, sa,
                       sb, a->ndim, b->ndim);
    if (a->shape[1] != b->shape[0])
        return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: %s @ %s: inner dimensions %lld and %lld differ", fn, sa, sb,
                       (long long)a->shape[1], (long long)b->shape[0]);
    return tg_fail(s, "%s: %s @ %s: the result's size overflows 64 bits", fn, sa, sb);
}

/* torch.matmul's shape rule (internal.h, tg_matmul_views). */
tgrad_status tg_view_matmul_batched(const tg_view *a, const tg_view *b, const char *fn, tg_matmul_views *mv) {
    char sa[160], sb[160];
    if (a->ndim < 1 || b->ndim < 1) {
        tg_format_shape(sa, sizeof sa, a);
        tg_format_shape(sb, sizeof sb, b);
        return tg_fail(TGRAD_ERR_RANK_MISMATCH, "%s: %s @ %s: both operands need at least 1 dimension (got %d-D and %d-D)",
                       fn, sa, sb, a->ndim, b->ndim);
    }
    /* 1-D operands as matrices: [K] as [1, K] on the left, as [K, 1] on the right */
    tg_view pa = *a, pb = *b;
    if (a->ndim == 1) pa = (tg_view){ .ndim = 2, .shape = { 1, a->shape[0] }, .strides = { 0, a->strides[0] }, .offset = a->offset };
    if (b->ndim == 1) pb = (tg_view){ .ndim = 2, .shape = { b->shape[0], 1 }, .strides = { b->strides[0], 0 }, .offset = b->offset };
    int64_t M = pa.shape[pa.ndim - 2], K = pa.shape[pa.ndim - 1], N = pb.shape[pb.ndim - 1];
    int32_t nd = pa.ndim > pb.ndim ? pa.ndim : pb.ndim, la = nd - pa.ndim, lb = nd - pb.ndim;
    int64_t shape[TGRAD_MAX_DIMS];
    bool broadcasts = true;
    for (int32_t i = 0; i < nd - 2; i++) { /* the batch axes, aligned at the right (numpy's rule) */
        int64_t ea = i < la ? 1 : pa.shape[i - la], eb = i < lb ? 1 : pb.shape[i - lb];
        if (ea != eb && ea != 1 && eb != 1) broadcasts = false;
        shape[i] = ea == 1 ? eb : ea;
    }
    if (!broadcasts || K != pb.shape[pb.ndim - 2]) {
        tg_format_shape(sa, sizeof sa, a);
        tg_format_shape(sb, sizeof sb, b);
        if (!broadcasts)
            return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: %s @ %s: batch dimensions do not broadcast", fn, sa, sb);
        return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: %s @ %s: inner dimensions %lld and %lld differ", fn, sa, sb,
                       (long long)K, (long long)pb.shape[pb.ndim - 2]);
    }
    shape[nd - 2] = M, shape[nd - 1] = N;
    tgrad_status s = tg_view_contiguous(nd, shape, &mv->out);
    if (s) {
        tg_format_shape(sa, sizeof sa, a);
        tg_format_shape(sb, sizeof sb, b);
        return tg_fail(s, "%s: %s @ %s: the result's size overflows 64 bits", fn, sa, sb);
    }
    /* the operands read as [batch..., M, K] and [batch..., K, N]: stride 0 along a broadcast axis */
    tg_view *ops[2] = { &mv->a, &mv->b };
    const tg_view *src[2] = { &pa, &pb };
    for (int32_t o = 0; o < 2; o++) {
        const tg_view *v = src[o];
        int32_t lead = nd - v->ndim;
        *ops[o] = (tg_view){ .ndim = nd, .offset = v->offset };
        for (int32_t i = 0; i < nd; i++) {
            bool batch = i < nd - 2;
            ops[o]->shape[i] = batch ? shape[i] : v->shape[i - lead];
            ops[o]->strides[i] = i < lead || (batch && v->shape[i - lead] == 1) ? 0 : v->strides[i - lead];
        }
    }
    /* the result without the axes the 1-D operands added (the same compact elements) */
    int64_t rshape[TGRAD_MAX_DIMS];
    int32_t rn = 0;
    for (int32_t i = 0; i < nd; i++)
        if (!(i == nd - 2 && a->ndim == 1) && !(i == nd - 1 && b->ndim == 1)) rshape[rn++] = shape[i];
    tg_view_contiguous(rn, rshape, &mv->result); /* fewer extents of the same product: fits */
    return TGRAD_OK;
}
