# cython: language_level=3
"""Observation preprocessing (cuda/preprocess.h): max-pool, OpenCV-exact resize, frame stacks.

Images are uint8 numpy arrays, (H, W) or (H, W, C) with C in 1..4, C-contiguous.
"""
from cython.parallel cimport prange
from libc.stdint cimport uint8_t, int32_t
from libc.stdlib cimport malloc, free

import numpy as np

from preprocess cimport ResizePlan, resize_plan_init, resize_plan_error

cdef extern from "preprocess.h" namespace "hs::pp" nogil:
    void resize_image(const ResizePlan& p, const uint8_t* src, uint8_t* dst)
    void maxpool_resize_image(const ResizePlan& p, const uint8_t* a, const uint8_t* b,
                              uint8_t* dst)
    void c_maxpool_frames "hs::pp::maxpool_frames"(uint8_t* dst, const uint8_t* a,
                                                    const uint8_t* b, int n)
    void c_stack_push "hs::pp::stack_push"(uint8_t* stack, int n, int frame_size,
                                            const uint8_t* frame)
    void c_ring_push "hs::pp::ring_push"(uint8_t* ring, int n, int* head, int frame_size,
                                          const uint8_t* frame)
    void c_ring_observation "hs::pp::ring_observation"(const uint8_t* ring, int n, int head,
                                                        int frame_size, uint8_t* out)
    void c_palette_lookup "hs::pp::palette_lookup"(const uint8_t* table, const uint8_t* src,
                                                    uint8_t* dst, int n)
    void c_set_simd_enabled "hs_set_simd_enabled"(bint on)
    bint c_simd_available "hs_simd_available"()
    int MAX_DIM
    int INTERP_LINEAR
    int INTERP_AREA

KIND_NAMES = {0: "copy", 1: "area_2x2", 2: "area_int", 3: "area", 4: "linear"}
MAX_SIZE = MAX_DIM
INTER_LINEAR = INTERP_LINEAR  # same numbers as cv2.INTER_LINEAR / cv2.INTER_AREA
INTER_AREA = INTERP_AREA
_INTERP_BY_NAME = {"linear": INTERP_LINEAR, "area": INTERP_AREA}


def _interp_code(interpolation):
    if isinstance(interpolation, str):
        try:
            return _INTERP_BY_NAME[interpolation.lower()]
        except KeyError:
            raise ValueError(f"interpolation must be 'area' or 'linear', got {interpolation!r}")
    code = int(interpolation)
    if code not in (INTERP_LINEAR, INTERP_AREA):
        raise ValueError(f"interpolation must be INTER_AREA ({INTERP_AREA}) or "
                         f"INTER_LINEAR ({INTERP_LINEAR}), got {code}")
    return code


def _row_size(array) -> int:
    """Elements of one image of a batch: reshape(n, -1) cannot say it for n == 0."""
    return int(np.prod(array.shape[1:]))


