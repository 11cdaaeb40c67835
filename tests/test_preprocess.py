"""Observation preprocessing (cuda/preprocess.h) against OpenCV, bit for bit.

ale-py's AtariVectorEnv resizes each (max-pooled) frame with cv::resize(INTER_AREA); the
portable core must give identical bytes on the CPU and the GPU. Every resize here is
compared with cv2.resize by np.array_equal, on random and structured images, for the
shapes the engine uses, 1 and 3 channels (and 2 and 4 for coverage). A slow NumPy
reference of the same algorithm sits next to the fast path.
"""
import math
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import hybridsim
from hybridsim import _preprocess as pp

cv2 = pytest.importorskip("cv2")

SRC = (210, 160)
# (height, width): the default, exact factor 2 (OpenCV's integer fast path), other
# common observation sizes, non-2 integer factors (3x2, 2x1, 1x2), identity, upscaling
# and mixed up/down (INTER_AREA falls back to bilinear there).
DST_SIZES = [(84, 84), (105, 80), (110, 84), (64, 64), (42, 42), (70, 80), (105, 160),
             (210, 80), (210, 160), (250, 200), (420, 320), (300, 100), (100, 200),
             (1, 1), (209, 159)]
EXPECTED_KIND = {(84, 84): "area", (105, 80): "area_2x2", (110, 84): "area", (64, 64): "area",
                 (42, 42): "area", (70, 80): "area_int", (105, 160): "area_int",
                 (210, 80): "area_int", (210, 160): "copy", (250, 200): "linear",
                 (420, 320): "linear", (300, 100): "linear", (100, 200): "linear",
                 (1, 1): "area", (209, 159): "area"}
INTERPS = {"area": 3, "linear": 1}
N_RANDOM = 12


@pytest.fixture(params=["simd", "portable"])
def host_path(request):
    """Run a test once with the AVX2 host paths (preprocess_simd.h) and once with the
    portable loops; both must give cv2's bytes."""
    active = pp.set_simd(request.param == "simd")
    try:
        if request.param == "simd" and not active:
            pytest.skip("this CPU has no AVX2: only the portable path runs")
        yield request.param
    finally:
        pp.set_simd(True)


# ---------------------------------------------------------------------------------------
# Test images.

