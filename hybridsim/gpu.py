"""The GPU vector engine: cuda/vector_kernels.cu through CuPy (NVRTC), or host-emulated.

GpuEngine has the CPU engine's interface (pyx/_vector.pyx's VectorEngine: reseed,
set_loaded, run, write_current, materialize, shown, ...), so hybridsim.vector's
AtariVectorEnv drives both. Its state lives in device arrays laid out exactly as the
CPU engine's numpy arrays (environment-major AleEnv / VecEnvState / frame / raw / stack
bytes; the sizes are checked against the CPU build), and its kernels call the same
vector_env.h functions per environment (docs/GPU.md).

Devices (the `device` object a GpuEngine runs on):
  CupyDevice(k)         CUDA device k: kernels compiled once per (device, options) by
                        CuPy's RawModule (NVRTC), or loaded from a prebuilt cubin
                        ($HYBRIDSIM_GPU_CUBIN, built by nvcc for the device's arch).
  HostEmulatedDevice()  the same kernel bodies compiled by g++ with a thread-index shim
                        (blockIdx/threadIdx/blockDim are variables, __global__ and
                        __device__ are defined away) and run as a loop over the grid, on
                        numpy arrays. No GPU needed: tests/test_gpu_emulated.py proves
                        the kernels against the CPU backend with it.

Designs of a step (GpuEngine(design=...), measured by benchmarks/gpu_bench.py):
  "fused": one kernel, one thread per environment (vec_execute, as the CPU engine);
  "split": emulation one thread per environment, then the screen (max-pool + resize)
           and the observation copy with one thread per output byte;
  "split_shared": split, with the emulated CPU's RIOT RAM in shared memory during a frame.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import hybridsim

DESIGNS = ("fused", "split", "split_shared")
DEFAULT_DESIGN = "split"
DEFAULT_BLOCK = 128
KERNEL_SOURCE = "vector_kernels.cu"

# Kernel name -> argument kinds (p pointer, i int32, q int64, u uint32, f float32), in the
# order of cuda/vector_kernels.cu's parameters.
_EXEC = "p" * 19 + "qi"
KERNELS = {
    "hs_vec_sizes": "p",
    "hs_vec_config": "pppp",
    "hs_vec_bind": "pppppiqi",
    "hs_vec_reseed": "ppipppppi",
    "hs_vec_set_loaded": "ppiiu",
    "hs_vec_execute_fused": _EXEC,
    "hs_vec_execute_deferred": _EXEC,
    "hs_vec_execute_shared": _EXEC,
    "hs_vec_screen": "pppppi",
    "hs_vec_obs": "pppppqi",
    "hs_vec_write_current": "p" * 12 + "qi",
    "hs_vec_materialize": "ppi",
    "hs_vec_get_shown": "ppi",
    "hs_vec_set_shown": "ppi",
}
_SCALARS = {"i": np.int32, "q": np.int64, "u": np.uint32, "f": np.float32}
_CTYPES = {"i": ctypes.c_int32, "q": ctypes.c_int64, "u": ctypes.c_uint32, "f": ctypes.c_float}


def cupy_unavailable_reason() -> str | None:
    """None when CuPy imports and sees a CUDA device; else why not (for skips and errors)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"CuPy is not installed ({type(exc).__name__}: {exc}); pip install 'hybridsim[gpu]'"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA device ({type(exc).__name__}: {exc})"
    if count < 1:
        return "no CUDA device"
    return None


