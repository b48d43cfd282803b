#!/usr/bin/env python3
"""Per-operator test cases for MediaPipe's TFLite custom operators.

For each case this writes testdata/mediapipe/ops/<case>/: a one-operator model.tflite
(the custom operator with its options encoded as MediaPipe's models encode them: a packed
C struct or a flexbuffer map), input_<i>.npy for each model input, and output_<i>.npy
computed by the NumPy reference implementations below. Those are written from the
operators' published definitions (MediaPipe's mediapipe/util/tflite/operations/*.cc),
independently of nnc: straightforward loops, in the precision the definitions use
(float32 where MediaPipe's CPU kernels compute in float; where they mix in double
constants, as TransformTensorBilinear does, in the same mix). Landmarks2TransformMatrix
is computed in float64 (MediaPipe computes it in float32; the test's tolerance covers
the difference).

compiler/tests/mediapipe.rs compiles and runs every case and compares (float32 within
1e-5 absolute plus 1e-5 relative; argmax indices exactly).

Usage (from the repository root; NumPy and the flatbuffer schema module of LiteRT's pip
package, used only to write the models):
    python3 -m venv scripts/.venv-mediapipe
    scripts/.venv-mediapipe/bin/pip install numpy ai-edge-litert flatbuffers
    scripts/.venv-mediapipe/bin/python scripts/gen_mediapipe_refs.py
"""

import math
import os
import shutil
import struct

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema
from flatbuffers import flexbuffers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "testdata", "mediapipe", "ops")
F32 = np.float32
SAME, VALID = 1, 2  # TfLitePadding


# ---- writing one-operator models ---------------------------------------------------


def write_model(path, op_name, version, options, inputs, consts, outputs):
    """inputs: [(name, array)] model inputs; consts: [(name, array)] constant inputs
    (operator inputs are inputs then consts, in the order `order` of names);
    outputs: [(name, shape)]."""
    model = schema.ModelT()
    model.version = 3
    model.description = b"nnc MediaPipe custom operator test"
    model.buffers = [schema.BufferT()]
    code = schema.OperatorCodeT()
    code.builtinCode = schema.BuiltinOperator.CUSTOM
    code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = op_name.encode()
    code.version = version
    model.operatorCodes = [code]
    graph = schema.SubGraphT()
    graph.tensors = []

    def tensor(name, shape, ty, data=None):
        t = schema.TensorT()
        t.name = name.encode()
        t.shape = list(shape)
        t.type = ty
        if data is not None:
            b = schema.BufferT()
            b.data = np.ascontiguousarray(data).tobytes()
            model.buffers.append(b)
            t.buffer = len(model.buffers) - 1
        else:
            t.buffer = 0
        graph.tensors.append(t)
        return len(graph.tensors) - 1

    index = {}
    for name, a in inputs:
        index[name] = tensor(name, a.shape, schema.TensorType.FLOAT32)
    for name, a in consts:
        index[name] = tensor(name, a.shape, schema.TensorType.FLOAT32, a)
    out_index = [tensor(name, shape, schema.TensorType.FLOAT32) for name, shape in outputs]
    graph.inputs = [index[n] for n, _ in inputs]
    graph.outputs = out_index
    op = schema.OperatorT()
    op.opcodeIndex = 0
    op.inputs = [index[n] for n in options["order"]]
    op.outputs = out_index
    op.customOptions = list(options["bytes"])
    op.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
    graph.operators = [op]
    model.subgraphs = [graph]
    builder = flatbuffers.Builder(4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    with open(path, "wb") as f:
        f.write(builder.Output())


def save_case(name, op_name, version, options, inputs, consts, outputs):
    d = os.path.join(OUT, name)
    os.makedirs(d)
    write_model(
        os.path.join(d, "model.tflite"),
        op_name,
        version,
        options,
        inputs,
        consts,
        [(f"out{k}", y.shape) for k, y in enumerate(outputs)],
    )
    for k, (_, a) in enumerate(inputs):
        np.save(os.path.join(d, f"input_{k}.npy"), a.astype(F32))
    for k, y in enumerate(outputs):
        np.save(os.path.join(d, f"output_{k}.npy"), y.astype(F32))


def packed(*fields):
    return struct.pack(f"<{len(fields)}i", *fields)


# ---- reference implementations -----------------------------------------------------


def transpose_conv_bias(x, w, b, padding, sw, sh):
    """Convolution2DTransposeBias: every input pixel scatters input x weights into the
    output window at (in * stride - pad); bias added; MediaPipe's output size."""
    n, h, wd, c = x.shape
    o, kh, kw, i = w.shape
    assert i == c

    def axis(size, k, s):
        total = max(0, k - (size - 1) % s - 1) if padding == SAME else 0
        return s * (size - 1) + k - total, total // 2

    out_h, top = axis(h, kh, sh)
    out_w, left = axis(wd, kw, sw)
    y = np.zeros((n, out_h, out_w, o), dtype=np.float64)
    y += b.astype(np.float64)
    for b_ in range(n):
        for iy in range(h):
            for ix in range(wd):
                for fy in range(kh):
                    for fx in range(kw):
                        oy, ox = iy * sh - top + fy, ix * sw - left + fx
                        if 0 <= oy < out_h and 0 <= ox < out_w:
                            y[b_, oy, ox, :] += w[:, fy, fx, :].astype(np.float64) @ x[
                                b_, iy, ix, :
                            ].astype(np.float64)
    return y.astype(F32)


def clamp(v, activation):
    lo, hi = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}[activation]
    return min(max(v, lo), hi)