def structured_images(h, w, c, rng):
    """Edges, constant blocks, checkerboards, gradients, ties and Atari-like flat frames."""
    yy, xx = np.indices((h, w))
    planes = [
        np.zeros((h, w)), np.full((h, w), 255), np.full((h, w), 128),
        (xx >= w // 3) * 255,                                  # vertical edge
        (yy >= (2 * h) // 5) * 200 + 17,                       # horizontal edge
        ((xx + yy) % 2) * 255,                                 # 1-pixel checkerboard
        ((xx + yy) % 2),                                       # 0/1 checkerboard: .5 ties
        ((xx // 2 + yy // 2) % 2) * 255,                       # 2-pixel checkerboard
        ((xx // 3 + yy // 5) % 2) * 173 + 41,                  # 3x5 checkerboard
        (xx % 2) * 3 + (yy % 2),                               # small odd sums
        xx * 255 // max(w - 1, 1),                             # horizontal ramp
        (xx + 2 * yy) % 256,                                   # diagonal ramp
        np.kron(rng.integers(0, 256, (h // 7 + 1, w // 5 + 1)), np.ones((7, 5)))[:h, :w],
        np.kron(rng.integers(0, 8, (h // 2 + 1, w // 4 + 1)) * 36, np.ones((2, 4)))[:h, :w],
    ]
    out = []
    for p in planes:
        p = p.astype(np.uint8)
        if c == 1:
            out.append(p)
        else:   # channel k: the plane shifted and offset so channels differ
            out.append(np.stack([np.roll(p, k, axis=1) ^ (37 * k) for k in range(c)], axis=2)
                       .astype(np.uint8))
    palette = rng.integers(0, 256, (8, c), dtype=np.uint8)   # Atari-like: few colours, flat areas
    idx = np.kron(rng.integers(0, 8, (h // 10 + 1, w // 8 + 1)), np.ones((10, 8), np.int64))[:h, :w]
    idx[h // 2:h // 2 + 4, w // 3:w // 3 + 3] = 7
    atari = palette[idx]
    out.append(atari[:, :, 0] if c == 1 else atari)
    return out


def random_images(h, w, c, rng, n):
    shape = (h, w) if c == 1 else (h, w, c)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]


def cv2_resize(img, size, interp):
    h, w = size
    return cv2.resize(img, (w, h), interpolation=INTERPS[interp])


# ---------------------------------------------------------------------------------------
# Slow, obvious NumPy reference of OpenCV's 8-bit resize (same facts as preprocess.h).

F32 = np.float32
DBL_EPSILON = np.finfo(np.float64).eps


def area_weights(ssize, dsize, scale):
    """OpenCV's INTER_AREA weights per destination index: [(source index, float32 weight)]."""
    table = []
    for d in range(dsize):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, ssize - f1)
        s1, s2 = math.ceil(f1), math.floor(f2)
        s2 = min(s2, ssize - 1)
        s1 = min(s1, s2)
        entries = []
        if s1 - f1 > 1e-3:
            entries.append((s1 - 1, F32((s1 - f1) / cell)))
        entries += [(s, F32(1.0 / cell)) for s in range(s1, s2)]
        if f2 - s2 > 1e-3:
            entries.append((s2, F32(min(min(f2 - s2, 1.0), cell) / cell)))
        table.append(entries)
    return table


def linear_weights(ssize, dsize, area_mode, clamp_src):
    inv = dsize / ssize
    scale = 1.0 / inv
    out = []
    for d in range(dsize):
        if not area_mode:
            f = F32((d + 0.5) * scale - 0.5)
            s = math.floor(f)
            f = F32(f - F32(s))
        else:
            s = math.floor(d * scale)
            f = F32((d + 1) - (s + 1) * inv)
            f = F32(0) if f <= 0 else F32(f - F32(math.floor(f)))
        if clamp_src and s < 0:
            f, s = F32(0), 0
        if clamp_src and s >= ssize - 1:
            f, s = F32(0), ssize - 1
        w0 = int(np.rint(F32(F32(1) - f) * F32(2048)))
        w1 = int(np.rint(f * F32(2048)))
        out.append((min(max(s, 0), ssize - 1), min(max(s + 1, 0), ssize - 1), w0, w1))
    return out


def reference_resize(img, size, interp):
    """cv2.resize for uint8 images, INTER_AREA / INTER_LINEAR, written for clarity."""
    gray = img.ndim == 2
    src = img[:, :, None] if gray else img
    H, W, C = src.shape
    dh, dw = size
    out = np.zeros((dh, dw, C), np.uint8)
    if (dh, dw) == (H, W):
        out[:] = src
        return out[:, :, 0] if gray else out
    inv_x, inv_y = dw / W, dh / H
    scale_x, scale_y = 1.0 / inv_x, 1.0 / inv_y
    ix, iy = int(np.rint(scale_x)), int(np.rint(scale_y))
    fast = abs(scale_x - ix) < DBL_EPSILON and abs(scale_y - iy) < DBL_EPSILON
    if interp == "linear" and fast and ix == 2 and iy == 2:
        interp = "area"
    if interp == "area" and scale_x >= 1 and scale_y >= 1:
        if fast:   # integer factors: block sums
            blocks = src.reshape(dh, iy, dw, ix, C).astype(np.int64).sum(axis=(1, 3))
            if ix == 2 and iy == 2 and C != 2:
                out[:] = (blocks + 2) >> 2                       # rounded half up
            else:
                v = blocks.astype(F32) * (F32(1) / F32(ix * iy))
                out[:] = np.clip(np.rint(v), 0, 255)             # half to even
        else:      # float32: row pass in source order, then column pass in source order
            xt, yt = area_weights(W, dw, scale_x), area_weights(H, dh, scale_y)
            for dy in range(dh):
                acc = np.zeros((dw, C), F32)
                for sy, beta in yt[dy]:
                    row = src[sy].astype(F32)
                    buf = np.zeros((dw, C), F32)
                    for dx in range(dw):
                        for sx, alpha in xt[dx]:
                            buf[dx] = buf[dx] + row[sx] * alpha
                    acc = acc + beta * buf
                out[dy] = np.clip(np.rint(acc), 0, 255)
    else:          # fixed-point bilinear (also INTER_AREA when upscaling an axis)
        area_mode = interp == "area"
        xt = linear_weights(W, dw, area_mode, True)
        yt = linear_weights(H, dh, area_mode, False)
        s = src.astype(np.int64)
        x0, x1, a0, a1 = (np.array(v) for v in zip(*xt))
        hrow = s[:, x0] * a0[None, :, None] + s[:, x1] * a1[None, :, None]
        for dy, (y0, y1, b0, b1) in enumerate(yt):
            v = (((b0 * (hrow[y0] >> 4)) >> 16) + ((b1 * (hrow[y1] >> 4)) >> 16) + 2) >> 2
            out[dy] = np.clip(v, 0, 255)
    return out[:, :, 0] if gray else out


# ---------------------------------------------------------------------------------------
# Resize: bit-exact with cv2.

@pytest.mark.parametrize("interp", ["area", "linear"])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("size", DST_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_resize_matches_cv2(size, channels, interp, host_path):
    rng = np.random.default_rng([size[0], size[1], channels, INTERPS[interp]])
    shape = SRC if channels == 1 else SRC + (channels,)
    r = pp.Resizer(shape, size, interp)
    if interp == "area":
        assert r.kind == EXPECTED_KIND[size]
    images = random_images(*SRC, channels, rng, N_RANDOM) + structured_images(*SRC, channels, rng)
    for k, img in enumerate(images):
        want = cv2_resize(img, size, interp)
        got = r(img)
        assert got.shape == want.shape
        assert np.array_equal(got, want), \
            f"image {k}: {np.count_nonzero(got != want)} of {got.size} bytes differ"


@pytest.mark.parametrize("interp", ["area", "linear"])
@pytest.mark.parametrize("channels", [2, 4])
@pytest.mark.parametrize("size", [(84, 84), (105, 80), (70, 80), (250, 200)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_resize_other_channel_counts(size, channels, interp):
    rng = np.random.default_rng(7)
    for img in random_images(*SRC, channels, rng, 4) + structured_images(*SRC, channels, rng)[:6]:
        assert np.array_equal(pp.resize(img, size, interp), cv2_resize(img, size, interp))


@pytest.mark.parametrize("src,dst", [((7, 5), (3, 2)), ((5, 7), (2, 3)), ((11, 13), (4, 5)),
                                     ((7, 5), (84, 84)), ((3, 3), (7, 2)), ((1, 9), (1, 4)),
                                     ((9, 1), (2, 1)), ((1, 1), (5, 5)), ((12, 12), (4, 6)),
                                     ((512, 512), (84, 84)), ((84, 84), (512, 512)),
                                     ((250, 160), (84, 84)), ((160, 210), (84, 84))])
@pytest.mark.parametrize("interp", ["area", "linear"])
def test_resize_odd_shapes(src, dst, interp, host_path):
    rng = np.random.default_rng(11)
    for c in (1, 3):
        for img in random_images(*src, c, rng, 3):
            assert np.array_equal(pp.resize(img, dst, interp), cv2_resize(img, dst, interp))


@pytest.mark.parametrize("interp", ["area", "linear"])
def test_resize_random_shapes(interp, host_path):
    """Random source and destination shapes (down, up, mixed, integer factors), 1-4 channels."""
    rng = np.random.default_rng(17 + INTERPS[interp])
    for t in range(300):
        big = t % 4 == 0
        sh, sw = rng.integers(100, 400, 2) if big else rng.integers(1, 60, 2)
        dh, dw = rng.integers(1, 300, 2) if big else rng.integers(1, 60, 2)
        c = int(rng.integers(1, 5))
        img = rng.integers(0, 256, (sh, sw) if c == 1 else (sh, sw, c), dtype=np.uint8)
        if t % 3 == 0:
            img = (img > 127).astype(np.uint8) * np.uint8(rng.integers(1, 256))
        want = cv2_resize(img, (int(dh), int(dw)), interp).reshape(
            (int(dh), int(dw)) + img.shape[2:])
        assert np.array_equal(pp.resize(img, (int(dh), int(dw)), interp), want), \
            (img.shape, (dh, dw))


@pytest.mark.parametrize("interp", ["area", "linear"])
@pytest.mark.parametrize("size", [(84, 84), (105, 80), (110, 84), (42, 42), (70, 80), (210, 160),
                                  (250, 200), (300, 100)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_numpy_reference_matches_cv2_and_core(size, interp):
    """The slow reference documents the algorithm; it agrees with cv2 and with the core."""
    rng = np.random.default_rng(3)
    for c in (1, 3):
        images = random_images(*SRC, c, rng, 1) + structured_images(*SRC, c, rng)[5:8]
        for img in images:
            want = cv2_resize(img, size, interp)
            assert np.array_equal(reference_resize(img, size, interp), want)
            assert np.array_equal(pp.resize(img, size, interp), want)


def test_simd_area_resize_agrees_with_portable_loop():
    """Gray KIND_AREA plans of many shapes (1-4 taps, 1-8 rows per output, widths up to
    MAX_SIZE, windows that end at the image's last byte): the AVX2 path and the portable
    loop give the same bytes, and both give cv2's."""
    if not pp.set_simd(True):
        pytest.skip("this CPU has no AVX2")
    rng = np.random.default_rng(23)
    taken = 0
    try:
        for t in range(400):
            dh, dw = (int(v) for v in rng.integers(1, 200, 2))
            sh = int(dh * rng.uniform(1.0, 7.5)) + int(rng.integers(0, 3))
            sw = int(dw * rng.uniform(1.0, 3.5)) + int(rng.integers(0, 3))
            sh, sw = min(max(sh, dh), pp.MAX_SIZE), min(max(sw, dw), pp.MAX_SIZE)
            if t % 50 == 0:
                sw, dw = pp.MAX_SIZE, int(rng.integers(pp.MAX_SIZE // 3 + 1, pp.MAX_SIZE))
            img = rng.integers(0, 256, (sh, sw), dtype=np.uint8)
            if t % 3 == 0:
                img = (img > 127).astype(np.uint8) * np.uint8(255)
            r = pp.Resizer((sh, sw), (dh, dw), "area")
            if r.kind != "area":
                continue
            taken += 1
            pp.set_simd(True)
            fast = r(img)
            pp.set_simd(False)
            slow = r(img)
            assert np.array_equal(fast, slow), ((sh, sw), (dh, dw))
            assert np.array_equal(fast, cv2_resize(img, (dh, dw), "area")), ((sh, sw), (dh, dw))
    finally:
        pp.set_simd(True)
    assert taken > 200


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 63, 1000, 210 * 160])
def test_palette_lookup_matches_numpy(n, host_path):
    """Blocks of all-even indices (screens), odd ones (PAL colour loss) and mixtures."""
    rng = np.random.default_rng(n)
    table = rng.integers(0, 256, 256, dtype=np.uint8)
    mixed = rng.integers(0, 256, n, dtype=np.uint8)
    mixed[: min(n, 256)] = np.arange(min(n, 256))  # every index, including 0x80..0xff
    even = mixed & 0xFE
    sparse_odd = even.copy()
    sparse_odd[::97] |= 1
    for src in (mixed, even, sparse_odd):
        assert np.array_equal(pp.palette_lookup(table, src), table[src])
        out = np.empty(n, np.uint8)
        assert pp.palette_lookup(table, src, out=out) is out and np.array_equal(out, table[src])


def test_palette_lookup_errors():
    table = np.arange(256, dtype=np.uint8)
    with pytest.raises(ValueError, match="256 entries"):
        pp.palette_lookup(table[:128], np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        pp.palette_lookup(table, np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="out must be"):
        pp.palette_lookup(table, np.zeros(4, np.uint8), out=np.empty(5, np.uint8))


def test_integer_fast_path_rounding_is_visible():
    """OpenCV rounds 2x2 block sums half up but other paths half to even; a 0/1
    checkerboard averages to exactly 0.5 everywhere, so the two disagree on every byte."""
    img = (np.indices(SRC).sum(axis=0) % 2).astype(np.uint8)
    assert np.all(cv2_resize(img, (105, 80), "area") == 1)      # (2 + 2) >> 2
    assert np.all(pp.resize(img, (105, 80)) == 1)
    assert np.all(cv2_resize(img, (210, 80), "area") == 0)      # rint(1 * 0.5) = 0
    assert np.all(pp.resize(img, (210, 80)) == 0)


def test_plan_bytes_are_the_device_struct():
    r = pp.Resizer(SRC, (84, 84))
    raw = r.plan_bytes()
    assert raw.dtype == np.uint8 and raw.shape == (22584,)
    head = raw[:48].view(np.int32)
    assert list(head[:7]) == [3, 3, 210, 160, 84, 84, 1]        # kind, interp, shapes, channels
    assert np.array_equal(pp.Resizer(SRC, (84, 84)).plan_bytes(), raw)   # deterministic


def test_linear_exact_2x2_downscale_uses_area_path():
    assert pp.Resizer(SRC, (105, 80), "linear").kind == "area_2x2"
    assert pp.Resizer(SRC, (84, 84), "linear").kind == "linear"


# ---------------------------------------------------------------------------------------
# Batches, fused max-pool.

@pytest.mark.parametrize("channels", [1, 3])
def test_batch_and_maxpool_match_cv2(channels):
    rng = np.random.default_rng(5)
    shape = SRC if channels == 1 else SRC + (channels,)
    a = rng.integers(0, 256, (9,) + shape, dtype=np.uint8)
    b = rng.integers(0, 256, (9,) + shape, dtype=np.uint8)
    r = pp.Resizer(shape, (84, 84))
    want = np.stack([cv2_resize(x, (84, 84), "area") for x in a])
    assert np.array_equal(r.batch(a), want)
    pooled = np.maximum(a, b)
    want_pooled = np.stack([cv2_resize(x, (84, 84), "area") for x in pooled])
    assert np.array_equal(r.maxpool_batch(a, b), want_pooled)
    assert np.array_equal(r.maxpool(a[0], b[0]), want_pooled[0])
    assert np.array_equal(pp.maxpool(a, b), pooled)
    out = np.empty((9, 84, 84) + (() if channels == 1 else (channels,)), np.uint8)
    assert r.batch(a, out=out) is out and np.array_equal(out, want)
    # an empty batch is an empty result (reshape(0, -1) failed before the n == 0 return)
    assert r.batch(a[:0]).shape == r.maxpool_batch(a[:0], b[:0]).shape == (0,) + out.shape[1:]


def test_input_views_and_errors():
    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, (220, 170, 3), dtype=np.uint8)
    view = big[5:215, 3:163]                     # non-contiguous source
    r = pp.Resizer(SRC + (3,), (84, 84))
    assert np.array_equal(r(view), cv2_resize(np.ascontiguousarray(view), (84, 84), "area"))
    with pytest.raises(ValueError, match=r"\(210, 160, 3\)"):
        r(big)
    with pytest.raises(ValueError, match="uint8"):
        r(view.astype(np.float32))
    with pytest.raises(ValueError, match=r"\(N, 210, 160, 3\)"):
        r.batch(view)
    with pytest.raises(ValueError, match="shape"):
        r(view, out=np.empty((84, 84), np.uint8))
    with pytest.raises(ValueError, match="channels"):
        pp.Resizer((210, 160, 5), (84, 84))
    with pytest.raises(ValueError, match="1..512"):
        pp.Resizer((210, 160), (84, 1000))
    with pytest.raises(ValueError, match="interpolation"):
        pp.Resizer((210, 160), (84, 84), "cubic")
    with pytest.raises(ValueError, match="interpolation"):
        pp.Resizer((210, 160), (84, 84), 2)
    with pytest.raises(ValueError, match="shape"):
        pp.maxpool(view, big)


# ---------------------------------------------------------------------------------------
# Frame stacks.

def test_stack_and_ring_agree_with_ale_semantics():
    rng = np.random.default_rng(2)
    n, shape = 4, (84, 84)
    stack = np.zeros((n,) + shape, np.uint8)
    ring = np.zeros((n,) + shape, np.uint8)
    head = 0
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(11)]
    for k, f in enumerate(frames):
        pp.stack_push(stack, f)
        head = pp.ring_push(ring, head, f)
        want = np.stack(([np.zeros(shape, np.uint8)] * n + frames[:k + 1])[-n:])
        assert np.array_equal(stack, want)
        assert np.array_equal(pp.ring_observation(ring, head), want)
    assert head == len(frames) % n
    with pytest.raises(ValueError, match="frame must be uint8 of shape"):
        pp.stack_push(stack, np.zeros((84, 83), np.uint8))
    with pytest.raises(ValueError, match="head"):
        pp.ring_observation(ring, n)


# ---------------------------------------------------------------------------------------
# The header builds for the GPU and as strict host C++ under FMA-happy flags.

KERNELS = pathlib.Path(hybridsim.core_include_dir()) / "preprocess_kernels.cu"


def test_preprocess_headers_ship_with_the_package():
    include = pathlib.Path(hybridsim.core_include_dir())
    for name in ("preprocess.h", "preprocess_kernels.cu"):
        assert (include / name).is_file()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_preprocess_kernels_compile_with_nvcc(arch, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    result = subprocess.run(
        [nvcc, "-std=c++17", f"-arch={arch}", "-Werror", "all-warnings", "-c",
         "-I", hybridsim.core_include_dir(), str(KERNELS), "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


def test_nvcc_device_code_has_no_fused_float_sums(tmp_path):
    """nvcc fuses a*b+c into fma.rn.f32 by default (--fmad=true), which would change the
    area sums; preprocess.h uses __fmul_rn/__fadd_rn so none may appear in the PTX."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    ptx = tmp_path / "k.ptx"
    result = subprocess.run([nvcc, "-std=c++17", "-arch=sm_90", "--ptx", "-I",
                             hybridsim.core_include_dir(), str(KERNELS), "-o", str(ptx)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    text = ptx.read_text()
    assert ".entry resize_kernel" in text and "mul.rn.f32" in text
    assert "fma.rn.f32" not in text


HOST_PROGRAM = r"""
#include "preprocess.h"
#include <stdio.h>
// argv: src_h src_w c dst_h dst_w interp in out
int main(int argc, char** argv) {
  if (argc != 9) return 2;
  int sh, sw, c, dh, dw, in;
  sscanf(argv[1], "%d", &sh); sscanf(argv[2], "%d", &sw); sscanf(argv[3], "%d", &c);
  sscanf(argv[4], "%d", &dh); sscanf(argv[5], "%d", &dw); sscanf(argv[6], "%d", &in);
  static hs::pp::ResizePlan plan;
  if (hs::pp::resize_plan_init(&plan, sh, sw, dh, dw, c, in) != 0) return 3;
  static uint8_t src[512 * 512 * 4], dst[512 * 512 * 4];
  FILE* f = fopen(argv[7], "rb");
  int n = 0, k;
  size_t frame = (size_t)sh * sw * c, out = (size_t)dh * dw * c;
  FILE* g = fopen(argv[8], "wb");
  while (fread(src, 1, frame, f) == frame) {
    hs::pp::resize_image(plan, src, dst);
    for (k = 0; k < (int)out; ++k) dst[k] = hs::pp::resize_element_at(plan, hs::pp::Src1{src}, k) == dst[k] ? dst[k] : 0xEE;
    fwrite(dst, 1, out, g);
    ++n;
  }
  fclose(f); fclose(g);
  return n > 0 ? 0 : 4;
}
"""


@pytest.mark.parametrize("flags", [["-O3", "-march=native", "-ffp-contract=fast"],
                                   ["-O2", "-mfma", "-ffp-contract=fast"], ["-O0"]],
                         ids=["native-fast", "fma", "O0"])
def test_host_build_is_exact_under_contracting_flags(flags, tmp_path):
    """FMA contraction would change the float sums; the header's barriers prevent it."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    src = tmp_path / "resize_main.cpp"
    src.write_text(HOST_PROGRAM)
    exe = tmp_path / "resize_main"
    result = subprocess.run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", *flags,
                             "-I", hybridsim.core_include_dir(), str(src), "-o", str(exe)],
                            capture_output=True, text=True)
    if result.returncode != 0 and "-mfma" in flags and "error: unrecognized" in result.stderr:
        pytest.skip("compiler has no -mfma")
    assert result.returncode == 0, result.stderr[-4000:]
    rng = np.random.default_rng(9)
    for size, c in [((84, 84), 1), ((84, 84), 3), ((110, 84), 1), ((42, 42), 3), ((250, 200), 1)]:
        images = random_images(*SRC, c, rng, 8) + structured_images(*SRC, c, rng)
        (tmp_path / "in.bin").write_bytes(b"".join(i.tobytes() for i in images))
        run = subprocess.run([str(exe), *map(str, (*SRC, c, *size, 3)),
                              str(tmp_path / "in.bin"), str(tmp_path / "out.bin")])
        assert run.returncode == 0
        got = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.uint8)
        want = np.concatenate([cv2_resize(i, size, "area").reshape(-1) for i in images])
        assert np.array_equal(got, want)


# ---------------------------------------------------------------------------------------
# End to end against ale-py's AtariVectorEnv (its bundled OpenCV 4.10 cv::resize).

def _vector_env_pairs(game, size, gray, steps, interp="area", seed=0):
    """Yield (AtariVectorEnv observation, our observation) per step, same actions."""
    ale_py = pytest.importorskip("ale_py")
    from ale_py.vector_env import AtariVectorEnv
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    h, w = size
    env = AtariVectorEnv(game=game, num_envs=1, num_threads=1, img_height=h, img_width=w,
                         grayscale=gray, noop_max=0, use_fire_reset=False,
                         repeat_action_probability=0.0, reward_clipping=False)
    try:
        obs, _ = env.reset(seed=seed)
        ale = ale_py.ALEInterface()
        ale.setInt("random_seed", seed)
        ale.setFloat("repeat_action_probability", 0.0)
        ale.loadROM(ale_py.roms.get_rom_path(game))
        ale.reset_game()
        actions = ale.getMinimalActionSet()
        grab = ale.getScreenGrayscale if gray else ale.getScreenRGB
        first = grab()
        r = pp.Resizer(first.shape, size, interp)
        stack = np.zeros((4,) + r.dst_shape, np.uint8)     # ALE: cleared, then the reset frame
        pp.stack_push(stack, r.maxpool(first, np.zeros_like(first)))
        yield obs[0], stack.copy()
        rng = np.random.default_rng(seed)
        for _ in range(steps):
            a = int(rng.integers(len(actions)))
            obs, *_ = env.step(np.array([a]))
            last = [None, None]
            for skip in range(4, 0, -1):                   # frameskip 4, keep the last two
                ale.act(actions[a])
                if ale.game_over():
                    return
                if skip <= 2:
                    last[skip - 1] = grab()
            pp.stack_push(stack, r.maxpool(last[0], last[1]))
            yield obs[0], stack.copy()
    finally:
        env.close()


@pytest.mark.parametrize("game", ["breakout", "ms_pacman"])
@pytest.mark.parametrize("size,gray", [((84, 84), True), ((84, 84), False), ((110, 84), True),
                                       ((105, 80), True), ((42, 42), False), ((210, 160), True),
                                       ((250, 200), True), ((300, 100), False)])
def test_matches_ale_vector_env_observations(game, size, gray):
    n = 0
    for theirs, ours in _vector_env_pairs(game, size, gray, steps=40):
        assert theirs.shape == ours.shape
        assert np.array_equal(theirs, ours), f"step {n}: {np.count_nonzero(theirs != ours)} bytes differ"
        n += 1
    assert n > 20
    assert len(np.unique(ours)) > 2          # real pictures, not blank frames


def test_vector_env_comparison_has_teeth():
    """INTER_LINEAR instead of INTER_AREA must be caught by the comparison above."""
    differs = [not np.array_equal(t, o)
               for t, o in _vector_env_pairs("breakout", (84, 84), True, steps=5, interp="linear")]
    assert any(differs)


KERNEL_EMULATION = r"""
// Runs the CUDA kernels of preprocess_kernels.cu on the CPU: a sequential grid.
#include <stdio.h>
#include <stdlib.h>
struct Dim3 { unsigned x; };
static Dim3 blockIdx, blockDim, threadIdx;
#define __global__
#include "preprocess_kernels.cu"
// argv: n stack_num sh sw c dh dw in_a in_b stack_io resized_out
int main(int argc, char** argv) {
  if (argc != 12) return 2;
  int v[7];
  for (int k = 0; k < 7; ++k) v[k] = atoi(argv[k + 1]);
  int n = v[0], stack_num = v[1];
  static hs::pp::ResizePlan plan;
  if (hs::pp::resize_plan_init(&plan, v[2], v[3], v[5], v[6], v[4], hs::pp::INTERP_AREA)) return 3;
  size_t in = (size_t)v[2] * v[3] * v[4], out = (size_t)v[5] * v[6] * v[4];
  uint8_t* a = (uint8_t*)malloc(n * in); uint8_t* b = (uint8_t*)malloc(n * in);
  uint8_t* st = (uint8_t*)malloc(n * stack_num * out); uint8_t* rs = (uint8_t*)malloc(n * out);
  FILE* f;
  f = fopen(argv[8], "rb"); if (fread(a, 1, n * in, f) != n * in) return 4; fclose(f);
  f = fopen(argv[9], "rb"); if (fread(b, 1, n * in, f) != n * in) return 4; fclose(f);
  f = fopen(argv[10], "rb"); if (fread(st, 1, n * stack_num * out, f) != n * stack_num * out) return 4; fclose(f);
  blockDim.x = 128;
  unsigned blocks = (unsigned)((n * out + 127) / 128);
  for (blockIdx.x = 0; blockIdx.x < blocks; ++blockIdx.x)
    for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x) {
      resize_kernel(&plan, a, rs, n);
      maxpool_resize_push_kernel(&plan, a, b, st, stack_num, n);
    }
  f = fopen(argv[10], "wb"); fwrite(st, 1, n * stack_num * out, f); fclose(f);
  f = fopen(argv[11], "wb"); fwrite(rs, 1, n * out, f); fclose(f);
  return 0;
}
"""


@pytest.mark.parametrize("size,channels", [((84, 84), 1), ((84, 84), 3), ((105, 80), 1),
                                           ((64, 64), 3)])
def test_cuda_kernels_emulated_on_cpu(size, channels, tmp_path):
    """The kernels' indexing (one thread per byte, batch, fused max-pool + stack shift),
    run as a sequential grid on the CPU, against cv2 and a NumPy stack."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    src = tmp_path / "emu.cpp"
    src.write_text(KERNEL_EMULATION)
    exe = tmp_path / "emu"
    result = subprocess.run([cxx, "-std=c++17", "-O2", "-Wall", "-Werror", "-I",
                             hybridsim.core_include_dir(), str(src), "-o", str(exe)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    rng = np.random.default_rng(4)
    n, stack_num = 5, 4
    shape = (n,) + SRC + ((channels,) if channels > 1 else ())
    a = rng.integers(0, 256, shape, dtype=np.uint8)
    b = rng.integers(0, 256, shape, dtype=np.uint8)
    dst = size + ((channels,) if channels > 1 else ())
    stack = rng.integers(0, 256, (n, stack_num) + dst, dtype=np.uint8)
    for name, arr in (("a", a), ("b", b), ("stack", stack)):
        (tmp_path / name).write_bytes(arr.tobytes())
    run = subprocess.run([str(exe), *map(str, (n, stack_num, *SRC, channels, *size)),
                          *(str(tmp_path / x) for x in ("a", "b", "stack", "resized"))])
    assert run.returncode == 0
    got_stack = np.frombuffer((tmp_path / "stack").read_bytes(), np.uint8).reshape(stack.shape)
    got_resized = np.frombuffer((tmp_path / "resized").read_bytes(), np.uint8).reshape((n,) + dst)
    want_resized = np.stack([cv2_resize(x, size, "area") for x in a])
    want_pooled = np.stack([cv2_resize(x, size, "area") for x in np.maximum(a, b)])
    want_stack = np.concatenate([stack[:, 1:], want_pooled[:, None]], axis=1)
    assert np.array_equal(got_resized, want_resized)
    assert np.array_equal(got_stack, want_stack)


def test_preprocess_kernels_compile_with_nvrtc():
    """NVRTC has no libc headers: the header must compile there unchanged."""
    from nvrtc import compile_to_ptx, nvrtc_library
    lib = nvrtc_library()
    if lib is None:
        pytest.skip("NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12 or set HYBRIDSIM_NVRTC_LIB)")
    rc, log, ptx = compile_to_ptx(lib, KERNELS)
    assert rc == 0, log[-4000:]
    for kernel in (b"resize_kernel", b"maxpool_resize_push_kernel"):
        assert b".entry " + kernel in ptx
    assert b"fma.rn.f32" not in ptx      # the area sums must not be fused on the device