def kernel_source_hash(include_dir: str | None = None) -> str:
    """md5 over every core source (what a compiled module depends on)."""
    d = pathlib.Path(include_dir or hybridsim.core_include_dir())
    h = hashlib.md5()
    for p in sorted(d.iterdir()):
        if p.suffix in (".h", ".inc", ".cu"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------------------
# CUDA devices through CuPy.

# --split-compile=0: NVRTC runs its optimizer and ptxas on all cores (the inlined emulator
# takes minutes on one).
NVRTC_OPTIONS = ("-std=c++17", "-DNDEBUG", "--split-compile=0")


# NVRTC modules: the kernels that inline the emulator each get their own (optimising one
# takes minutes), compiled when first used, or in parallel processes ahead of time
# (benchmarks/gpu_bench.py compile --part); the small kernels share "base".
ALL_PARTS = ("base", "fused", "split", "split_shared", "materialize")
_PART_MACROS = {"fused": "HS_VEC_NO_FUSED", "split": "HS_VEC_NO_SPLIT", "split_shared": "HS_VEC_NO_SPLIT_SHARED",
                "materialize": "HS_VEC_NO_MATERIALIZE"}
KERNEL_PART = {"hs_vec_execute_fused": "fused", "hs_vec_execute_deferred": "split",
               "hs_vec_execute_shared": "split_shared", "hs_vec_materialize": "materialize"}
EXECUTE_KERNEL = {"fused": "hs_vec_execute_fused", "split": "hs_vec_execute_deferred",
                  "split_shared": "hs_vec_execute_shared"}
# Dynamic shared memory per thread of the split_shared kernel (vector_kernels.cu's
# kSharedRamStride, reported by hs_vec_sizes and checked: a padded copy of RIOT RAM).
SHARED_RAM_STRIDE = 132
SHARED_MEM_PER_THREAD = {"hs_vec_execute_shared": SHARED_RAM_STRIDE}
# Dynamic shared memory a block may use without the kernel opting in to more (CUDA
# programming guide, compute capabilities: 48 KB; 227 KB on sm_90 with the opt-in).
DEFAULT_SHARED_LIMIT = 48 * 1024


def _check_shared_mem(name: str, block: int, shared_mem: int) -> None:
    """A kernel that works in shared memory needs its part for every thread of a block."""
    need = block * SHARED_MEM_PER_THREAD.get(name, 0)
    if shared_mem < need:
        raise ValueError(f"{name}: launched with {shared_mem} bytes of shared memory, its {block} "
                         f"threads need {need}")


def part_defines(part: str) -> tuple:
    """-D options that leave every emulator kernel but `part`'s out of a module."""
    if part not in ALL_PARTS:
        raise ValueError(f"part must be one of {ALL_PARTS}, got {part!r}")
    return tuple(f"-D{m}" for p, m in _PART_MACROS.items() if p != part)


SLOW_BUILD_NOTICE_SECONDS = 10.0


@contextlib.contextmanager
def announce_if_slow(what: str, after: float | None = None, stream=None):
    """Say on stderr that `what` is running once it has taken `after` seconds, and how long
    it took when it ends, so that a first NVRTC build of the emulator (minutes: ptxas
    optimises the inlined 6502 interpreter) does not look like a hang; a cached build
    (well under a second) says nothing."""
    stream = stream or sys.stderr
    after = SLOW_BUILD_NOTICE_SECONDS if after is None else after
    start = time.monotonic()
    lock = threading.Lock()
    state = {"announced": False, "finished": False}

    def announce():
        with lock:
            if not state["finished"]:
                state["announced"] = True
                print(f"hybridsim: {what} ...", file=stream, flush=True)

    timer = threading.Timer(after, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["finished"] = True
            if state["announced"]:
                print(f"hybridsim: {what}: done after {time.monotonic() - start:.0f} s",
                      file=stream, flush=True)


def cupy_cache_dir() -> str:
    """Where CuPy keeps compiled kernels on disk (its default, or $CUPY_CACHE_DIR)."""
    return os.path.expanduser(os.environ.get("CUPY_CACHE_DIR") or "~/.cupy/kernel_cache")


def hybridsim_cache_dir() -> pathlib.Path:
    """Where the host-emulation library is built ($HYBRIDSIM_CACHE, else ~/.cache/hybridsim)."""
    return pathlib.Path(os.environ.get("HYBRIDSIM_CACHE") or pathlib.Path.home() / ".cache" / "hybridsim")


BUILD_WAIT_LIMIT_SECONDS = 1800.0


@contextlib.contextmanager
def build_lock(directory, key: str, what: str, wait_limit: float | None = None, poll: float = 0.25):
    """Hold an exclusive flock on DIRECTORY/.build-KEY.lock around a build into that cache.

    The ranks of a node (or tasks sharing a cache) would otherwise each run the same
    minutes-long compile at once, on the same cores; with the lock one builds and the
    others wait, then load its result from the cache. The lock file lives beside the
    cache it guards, so a node-local cache serialises one node, a shared one the job.
    The kernel drops a holder's lock when its process dies. A file system without flock,
    or a wait past `wait_limit` seconds (a holder that hangs), builds without the lock:
    a duplicate build, never a stall. Yields whether the lock is held.
    """
    limit = BUILD_WAIT_LIMIT_SECONDS if wait_limit is None else wait_limit
    path = pathlib.Path(directory) / f".build-{key}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # a read-only cache: the build itself will say what is wrong
        yield False
        return
    try:
        held = _flock_waiting(fd, limit, poll, f"waiting for another process's {what} (lock {path})")
        yield held
    finally:
        os.close(fd)  # releases the flock


def _flock_waiting(fd: int, limit: float, poll: float, waiting: str) -> bool:
    deadline = time.monotonic() + limit
    with announce_if_slow(waiting):
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    print(f"hybridsim: still {waiting} after {limit:.0f} s; building without it",
                          file=sys.stderr, flush=True)
                    return False
                time.sleep(poll)
            except OSError:  # ENOLCK, EOPNOTSUPP: this file system has no flock
                return False


@functools.lru_cache(maxsize=None)
def _cupy_module(device_id: int, options: tuple, include_dir: str, cubin: str | None, part: str = "base"):
    """A RawModule on a device: the cubin (every kernel), or NVRTC's build of one part,
    compiled once per (device, options, sources, part) here and in CuPy's disk cache."""
    import cupy
    with cupy.cuda.Device(device_id):
        if cubin:
            return cupy.RawModule(path=cubin)
        # CuPy's disk cache keys on this code string and the options, not on the headers
        # it includes, so the sources' hash goes into the code: a changed core is a new build.
        sources = kernel_source_hash(include_dir)
        code = f'// hybridsim core sources md5 {sources}\n#include "{KERNEL_SOURCE}"\n'
        opts = tuple(options) + part_defines(part) + (f"--include-path={include_dir}",)
        cache = cupy_cache_dir()
        what = (f"compiling the CUDA kernels ({part}) with NVRTC for device {device_id}; a "
                f"first build takes minutes, later runs load it from CuPy's cache ({cache})")
        arch = cupy.cuda.Device(device_id).compute_capability
        key = hashlib.md5(repr((sources, opts, arch)).encode()).hexdigest()[:16]
        # CUPY_CACHE_IN_MEMORY=1: no shared cache for the waiters to find the build in
        shared = os.environ.get("CUPY_CACHE_IN_MEMORY") != "1"
        lock = build_lock(cache, key, f"NVRTC build ({part})") \
            if shared else contextlib.nullcontext()
        with lock, announce_if_slow(what):
            try:
                mod = cupy.RawModule(code=code, options=opts, backend="nvrtc")
                mod.compile()
            except Exception:
                if "--split-compile=0" not in opts:
                    raise
                # an NVRTC without --split-compile: the same build on one core
                opts = tuple(o for o in opts if o != "--split-compile=0")
                mod = cupy.RawModule(code=code, options=opts, backend="nvrtc")
                mod.compile()
        return mod


class CupyDevice:
    """CUDA device `device_id`; arrays are cupy arrays, launches go to `stream`."""

    emulated = False

    def __init__(self, device_id: int = 0, options: tuple = NVRTC_OPTIONS, cubin: str | None = None):
        self.device_id = int(device_id)
        reason = cupy_unavailable_reason()
        if reason:
            raise RuntimeError(f"backend='gpu' and backend='hybrid' need CuPy and a CUDA device "
                               f"(or host-emulated kernels: gpu_options=dict(emulate=True), on the "
                               f"command line --gpu-emulate): {reason}")
        import cupy
        self.cp = cupy
        self.xp = cupy
        self.device_id = int(device_id)
        self.device = cupy.cuda.Device(self.device_id)
        # cubin: a path; None: $HYBRIDSIM_GPU_CUBIN if set; False or "": compile with NVRTC.
        if cubin is None:
            cubin = os.environ.get("HYBRIDSIM_GPU_CUBIN") or None
        cubin = cubin or None
        self.cubin = cubin
        self.options = tuple(options)
        self._fns = {}
        self._limits = {}
        self._side = None  # begin_side_copies' stream, made at first use
        self.module = self.module_for("base")

    def module_for(self, part: str):
        """The module holding `part`'s kernels (compiled now if it is not yet)."""
        with self.device:
            return _cupy_module(self.device_id, self.options, hybridsim.core_include_dir(), self.cubin,
                                "base" if self.cubin else part)

    # Everything runs on CuPy's current stream (by default the null stream): output arrays
    # allocated by the caller, actions made by torch or CuPy, and torch.from_dlpack (which
    # orders itself after the producer's stream) all see the engine's work in order.
    @property
    def stream(self):
        return self.cp.cuda.get_current_stream()

    def _fn(self, name):
        f = self._fns.get(name)
        if f is None:
            # get_function loads the module on the current device (CuPy 14): make it ours,
            # or a rank on device k would load it, and open a context, on device 0 too
            with self.device:
                f = self._fns[name] = self.module_for(KERNEL_PART.get(name, "base")).get_function(name)
        return f

    def load(self, name: str) -> None:
        """Compile (or load from the caches) the module holding kernel `name` now."""
        self._fn(name)

    def max_block(self, name: str) -> int:
        """The most threads a block of kernel `name` may have on this device: fewer than
        1024 when its registers per thread need it (the emulator kernels use about 255 on
        sm_90, so 256; CUDA programming guide, compute capabilities table: 64K registers
        per block). CuPy reads it from the driver (RawKernel.attributes)."""
        limit = self._limits.get(name)
        if limit is None:
            with self.device:
                limit = self._limits[name] = int(self._fn(name).attributes["max_threads_per_block"])
        return limit

    def launch(self, name: str, threads: int, block: int, args, shared_mem: int = 0) -> None:
        if threads <= 0:
            return
        _check_shared_mem(name, block, shared_mem)
        if block > self.max_block(name):  # the launch would fail with "too many resources"
            raise ValueError(f"{name}: a block of {block} threads is more than this kernel can "
                             f"have on device {self.device_id} ({self.max_block(name)}, set by its "
                             f"registers per thread); use gpu_options block or pixel_block <= "
                             f"{self.max_block(name)}")
        kinds = KERNELS[name]
        conv = []
        for kind, a in zip(kinds, args, strict=True):
            if kind == "p":
                conv.append(np.uint64(0) if a is None else a)
            else:
                conv.append(_SCALARS[kind](a))
        grid = (threads + block - 1) // block
        with self.device:
            self._fn(name)((grid,), (block,), tuple(conv), shared_mem=shared_mem)

    def asarray(self, a, dtype=None):
        with self.device:
            return self.cp.asarray(a, dtype=dtype)

    def zeros(self, shape, dtype):
        with self.device:
            return self.cp.zeros(shape, dtype=dtype)

    def empty(self, shape, dtype):
        with self.device:
            return self.cp.empty(shape, dtype=dtype)

    def scope(self):
        """Context making this device CuPy's current one: CuPy allocates and runs on the
        current device, which need not be this one (device=1 in a process left on 0)."""
        return self.device

    def to_host(self, a) -> np.ndarray:
        with self.device:  # the current stream is per device
            self.stream.synchronize()
            return self.cp.asnumpy(self.cp.asarray(a))  # a cupy array, or a CUDA torch tensor

    def synchronize(self) -> None:
        with self.device:
            self.stream.synchronize()

    def pinned_empty(self, shape, dtype) -> np.ndarray:
        """A numpy array in page-locked memory (asynchronous copies to the device)."""
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        mem = self.cp.cuda.alloc_pinned_memory(max(n, 1))
        return np.frombuffer(mem, dtype=dtype, count=int(np.prod(shape))).reshape(shape)

    def copy_to_device(self, dst, src: np.ndarray, side: bool = False) -> None:
        """dst (a device array) := src (pinned host memory), asynchronously on the stream,
        or with side=True on the side stream (between begin_ and end_side_copies)."""
        with self.device:
            dst.set(src, stream=self._side if side else self.stream)

    def record_event(self):
        """A CUDA event recorded on the stream now (elapsed_seconds times the work between two)."""
        with self.device:
            return self.stream.record()

    def elapsed_seconds(self, start, end) -> float:
        """Device seconds between two recorded events, once both have passed."""
        with self.device:
            end.synchronize()
            return self.cp.cuda.get_elapsed_time(start, end) / 1000.0

    # The hybrid engine's copies of its CPU rows go on a second stream: on the compute
    # stream they would queue behind the GPU part's kernels instead of overlapping them.
    def begin_side_copies(self) -> None:
        """Side-stream copies from here on start after the work already on the stream
        (a consumer still reading the last batch, the kernels just launched)."""
        with self.device:
            if self._side is None:
                self._side = self.cp.cuda.Stream(non_blocking=True)
            self._side.wait_event(self.stream.record())

    def end_side_copies(self) -> None:
        """Wait (on the host) for the side-stream copies."""
        with self.device:
            self._side.synchronize()

    def __repr__(self):
        return f"CupyDevice({self.device_id})"


# ----------------------------------------------------------------------------------------
# Host emulation: the kernels as g++ code over a sequential grid.

EMULATION_SHIM = r"""
// Host emulation of cuda/vector_kernels.cu (hybridsim/gpu.py): the kernel bodies as
// host code, a kernel launch as a loop over the 1-D grid.
#include <stddef.h>
#include <stdint.h>
#include <type_traits>
#include <utility>
struct hs_emu_dim3 { unsigned x, y, z; };
static hs_emu_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#include "vector_kernels.cu"
// One block's dynamic shared memory (the launch limit is 1,024 threads); the threads of
// the emulated grid run one after another, each on its own part.
uint8_t hs_gpu::hs_shared_ram[1024 * hs_gpu::kSharedRamStride];
template <typename... A, size_t... I>
static void hs_emu_call(void (*k)(A...), void** args, std::index_sequence<I...>) {
  k(*static_cast<typename std::remove_reference<A>::type*>(args[I])...);
}
template <typename... A>
static void hs_emu_launch(void (*k)(A...), unsigned grid, unsigned block, void** args) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (blockIdx = {0, 0, 0}; blockIdx.x < grid; ++blockIdx.x)
    for (threadIdx = {0, 0, 0}; threadIdx.x < block; ++threadIdx.x)
      hs_emu_call(k, args, std::index_sequence_for<A...>{});
}
"""


def emulation_source() -> str:
    exports = "".join(
        f'extern "C" __attribute__((visibility("default"))) void emu_{name}(unsigned g, unsigned b, void** a) '
        f'{{ hs_emu_launch({name}, g, b, a); }}\n'
        for name in KERNELS)
    return EMULATION_SHIM + exports


_emu_lock = threading.Lock()


def build_emulation_library(cache_dir: str | os.PathLike | None = None, opt: str = "-O2") -> pathlib.Path:
    """Compile (once per source hash) the host-emulation shared library; return its path."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise RuntimeError("host emulation needs a C++ compiler (g++)")
    include = hybridsim.core_include_dir()
    src = emulation_source()
    key = hashlib.md5((kernel_source_hash(include) + src + opt).encode()).hexdigest()[:16]
    base = pathlib.Path(cache_dir or hybridsim_cache_dir())
    lib = base / f"gpu_emulation_{key}.so"
    if lib.is_file():
        return lib
    base.mkdir(parents=True, exist_ok=True)
    with _emu_lock, build_lock(base, key, "host-emulation build"):
        if lib.is_file():  # another thread or process built it while this one waited
            return lib
        with tempfile.TemporaryDirectory(dir=base) as tmp:
            cpp = pathlib.Path(tmp, "emu.cpp")
            cpp.write_text(src)
            out = pathlib.Path(tmp, lib.name)
            # Hidden visibility: two of these libraries (or one and the extensions) in one
            # process must not bind each other's inline functions or their static data (the
            # 6507's dispatch table holds addresses inside its own library's code).
            cmd = [cxx, "-std=c++17", opt, "-fPIC", "-shared", "-fvisibility=hidden", "-fno-strict-aliasing",
                   "-Wall", "-Wno-unused-function", "-I", include, str(cpp), "-o", str(out)]
            with announce_if_slow(f"compiling the host-emulated CUDA kernels with {cxx} "
                                  f"(once per source version, kept in {base})"):
                result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"host emulation build failed:\n{' '.join(cmd)}\n{result.stderr[-4000:]}")
            os.replace(out, lib)
    return lib


# The shim's blockIdx and threadIdx are one static variable each in the loaded library
# (ctypes loads a path once per process): launches from two threads must not overlap.
_EMULATED_LAUNCH = threading.Lock()


class HostEmulatedDevice:
    """The kernels run on the host, one grid point after another, over numpy arrays."""

    emulated = True

    def __init__(self, library: str | os.PathLike | None = None):
        self.xp = np
        self.device_id = -1
        self.lib = ctypes.CDLL(str(library or build_emulation_library()))
        self._fns = {}

    def launch(self, name: str, threads: int, block: int, args, shared_mem: int = 0) -> None:
        if threads <= 0:
            return
        _check_shared_mem(name, block, shared_mem)  # the shim's buffer holds 1,024 threads' parts
        kinds = KERNELS[name]
        vals = []
        for kind, a in zip(kinds, args, strict=True):
            if kind == "p":
                vals.append(ctypes.c_void_p(0 if a is None else a.ctypes.data))
            else:
                vals.append(_CTYPES[kind](a))
        argv = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        fn = self._fn(name)
        with _EMULATED_LAUNCH:
            fn(ctypes.c_uint((threads + block - 1) // block), ctypes.c_uint(block), argv)

    def load(self, name: str) -> None:
        self._fn(name)

    def max_block(self, name: str) -> int:
        return 1024  # CUDA's limit for any kernel; register limits are the device's

    def _fn(self, name):
        fn = self._fns.get(name)
        if fn is None:
            fn = self._fns[name] = getattr(self.lib, f"emu_{name}")
            fn.restype = None
        return fn

    def asarray(self, a, dtype=None):
        return np.ascontiguousarray(a, dtype=dtype)

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=dtype)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def scope(self):
        return contextlib.nullcontext()

    def to_host(self, a) -> np.ndarray:
        return np.asarray(a).copy()  # cupy.asnumpy gives a new host array, never a view

    def synchronize(self) -> None:
        pass

    def pinned_empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def record_event(self) -> float:
        return time.perf_counter()  # the emulated launches run on the host, in order

    def elapsed_seconds(self, start: float, end: float) -> float:
        return end - start

    def begin_side_copies(self) -> None:
        pass

    def end_side_copies(self) -> None:
        pass

    def copy_to_device(self, dst, src, side: bool = False) -> None:
        # what cupy.ndarray.set refuses (CuPy's core: no casting, no broadcasting, a
        # contiguous target), so the emulation catches a call a real device would refuse
        src = np.asarray(src)
        if src.dtype != dst.dtype:
            raise TypeError(f"copy_to_device: dtype {src.dtype} into {dst.dtype}")
        if src.shape != dst.shape:
            raise ValueError(f"copy_to_device: shape {src.shape} into {dst.shape}")
        if not dst.flags.c_contiguous:
            raise RuntimeError("copy_to_device: the device array is not contiguous")
        dst[...] = src

    def __repr__(self):
        return "HostEmulatedDevice()"


def make_device(device=0, *, emulate: bool = False, cubin: str | None = None):
    """A device object from an int (CUDA device), an existing device, or emulate=True."""
    if emulate or device == "emulate":
        return HostEmulatedDevice()
    if isinstance(device, (CupyDevice, HostEmulatedDevice)):
        return device
    return CupyDevice(int(device or 0), cubin=cubin)


# ----------------------------------------------------------------------------------------
# The engine.

def _cpu_sizes():
    from hybridsim import _vector
    return dict(ale_env=_vector.ALE_ENV_BYTES, vec_state=_vector.VEC_STATE_BYTES,
                frame=_vector.FRAME_BYTES, plan=_vector.RESIZE_PLAN_BYTES, replay=_vector.FRAME_REPLAY_BYTES)


class GpuEngine:
    """num_envs environments of cuda/vector_env.h in device arrays (VectorEngine's API)."""

    def __init__(self, rom, template_state, template_frames, int_template_shown, num_envs, *,
                 num_threads=1, frame_skip, stack_num, img_height, img_width, grayscale, maxpool,
                 noop_max, fire_reset, episodic_life, life_loss_info, reward_clipping,
                 max_episode_steps, same_step, action_set, raw_height, pal, interpolation=3,
                 device=0, design=DEFAULT_DESIGN, block=DEFAULT_BLOCK, pixel_block=256,
                 emulate=False, cubin=None):
        if design not in DESIGNS:
            raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.dev = make_device(device, emulate=emulate, cubin=cubin)
        d = self.dev
        self.design = design
        for key, value in (("block", block), ("pixel_block", pixel_block)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= 1024:
                raise ValueError(f"gpu_options {key} must be an int in 1..1024 (CUDA's most threads "
                                 f"per block), got {value!r}")
        self.block = int(block)
        self.pixel_block = int(pixel_block)
        self.num_envs = int(num_envs)
        self.num_threads = int(num_threads)
        # Layout check: the device compiler's structs are the CPU build's bytes.
        sizes_dev = d.zeros(8, np.int64)
        d.launch("hs_vec_sizes", 1, 1, (sizes_dev,))
        s = [int(x) for x in d.to_host(sizes_dev)]
        self.sizes = dict(ale_env=s[0], vec_state=s[1], bufs=s[2], replay=s[3], config=s[4], plan=s[5], frame=s[6])
        if s[7] != SHARED_RAM_STRIDE:
            raise RuntimeError(f"the kernels' shared memory per thread is {s[7]} bytes, gpu.py launches "
                               f"with {SHARED_RAM_STRIDE} (SHARED_RAM_STRIDE vs kSharedRamStride)")
        cpu = _cpu_sizes()
        for key, val in cpu.items():
            if self.sizes[key] != val:
                raise RuntimeError(f"device layout differs from the CPU build: sizeof {key} is "
                                   f"{self.sizes[key]} on the device, {val} on the host")
        if len(template_state) != self.sizes["ale_env"]:
            raise ValueError(f"template_state must hold {self.sizes['ale_env']} bytes (sizeof AleEnv)")
        if not (1 <= len(action_set) <= 18):
            raise ValueError(f"action_set must hold 1..18 ALE action ids, got {len(action_set)}")
        channels = 1 if grayscale else 3
        self.raw_size = int(raw_height) * 160 * channels
        self.obs_size = int(img_height) * int(img_width) * channels
        self.obs_bytes = int(stack_num) * self.obs_size
        self.maxpool = bool(maxpool)
        params = [frame_skip, stack_num, img_height, img_width, int(bool(grayscale)), int(bool(maxpool)),
                  noop_max, int(bool(fire_reset)), int(bool(episodic_life)), int(bool(life_loss_info)),
                  int(bool(reward_clipping)), max_episode_steps, int(bool(same_step)), raw_height,
                  int(bool(pal)), interpolation, len(action_set)] + [int(a) for a in action_set]
        self.cfg = d.zeros(self.sizes["config"], np.uint8)
        self.plan = d.zeros(self.sizes["plan"], np.uint8)
        err = d.zeros(1, np.int32)
        d.launch("hs_vec_config", 1, 1, (self.cfg, self.plan, d.asarray(np.array(params, np.int32)), err))
        code = int(d.to_host(err)[0])
        if code != 0:
            raise ValueError(f"img_height/img_width: resize plan error {code} (got {img_height}x{img_width})")
        # The plan the CPU engine uses (host-built, a plain struct: copied as is) replaces
        # the device-built one; whether they agreed is kept for the device report.
        from hybridsim import _preprocess
        src_shape = (int(raw_height), 160) if grayscale else (int(raw_height), 160, 3)
        host_plan = _preprocess.Resizer(src_shape, (int(img_height), int(img_width)),
                                        int(interpolation)).plan_bytes()
        self.plan_device_equal = bool(np.array_equal(d.to_host(self.plan), host_plan))
        self.plan[...] = d.asarray(np.ascontiguousarray(host_plan))
        self.rom_host = bytes(rom)
        self.rom = d.asarray(np.frombuffer(self.rom_host, np.uint8))
        self.template_state = np.frombuffer(bytes(template_state), dtype=np.uint8).copy()
        fb = self.sizes["frame"]
        self.template_frames = np.ascontiguousarray(template_frames, dtype=np.uint8).reshape(2, fb).copy()
        self.template_shown = int(int_template_shown)
        self._tmpl_state = d.asarray(self.template_state)
        self._tmpl_frames = d.asarray(self.template_frames)
        n = self.num_envs
        self.env_mem = d.zeros((n, self.sizes["ale_env"]), np.uint8)
        self.state_mem = d.zeros((n, self.sizes["vec_state"]), np.uint8)
        self.frame_mem = d.zeros((n, 2, fb), np.uint8)
        self.raw_mem = d.zeros((n, 2, self.raw_size), np.uint8)
        self.stack_mem = d.zeros((n, self.obs_bytes), np.uint8)
        self.replay_mem = d.zeros((n, self.sizes["replay"]), np.uint8)
        self.bufs = d.zeros((n, self.sizes["bufs"]), np.uint8)
        d.launch("hs_vec_bind", n, self.block, (self.bufs, self.frame_mem, self.replay_mem, self.raw_mem,
                                                self.stack_mem, self.raw_size, self.obs_bytes, n))
        # The emulator kernel's first build takes minutes: here, where it is expected (and
        # before training's stall watchdog starts), not inside the first step.
        d.load(EXECUTE_KERNEL[design])
        per_thread = SHARED_MEM_PER_THREAD.get(EXECUTE_KERNEL[design], 0)
        self.shared_mem = self.block * per_thread  # dynamic shared memory of each launch
        if self.shared_mem > DEFAULT_SHARED_LIMIT:
            raise ValueError(f"gpu_options block {self.block} is more than {design} takes: "
                             f"{per_thread} bytes of shared memory a thread, at most "
                             f"{DEFAULT_SHARED_LIMIT // per_thread} threads in 48 KB")
        if self.block > d.max_block(EXECUTE_KERNEL[design]):  # say so now, not at the first step
            raise ValueError(f"gpu_options block {self.block} is more than the {design} emulator "
                             f"kernel can have on this device ({d.max_block(EXECUTE_KERNEL[design])} "
                             f"threads per block, set by its registers per thread)")
        self._id_cache = (None, None)
        self._force_cache = {}

    # ---- helpers ----------------------------------------------------------------------
    def _dev_i32(self, a):
        return self.dev.asarray(np.ascontiguousarray(a), dtype=np.int32)

    def _ids(self, env_ids):
        """Device copy of env_ids (the last one is kept: a synchronous run repeats its ids)."""
        key, val = self._id_cache
        if key is not None and key.shape == np.shape(env_ids) and np.array_equal(key, env_ids):
            return val
        host = np.ascontiguousarray(env_ids, dtype=np.int32)
        val = self.dev.asarray(host)
        self._id_cache = (host.copy(), val)
        return val

    def _on_device(self, a, dtype):
        if isinstance(a, np.ndarray) or np.isscalar(a) or isinstance(a, (list, tuple)):
            return self.dev.asarray(np.ascontiguousarray(a, dtype=dtype))
        if getattr(a, "dtype", None) != np.dtype(dtype):
            return self.dev.xp.ascontiguousarray(self.dev.xp.asarray(a).astype(dtype))
        return self.dev.xp.ascontiguousarray(self.dev.xp.asarray(a))

    # ---- seeding ----------------------------------------------------------------------
    def reseed(self, env_ids, seeds):
        ids = np.ascontiguousarray(env_ids, dtype=np.int32)
        sd = np.ascontiguousarray(np.asarray(seeds, dtype=np.int64) & 0xFFFFFFFF, dtype=np.uint32)
        d = self.dev
        d.launch("hs_vec_reseed", len(ids), self.block,
                 (self._tmpl_state, self._tmpl_frames, self.template_shown, d.asarray(ids), d.asarray(sd),
                  self.env_mem, self.state_mem, self.bufs, len(ids)))

    def set_loaded(self, env, state, frames, shown, seed):
        if len(state) != self.sizes["ale_env"]:
            raise ValueError(f"state must hold {self.sizes['ale_env']} bytes")
        d = self.dev
        self.env_mem[env] = d.asarray(np.frombuffer(bytes(state), np.uint8))
        self.frame_mem[env] = d.asarray(np.asarray(frames, dtype=np.uint8).reshape(2, -1))
        self.replay_mem[env] = 0
        d.launch("hs_vec_set_loaded", 1, 1, (self.state_mem, self.bufs, int(env), int(shown),
                                            int(seed) & 0xFFFFFFFF))

    # ---- stepping ---------------------------------------------------------------------
    def run(self, env_ids, force_reset, actions, strengths, obs, final_obs, reward, terminated, truncated,
            lives, frame_number, episode_frame_number, has_final):
        """Step (or reset where force_reset) environments env_ids into rows of the outputs
        (device arrays); inputs may be host or device arrays. Asynchronous on the device."""
        n = len(env_ids)
        if n == 0:
            return
        d = self.dev
        ids = self._ids(env_ids)
        force = self._on_device(force_reset, np.uint8)
        acts = self._on_device(actions, np.int32)
        st = self._on_device(strengths, np.float32)
        for name, a in (("obs", obs), ("reward", reward), ("terminated", terminated)):
            if a.shape[0] < n:
                raise ValueError(f"{name} must have at least {n} rows")
        d.launch(EXECUTE_KERNEL[self.design], n, self.block,
                 (self.cfg, self.plan, self.rom, self.env_mem, self.state_mem, self.bufs, ids, force, acts, st,
                  obs, final_obs, reward, terminated, truncated, lives, frame_number, episode_frame_number,
                  has_final, self.obs_bytes, n), shared_mem=self.shared_mem)
        if self.design != "fused":
            self.finish_screens(ids, obs, n)

    def finish_screens(self, ids, obs, n):
        """The split design's pixel kernels for the rows just executed (deferred)."""
        d = self.dev
        d.launch("hs_vec_screen", n * self.obs_size, self.pixel_block,
                 (self.cfg, self.plan, self.state_mem, self.bufs, ids, n))
        width = max(self.obs_bytes, self.raw_size if self.maxpool else 0)
        d.launch("hs_vec_obs", n * width, self.pixel_block,
                 (self.cfg, self.state_mem, self.bufs, ids, obs, self.obs_bytes, n))

    def write_current(self, env_ids, obs, reward, terminated, truncated, lives, frame_number,
                      episode_frame_number):
        n = len(env_ids)
        if n == 0:
            return
        ids = self.dev.asarray(np.ascontiguousarray(env_ids, dtype=np.int32))
        self.dev.launch("hs_vec_write_current", n, self.block,
                        (self.cfg, self.env_mem, self.state_mem, self.bufs, ids, obs, reward, terminated,
                         truncated, lives, frame_number, episode_frame_number, self.obs_bytes, n))

    def synchronize(self):
        self.dev.synchronize()

    # ---- snapshots --------------------------------------------------------------------
    def materialize(self):
        self.dev.launch("hs_vec_materialize", self.num_envs, self.block, (self.rom, self.bufs, self.num_envs))

    def forget_undrawn(self):
        self.replay_mem[...] = 0

    def shown(self):
        out = self.dev.zeros(self.num_envs, np.int32)
        self.dev.launch("hs_vec_get_shown", self.num_envs, self.block, (self.bufs, out, self.num_envs))
        return self.dev.to_host(out)

    def set_shown(self, values):
        v = np.asarray(values, dtype=np.int32)
        if v.shape != (self.num_envs,):
            raise ValueError(f"shown must hold {self.num_envs} values")
        self.dev.launch("hs_vec_set_shown", self.num_envs, self.block,
                        (self.bufs, self.dev.asarray(v), self.num_envs))

    def host_array(self, name):
        """A host copy of one snapshot array (hybridsim.vector.SNAPSHOT_ARRAYS), so a
        snapshot holds one at a time."""
        from hybridsim.vector import SNAPSHOT_ARRAYS
        return self.dev.to_host(getattr(self, SNAPSHOT_ARRAYS[name]))

    def load_arrays(self, arrays):
        """The snapshot arrays from host arrays (or set_state's stored ones), one at a time."""
        from hybridsim.vector import SNAPSHOT_ARRAYS
        for name in SNAPSHOT_ARRAYS:
            self.load_array(name, arrays[name])

    def load_array(self, name, rows):
        from hybridsim.vector import SNAPSHOT_ARRAYS
        arr = getattr(self, SNAPSHOT_ARRAYS[name])
        arr[...] = self.dev.asarray(np.asarray(rows).reshape(arr.shape))

    def env_row_host(self, k):
        """(AleEnv bytes, frames [2, kFrameBytes], shown) of environment k, on the host."""
        t = self.dev.to_host
        return t(self.env_mem[k]), t(self.frame_mem[k]), int(self.shown()[k])

    def check_actions(self, actions, n, num_actions):
        """Device actions (cupy array or CUDA torch tensor) as int32 indices, range-checked."""
        xp = self.dev.xp
        a = xp.asarray(actions)
        if a.dtype.kind not in "iu":
            raise ValueError(f"actions must be an integer array (any int or uint dtype), got dtype {a.dtype}")
        if a.shape != (n,):
            raise ValueError(f"actions must have shape {(n,)}, got {a.shape}")
        if n and bool(((a < 0) | (a >= num_actions)).any()):
            raise ValueError(f"actions must be in 0..{num_actions - 1} (the action set has {num_actions} actions)")
        return xp.ascontiguousarray(a.astype(np.int32, copy=False))

    def __repr__(self):
        return (f"GpuEngine(num_envs={self.num_envs}, design={self.design!r}, block={self.block}, "
                f"device={self.dev!r})")


# ----------------------------------------------------------------------------------------
# Wiring into hybridsim.vector.AtariVectorEnv.

OUTPUTS = ("torch", "cupy", "numpy")
GPU_OPTION_KEYS = {"design", "block", "pixel_block", "emulate", "output", "cubin", "cpu_envs",
                   "cpu_threads", "calibrate_steps", "copy_chunks", "rebalance_steps"}


def make_deliver(output: str, dev):
    """Function turning the engine's output arrays (and dicts of them) into `output`'s kind."""
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")

    def convert(a):
        if isinstance(a, dict):
            return {k: convert(v) for k, v in a.items()}
        if isinstance(a, np.ndarray) or a is None:
            return a
        if output == "numpy":
            return dev.to_host(a)
        if output == "torch":
            import torch
            if a.dtype == np.bool_:  # DLPack's bool code is recent; a uint8 view always works
                try:
                    return torch.from_dlpack(a)
                except Exception:  # noqa: BLE001
                    return torch.from_dlpack(a.view(np.uint8)).view(torch.bool)
            return torch.from_dlpack(a)
        return a

    if output == "numpy" and dev.emulated:
        return lambda a: a
    return convert


def make_vector_engine(backend: str, engine_args, engine_kwargs, *, device=0, options=None):
    """(engine, array module, deliver) for AtariVectorEnv(backend="gpu" | "hybrid")."""
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"gpu_options must be a dict, got {type(options).__name__}")
    opts = dict(options or {})
    unknown = set(opts) - GPU_OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown gpu_options {sorted(unknown)}; known: {sorted(GPU_OPTION_KEYS)}")
    dev = make_device(device, emulate=bool(opts.get("emulate", False)), cubin=opts.get("cubin"))
    output = opts.get("output", "numpy" if dev.emulated else "torch")
    gpu_kw = dict(design=opts.get("design", DEFAULT_DESIGN), block=opts.get("block", DEFAULT_BLOCK),
                  pixel_block=opts.get("pixel_block", 256))
    if backend not in ("gpu", "hybrid"):
        raise ValueError(f"backend must be 'gpu' or 'hybrid' here, got {backend!r}")
    with dev.scope():
        if backend == "gpu":
            engine = GpuEngine(*engine_args, **engine_kwargs, device=dev, **gpu_kw)
        else:
            from hybridsim.hybrid import HybridEngine
            engine = HybridEngine(engine_args, engine_kwargs, device=dev, gpu_kwargs=gpu_kw,
                                  cpu_envs=opts.get("cpu_envs"), cpu_threads=opts.get("cpu_threads"),
                                  calibrate_steps=opts.get("calibrate_steps", 8),
                                  copy_chunks=opts.get("copy_chunks"), rebalance_steps=opts.get("rebalance_steps"))
    return engine, dev.xp, make_deliver(output, dev)
