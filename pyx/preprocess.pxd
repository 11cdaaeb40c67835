# cuda/preprocess.h's resize plan, used by _preprocess and _vector, declared once here.
from libc.stdint cimport int32_t

cdef extern from "preprocess.h" namespace "hs::pp" nogil:
    ctypedef struct ResizePlan "hs::pp::ResizePlan":
        int32_t kind
        int32_t interp
        int32_t src_h, src_w, dst_h, dst_w, channels
        int32_t iscale_x, iscale_y
        int32_t x_entries, y_entries
    int resize_plan_init(ResizePlan* p, int src_h, int src_w, int dst_h, int dst_w,
                         int channels, int interp)
    const char* resize_plan_error(int code)