cdef class Resizer:
    """A precomputed resize (one hs::pp::ResizePlan) for one source/destination shape.

    Resizer(src_shape, dst_size, interpolation="area"): src_shape is (H, W) or (H, W, C),
    dst_size is (height, width) (note: cv2.resize takes (width, height)).
    """
    cdef ResizePlan* plan
    cdef readonly tuple src_shape
    cdef readonly tuple dst_shape
    cdef readonly bint gray_2d

    def __cinit__(self):
        self.plan = <ResizePlan*>malloc(sizeof(ResizePlan))
        if self.plan == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.plan)

    def __init__(self, src_shape, dst_size, interpolation="area"):
        src_shape = tuple(int(v) for v in src_shape)
        if len(src_shape) not in (2, 3):
            raise ValueError(f"src_shape must be (H, W) or (H, W, C), got {src_shape}")
        dst_size = tuple(int(v) for v in dst_size)
        if len(dst_size) != 2:
            raise ValueError(f"dst_size must be (height, width), got {dst_size}")
        self.gray_2d = len(src_shape) == 2
        c = 1 if self.gray_2d else src_shape[2]
        code = _interp_code(interpolation)
        rc = resize_plan_init(self.plan, src_shape[0], src_shape[1], dst_size[0], dst_size[1],
                              c, code)
        if rc != 0:
            raise ValueError(f"cannot resize {src_shape} to {dst_size}: "
                             f"{resize_plan_error(rc).decode()}")
        self.src_shape = src_shape
        self.dst_shape = dst_size if self.gray_2d else dst_size + (c,)

    @property
    def kind(self):
        """Which OpenCV code path the plan reproduces: copy, area_2x2, area_int, area, linear."""
        return KIND_NAMES[self.plan.kind]

    @property
    def channels(self):
        return self.plan.channels

    def plan_bytes(self):
        """The hs::pp::ResizePlan as a uint8 array: upload it as is for the CUDA kernels."""
        cdef const uint8_t[::1] view = <const uint8_t[:sizeof(ResizePlan)]><const uint8_t*>self.plan
        return np.array(view, dtype=np.uint8)

    def _check(self, a, name, batch):
        """a as a C-contiguous uint8 array of shape ([N,] H, W, C); ValueError otherwise."""
        a = np.asarray(a)
        want = self.src_shape
        if batch:
            if a.dtype != np.uint8 or a.ndim != len(want) + 1 or a.shape[1:] != want:
                raise ValueError(f"{name} must be uint8 of shape (N, {', '.join(map(str, want))}), "
                                 f"got {a.dtype} {a.shape}")
            return np.ascontiguousarray(a).reshape(
                (a.shape[0], self.plan.src_h, self.plan.src_w, self.plan.channels))
        if a.dtype != np.uint8 or a.shape != want:
            raise ValueError(f"{name} must be uint8 of shape {want}, got {a.dtype} {a.shape}")
        return np.ascontiguousarray(a).reshape(
            (self.plan.src_h, self.plan.src_w, self.plan.channels))

    def _out(self, out, n=None):
        shape = self.dst_shape if n is None else (n,) + self.dst_shape
        if out is None:
            return np.empty(shape, np.uint8)
        if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != shape \
                or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous uint8 array of shape {shape}")
        return out

    def __call__(self, src, out=None):
        """resize(src) -> (dst_h, dst_w[, C]) uint8."""
        s = self._check(src, "src", False)
        out = self._out(out)
        cdef const uint8_t[:, :, ::1] sv = s       # IN
        cdef uint8_t[::1] ov = out.reshape(-1)      # OUT
        with nogil:
            resize_image(self.plan[0], &sv[0, 0, 0], &ov[0])
        return out

    def maxpool(self, a, b, out=None):
        """resize(max(a, b)) in one pass (ALE's max-pool of the last two frames, then resize)."""
        sa = self._check(a, "a", False)
        sb = self._check(b, "b", False)
        out = self._out(out)
        cdef const uint8_t[:, :, ::1] av = sa      # IN
        cdef const uint8_t[:, :, ::1] bv = sb      # IN
        cdef uint8_t[::1] ov = out.reshape(-1)     # OUT
        with nogil:
            maxpool_resize_image(self.plan[0], &av[0, 0, 0], &bv[0, 0, 0], &ov[0])
        return out

    def batch(self, src, out=None):
        """Resize a batch (N, H, W[, C]) -> (N, dst_h, dst_w[, C]), OpenMP over images."""
        s = self._check(src, "src", True)
        cdef Py_ssize_t n = s.shape[0], k
        out = self._out(out, n)
        cdef const uint8_t[:, ::1] sv = s.reshape(n, _row_size(s))  # IN
        cdef uint8_t[:, ::1] ov = out.reshape(n, _row_size(out))  # OUT
        if n == 0:
            return out
        for k in prange(n, nogil=True, schedule="static"):
            resize_image(self.plan[0], &sv[k, 0], &ov[k, 0])
        return out

    def maxpool_batch(self, a, b, out=None):
        """resize(max(a[k], b[k])) for a batch, OpenMP over images."""
        sa = self._check(a, "a", True)
        sb = self._check(b, "b", True)
        if sa.shape[0] != sb.shape[0]:
            raise ValueError(f"a and b must hold as many images, got {sa.shape[0]} and {sb.shape[0]}")
        cdef Py_ssize_t n = sa.shape[0], k
        out = self._out(out, n)
        cdef const uint8_t[:, ::1] av = sa.reshape(n, _row_size(sa))  # IN
        cdef const uint8_t[:, ::1] bv = sb.reshape(n, _row_size(sb))  # IN
        cdef uint8_t[:, ::1] ov = out.reshape(n, _row_size(out))  # OUT
        if n == 0:
            return out
        for k in prange(n, nogil=True, schedule="static"):
            maxpool_resize_image(self.plan[0], &av[k, 0], &bv[k, 0], &ov[k, 0])
        return out

    def __repr__(self):
        return (f"Resizer({self.src_shape} -> {self.dst_shape}, "
                f"{'area' if self.plan.interp == INTERP_AREA else 'linear'}, kind={self.kind})")


def resize(src, dst_size, interpolation="area"):
    """cv2.resize(src, (w, h), interpolation=INTER_AREA or INTER_LINEAR), bit for bit.

    dst_size is (height, width). src is uint8 (H, W) or (H, W, C), C in 1..4.
    """
    s = np.asarray(src)
    if s.dtype != np.uint8 or s.ndim not in (2, 3):
        raise ValueError(f"src must be a uint8 array of shape (H, W) or (H, W, C), "
                         f"got {s.dtype} {s.shape}")
    return Resizer(s.shape, dst_size, interpolation)(s)


