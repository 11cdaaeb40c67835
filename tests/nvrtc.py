"""Compile core sources with NVRTC through ctypes (no GPU or driver needed, PLATFORM_NOTES.md)."""
import ctypes
import ctypes.util
import os
import pathlib

import hybridsim


def nvrtc_library():
    """libnvrtc from $HYBRIDSIM_NVRTC_LIB, the nvidia-cuda-nvrtc wheel, or the system; None if absent."""
    candidates = [os.environ.get("HYBRIDSIM_NVRTC_LIB")]
    try:
        import nvidia.cuda_nvrtc as wheel
        for base in wheel.__path__:
            candidates += sorted(str(p) for p in pathlib.Path(base, "lib").glob("libnvrtc.so*"))
    except ImportError:
        pass
    try:
        import nvidia
        for base in nvidia.__path__:
            candidates += sorted(str(p) for p in pathlib.Path(base).glob("cu*/lib/libnvrtc.so*"))
    except ImportError:
        pass
    candidates.append(ctypes.util.find_library("nvrtc"))
    for path in candidates:
        if path:
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def compile_to_ptx(lib, source: pathlib.Path, arch: str = "compute_90", extra=()) -> tuple[int, str, bytes]:
    """(return code, log, PTX) of compiling `source` with the core headers on the include path."""
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.read_bytes(), source.name.encode(), 0, None, None)
    if rc != 0:
        return rc, "nvrtcCreateProgram failed", b""
    opts = [f"-arch={arch}".encode(), b"-std=c++17",
            b"--include-path=" + hybridsim.core_include_dir().encode(), *extra]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    ptx = b""
    if rc == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, buf)
        ptx = buf.value
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace"), ptx