def max_pool_argmax(x, padding, sw, sh, fw, fh, activation):
    """MaxPoolingWithArgmax2D: the window maximum (first of equals, window positions
    row-major) and its position within the window, fy * fw + fx + 0.1, as float32."""
    n, h, w, c = x.shape

    def axis(size, f, s):
        out = (size + s - 1) // s if padding == SAME else (size - f + s) // s
        pad = max(((out - 1) * s + f - size) // 2, 0)
        return out, pad

    oh, pt = axis(h, fh, sh)
    ow, pl = axis(w, fw, sw)
    values = np.zeros((n, oh, ow, c), F32)
    indices = np.zeros((n, oh, ow, c), F32)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for ch in range(c):
                    best, at = F32(np.finfo(F32).min), (0, 0)
                    for fy in range(fh):
                        for fx in range(fw):
                            iy, ix = oy * sh - pt + fy, ox * sw - pl + fx
                            if 0 <= iy < h and 0 <= ix < w and x[b, iy, ix, ch] > best:
                                best, at = x[b, iy, ix, ch], (fy, fx)
                    values[b, oy, ox, ch] = clamp(best, activation)
                    indices[b, oy, ox, ch] = F32(at[0] * fw + at[1]) + F32(0.1)
    return values, indices


def max_unpooling(x, idx, sw, sh, fw, fh):
    """MaxUnpooling2D: output = input size x filter size, zeros, each input value
    written at (in * stride - pad + window position of its index); the index is
    truncated to an integer and split by C's truncating / and %; out-of-range targets
    are skipped; later writes win."""
    n, h, w, c = x.shape
    oh, ow = h * fh, w * fw
    pt = max(((h - 1) * sh + fh - oh) // 2, 0)
    pl = max(((w - 1) * sw + fw - ow) // 2, 0)
    y = np.zeros((n, oh, ow, c), F32)
    for b in range(n):
        for iy in range(h):
            for ix in range(w):
                for ch in range(c):
                    v = float(idx[b, iy, ix, ch])
                    # MediaPipe converts with a C cast, undefined for NaN and values
                    # beyond int32; nnc defines them to name no location.
                    if not abs(v) < 2.0**31:
                        continue
                    i = int(math.trunc(v))
                    wy = int(i / fw)  # truncation toward zero
                    wx = i - wy * fw
                    oy, ox = iy * sh - pt + wy, ix * sw - pl + wx
                    if 0 <= oy < oh and 0 <= ox < ow:
                        y[b, oy, ox, ch] = x[b, iy, ix, ch]
    return y


def landmarks_to_matrix(lm, subset, left, right, target, out_w, out_h, scale_x, scale_y):
    """Landmarks2TransformMatrix v2, in float64."""
    p = lm[0].astype(np.float64)
    rotation = target - math.atan2(p[right, 1] - p[left, 1], p[right, 0] - p[left, 0])
    c, s = math.cos(rotation), math.sin(rotation)
    pts = np.array([[c * p[i, 0] - s * p[i, 1], s * p[i, 0] + c * p[i, 1]] for i in subset])
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    crop_w, crop_h = hi - lo
    mx, my = (lo + hi) / 2
    cx, cy = math.cos(-rotation) * mx - math.sin(-rotation) * my, math.sin(
        -rotation
    ) * mx + math.cos(-rotation) * my

    def shift(x, y):
        m = np.eye(4)
        m[0, 3], m[1, 3] = x, y
        return m

    rot = np.eye(4)
    rot[:2, :2] = [[math.cos(-rotation), -math.sin(-rotation)], [math.sin(-rotation), math.cos(-rotation)]]
    scale = np.diag([scale_x * crop_w / out_w, scale_y * crop_h / out_h, 1.0, 1.0])
    t = shift(cx, cy) @ rot @ scale @ shift(-out_w / 2.0, -out_h / 2.0)
    return t.astype(F32)[None]


def transform_landmarks(lm, m):
    """TransformLandmarks v2: (x, y) through the matrix's first two rows, float32, in
    the order ((m0 x + m1 y) + m2 0) + m3; z copied."""
    m = m.reshape(16)
    y = lm.copy()
    for i in range(lm.shape[1]):
        x0, y0 = lm[0, i, 0], lm[0, i, 1]
        for r in range(2):
            y[0, i, r] = ((m[4 * r] * x0 + m[4 * r + 1] * y0) + m[4 * r + 2] * F32(0)) + m[4 * r + 3]
    return y


def transform_tensor_bilinear(x, m, out_h, out_w):
    """TransformTensorBilinear v2: output pixel (ox, oy) samples the input at the
    matrix's image of it, with the translation corrected for pixel centres (in double,
    rounded to float); zero outside [0, W-1] x [0, H-1]; corners beyond the input read 0."""
    _, h, w, c = x.shape
    m = m.reshape(16)

    def row(r):
        a, b, cc, d = (m[4 * r + k] for k in range(4))
        d = F32(float(d) + (float(a) * 0.5 + float(b) * 0.5 - 0.5))
        return a, b, cc, d

    rx, ry = row(0), row(1)
    y = np.zeros((1, out_h, out_w, c), F32)

    def read(r, col, ch):
        return x[0, r, col, ch] if 0 <= r < h and 0 <= col < w else F32(0)

    for oy in range(out_h):
        for ox in range(out_w):
            fx, fy = F32(ox), F32(oy)
            tx = ((rx[0] * fx + rx[1] * fy) + rx[2] * F32(0)) + rx[3]
            ty = ((ry[0] * fx + ry[1] * fy) + ry[2] * F32(0)) + ry[3]
            if tx < 0 or tx > w - 1 or ty < 0 or ty > h - 1:
                continue
            x0, y0 = np.floor(tx), np.floor(ty)
            right, lower = F32(tx - x0), F32(ty - y0)
            col, r = int(x0), int(y0)
            for ch in range(c):
                q11, q21 = read(r, col, ch), read(r, col + 1, ch)
                q12, q22 = read(r + 1, col, ch), read(r + 1, col + 1, ch)

                def mix(a, b):
                    return F32((1.0 - float(right)) * float(a) + float(F32(right * b)))

                upper, bottom = mix(q11, q21), mix(q12, q22)
                y[0, oy, ox, ch] = F32(float(F32(lower * bottom)) + (1.0 - float(lower)) * float(upper))
    return y


def affine(rng, scale, angle, tx, ty):
    m = np.eye(4, dtype=F32)
    c, s = math.cos(angle), math.sin(angle)
    m[0, :2] = [scale * c, -scale * s * 1.1]
    m[1, :2] = [scale * s, scale * c * 0.9]
    m[0, 3], m[1, 3] = tx, ty
    m[0, 2], m[1, 2] = rng.standard_normal(2)  # multiplied by z = 0: no effect
    return m[None]


# ---- cases -------------------------------------------------------------------------


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    rng = np.random.default_rng(20240607)

    # Convolution2DTransposeBias: inputs (input, weights, bias).
    for name, (h, w, c, o, k, s, padding) in {
        "transpose_conv_bias_same": (5, 4, 3, 2, 3, 2, SAME),
        "transpose_conv_bias_same_k4": (4, 5, 2, 3, 4, 2, SAME),
        "transpose_conv_bias_valid": (3, 4, 2, 2, 3, 2, VALID),
        "transpose_conv_bias_same_s1": (4, 4, 3, 2, 3, 1, SAME),
    }.items():
        x = rng.standard_normal((1, h, w, c)).astype(F32)
        wt = rng.standard_normal((o, k, k, c)).astype(F32)
        b = rng.standard_normal(o).astype(F32)
        y = transpose_conv_bias(x, wt, b, padding, s, s)
        save_case(
            name,
            "Convolution2DTransposeBias",
            1,
            {"order": ["x", "w", "b"], "bytes": packed(padding, s, s)},
            [("x", x)],
            [("w", wt), ("b", b)],
            [y],
        )

    # MaxPoolingWithArgmax2D: TfLitePoolParams (padding, stride_w, stride_h, filter_w,
    # filter_h, activation, then the computed padding MediaPipe ignores). Small integer
    # values, so windows hold ties.
    for name, (h, w, c, fw, fh, sw, sh, padding, act) in {
        "max_pool_argmax_same": (7, 6, 3, 3, 3, 2, 2, SAME, 0),
        "max_pool_argmax_valid_relu6": (6, 8, 2, 2, 3, 2, 1, VALID, 3),
        "max_pool_argmax_same_2x2": (5, 5, 2, 2, 2, 2, 2, SAME, 1),
    }.items():
        x = (rng.integers(-4, 8, (1, h, w, c)) * 0.75).astype(F32)
        values, indices = max_pool_argmax(x, padding, sw, sh, fw, fh, act)
        save_case(
            name,
            "MaxPoolingWithArgmax2D",
            1,
            {"order": ["x"], "bytes": packed(padding, sw, sh, fw, fh, act, 0, 0)},
            [("x", x)],
            [],
            [values, indices],
        )

    # MaxUnpooling2D: inputs (values, indices); indices include -1 and positions past
    # the window, whose targets may fall outside the output.
    for name, (h, w, c, fw, fh, sw, sh) in {
        "max_unpooling_2x2": (3, 4, 2, 2, 2, 2, 2),
        "max_unpooling_stride3": (3, 3, 2, 2, 2, 3, 3),
        "max_unpooling_3x3_s2": (4, 3, 1, 3, 3, 2, 2),
    }.items():
        x = rng.standard_normal((1, h, w, c)).astype(F32)
        idx = (rng.integers(-1, fw * fh + 2, (1, h, w, c)) + 0.1).astype(F32)
        if name == "max_unpooling_2x2":
            idx[0, 0, 0, 0], idx[0, 1, 1, 1], idx[0, 2, 3, 0] = np.nan, 3e9, -3e9
        y = max_unpooling(x, idx, sw, sh, fw, fh)
        save_case(
            name,
            "MaxUnpooling2D",
            1,
            {"order": ["x", "i"], "bytes": packed(SAME, sw, sh, fw, fh, 0, 0, 0)},
            [("x", x), ("i", idx)],
            [],
            [y],
        )

    # Landmarks2TransformMatrix v2: a flexbuffer map. An odd-length subset (MediaPipe
    # pairs the last index with itself).
    lm = (rng.uniform(20, 170, (1, 24, 3))).astype(F32)
    for name, (subset, left, right, target, ow, oh, sx, sy) in {
        "landmarks_to_transform_matrix": ([3, 7, 11, 2, 19, 5, 8], 4, 17, 0.0, 16, 16, 1.5, 1.5),
        "landmarks_to_transform_matrix_rotated": ([0, 23, 12, 9, 14, 6], 21, 1, 0.3, 24, 12, 1.2, 1.7),
    }.items():
        options = flexbuffers.Dumps(
            {
                "left_rotation_idx": left,
                "output_height": oh,
                "output_width": ow,
                "right_rotation_idx": right,
                "scale_x": sx,
                "scale_y": sy,
                "subset_idxs": subset,
                "target_rotation_radians": target,
            }
        )
        y = landmarks_to_matrix(lm, subset, left, right, target, ow, oh, sx, sy)
        save_case(
            name,
            "Landmarks2TransformMatrix",
            2,
            {"order": ["lm"], "bytes": options},
            [("lm", lm)],
            [],
            [y],
        )

    # TransformLandmarks v2: no options.
    for name, d in {"transform_landmarks_2d": 2, "transform_landmarks_3d": 3}.items():
        points = rng.uniform(-5, 20, (1, 9, d)).astype(F32)
        m = affine(rng, 1.7, 0.4, 31.5, -7.25)
        save_case(
            name,
            "TransformLandmarks",
            2,
            {"order": ["lm", "m"], "bytes": b""},
            [("lm", points), ("m", m)],
            [],
            [transform_landmarks(points, m)],
        )

    # TransformTensorBilinear v2: flexbuffer {output_height, output_width}; the matrix
    # maps part of the output outside the input.
    for name, (h, w, c, oh, ow, scale, angle, tx, ty) in {
        "transform_tensor_bilinear": (10, 12, 3, 7, 9, 1.3, 0.35, 1.5, -0.5),
        "transform_tensor_bilinear_shrink": (9, 9, 2, 12, 11, 0.6, -0.2, 0.75, 1.25),
    }.items():
        x = rng.standard_normal((1, h, w, c)).astype(F32)
        m = affine(rng, scale, angle, tx, ty)
        options = flexbuffers.Dumps({"output_height": oh, "output_width": ow})
        save_case(
            name,
            "TransformTensorBilinear",
            2,
            {"order": ["x", "m"], "bytes": options},
            [("x", x), ("m", m)],
            [],
            [transform_tensor_bilinear(x, m, oh, ow)],
        )

    for case in sorted(os.listdir(OUT)):
        print(case)


if __name__ == "__main__":
    main()