def maxpool(a, b, out=None):
    """Elementwise max of two uint8 frames of the same shape."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.dtype != np.uint8 or b.dtype != np.uint8:
        raise ValueError(f"a and b must be uint8, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"b must have the shape of a {a.shape}, got {b.shape}")
    if out is None:
        out = np.empty(a.shape, np.uint8)
    elif out.dtype != np.uint8 or out.shape != a.shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous uint8 array of shape {a.shape}")
    if a.size == 0:
        return out
    cdef const uint8_t[::1] av = a.reshape(-1)   # IN
    cdef const uint8_t[::1] bv = b.reshape(-1)   # IN
    cdef uint8_t[::1] ov = out.reshape(-1)       # OUT
    with nogil:
        c_maxpool_frames(&ov[0], &av[0], &bv[0], <int>av.shape[0])
    return out


def _stack_views(stack, frame, name="stack"):
    if not isinstance(stack, np.ndarray) or stack.dtype != np.uint8 or stack.ndim < 2 \
            or not stack.flags.c_contiguous:
        raise ValueError(f"{name} must be a C-contiguous uint8 array of shape (n, *frame_shape)")
    frame = np.ascontiguousarray(frame)
    if frame.dtype != np.uint8 or frame.shape != stack.shape[1:]:
        raise ValueError(f"frame must be uint8 of shape {stack.shape[1:]}, got {frame.dtype} {frame.shape}")
    return frame


def stack_push(stack, frame):
    """Shifted stack (n, *frame_shape), oldest first: drop frame 0, append frame. In place."""
    frame = _stack_views(stack, frame)
    cdef int n = stack.shape[0]
    cdef int fs = frame.size
    if fs == 0:
        return stack
    cdef uint8_t[::1] sv = stack.reshape(-1)      # IN/OUT
    cdef const uint8_t[::1] fv = frame.reshape(-1)  # IN
    with nogil:
        c_stack_push(&sv[0], n, fs, &fv[0])
    return stack


def ring_push(ring, int head, frame):
    """ALE's ring (n, *frame_shape): write frame into slot head; returns the new head."""
    frame = _stack_views(ring, frame, "ring")
    cdef int n = ring.shape[0]
    if not 0 <= head < n:
        raise ValueError(f"head must be in 0..{n - 1}, got {head}")
    cdef int fs = frame.size
    cdef int h = head
    if fs == 0:
        return (head + 1) % n
    cdef uint8_t[::1] rv = ring.reshape(-1)        # IN/OUT
    cdef const uint8_t[::1] fv = frame.reshape(-1)  # IN
    with nogil:
        c_ring_push(&rv[0], n, &h, fs, &fv[0])
    return h


def ring_observation(ring, int head, out=None):
    """The ring read oldest first (from slot head): the observation ALE returns."""
    if not isinstance(ring, np.ndarray) or ring.dtype != np.uint8 or ring.ndim < 2 \
            or not ring.flags.c_contiguous:
        raise ValueError("ring must be a C-contiguous uint8 array of shape (n, *frame_shape)")
    cdef int n = ring.shape[0]
    if not 0 <= head < n:
        raise ValueError(f"head must be in 0..{n - 1}, got {head}")
    if out is None:
        out = np.empty(ring.shape, np.uint8)
    elif out.dtype != np.uint8 or out.shape != ring.shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous uint8 array of shape {ring.shape}")
    cdef int fs = ring[0].size
    if fs == 0:
        return out
    cdef const uint8_t[::1] rv = ring.reshape(-1)  # IN
    cdef uint8_t[::1] ov = out.reshape(-1)         # OUT
    with nogil:
        c_ring_observation(&rv[0], n, head, fs, &ov[0])
    return out


def set_simd(on):
    """Turn this module's AVX2 fast paths (area resize of one channel, palette lookup) on
    or off; returns whether they are now in use (False on CPUs without AVX2). For tests
    and benchmarks: both paths give the same bytes."""
    c_set_simd_enabled(bool(on))
    return bool(c_simd_available())


def palette_lookup(table, src, out=None):
    """out[i] = table[src[i]] for a 256-byte table (the vector env's gray capture)."""
    t = np.ascontiguousarray(table, dtype=np.uint8).reshape(-1)
    if t.size != 256:
        raise ValueError(f"palette_lookup: table must have 256 entries, got {t.size}")
    s = np.ascontiguousarray(src)
    if s.dtype != np.uint8:
        raise ValueError(f"palette_lookup: src must be uint8, got {s.dtype}")
    if out is None:
        out = np.empty_like(s)
    elif out.shape != s.shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
        raise ValueError(f"palette_lookup: out must be C-contiguous uint8 of shape {s.shape}")
    cdef const uint8_t[::1] tv = t
    cdef const uint8_t[::1] sv = s.reshape(-1)
    cdef uint8_t[::1] ov = out.reshape(-1)
    cdef int n = <int>sv.shape[0]
    if n:
        with nogil:
            c_palette_lookup(&tv[0], &sv[0], &ov[0], n)
    return out
