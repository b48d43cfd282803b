#!/usr/bin/env python3
"""LiteRT reference outputs for MediaPipe's selfie segmentation models.

LiteRT cannot run MediaPipe's custom operator Convolution2DTransposeBias, so this script
rewrites a copy of each model: the custom operator becomes TFLite's builtin
TRANSPOSE_CONV (inputs output_shape, weights, input, bias), with the padding and strides
read from the custom options (MediaPipe's packed TfLiteTransposeConvParams: padding,
stride_width, stride_height as little-endian int32). For these models the two agree
exactly: MediaPipe's padding, max(0, k - (in - 1) % s - 1), and the builtin's padding
computed from the output size are both 0 (k = s = 2), and the output size is
s * (in - 1) + k. The script checks that before rewriting.

The reference runs on LiteRT's builtin CPU kernels (see the note in main()).

The input is not stored: it is a formula (`model_input` below), which
cli/tests/mediapipe_e2e.rs computes identically. Only the output is committed, as
testdata/mediapipe/<model>.output.npy (float32).

Usage (from the repository root, after scripts/fetch-models):
    python3 -m venv scripts/.venv-mediapipe
    scripts/.venv-mediapipe/bin/pip install numpy ai-edge-litert flatbuffers
    scripts/.venv-mediapipe/bin/python scripts/gen_mediapipe_model_refs.py
"""

import os
import struct
import sys

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "testdata", "external", "mediapipe")
OUT = os.path.join(ROOT, "testdata", "mediapipe")
NAMES = ["selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite"]


def model_input(shape):
    """The deterministic test input: a head-and-shoulders silhouette on a soft background.

    With h = row / height and w = column / width (float64), channel c and
    sq(v) = v * v:
        head   = sq((w - 0.5) / 0.16) + sq((h - 0.38) / 0.2)
        body   = sq((w - 0.5) / 0.38) + sq((h - 1.0) / 0.35)
        inside = 1 / (1 + exp(8 * (min(head, body) - 1)))
        skin   = (0.85, 0.62, 0.5)[c] + 0.05 * sin(40 * h + 30 * w)
        bg     = 0.3 + 0.2 * sin(6 * w + 2 * c) * cos(4 * h)
        x      = inside * skin + (1 - inside) * bg, rounded to float32.
    The model finds a person in it (outputs up to 1), so the comparison covers the
    whole sigmoid range rather than an empty mask.
    """
    _, height, width, channels = shape
    h = (np.arange(height, dtype=np.float64) / height)[:, None, None]
    w = (np.arange(width, dtype=np.float64) / width)[None, :, None]
    c = np.arange(channels, dtype=np.float64)[None, None, :]

    def sq(v):
        return v * v

    head = sq((w - 0.5) / 0.16) + sq((h - 0.38) / 0.2)
    body = sq((w - 0.5) / 0.38) + sq((h - 1.0) / 0.35)
    inside = 1.0 / (1.0 + np.exp(8.0 * (np.minimum(head, body) - 1.0)))
    skin = np.array([0.85, 0.62, 0.5])[None, None, :channels] + 0.05 * np.sin(40.0 * h + 30.0 * w)
    bg = 0.3 + 0.2 * np.sin(6.0 * w + 2.0 * c) * np.cos(4.0 * h)
    x = inside * skin + (1.0 - inside) * bg
    return x.astype(np.float32)[None]


def rewrite(buf):
    model = schema.ModelT.InitFromPackedBuf(buf, 0)
    graph = model.subgraphs[0]
    custom = [
        k
        for k, code in enumerate(model.operatorCodes)
        if code.customCode == b"Convolution2DTransposeBias"
    ]
    assert len(custom) == 1, "expected one Convolution2DTransposeBias operator code"
    code = schema.OperatorCodeT()
    code.builtinCode = schema.BuiltinOperator.TRANSPOSE_CONV
    code.deprecatedBuiltinCode = schema.BuiltinOperator.TRANSPOSE_CONV
    code.version = 4
    model.operatorCodes.append(code)
    new_code = len(model.operatorCodes) - 1
    for op in graph.operators:
        if op.opcodeIndex != custom[0]:
            continue
        padding, stride_w, stride_h = struct.unpack("<3i", bytes(op.customOptions[:12]))
        x, w, b = op.inputs
        xs = list(graph.tensors[x].shape)
        ws = list(graph.tensors[w].shape)
        out_shape = [int(v) for v in graph.tensors[op.outputs[0]].shape]
        # MediaPipe's output size and padding.
        for axis, s in ((1, stride_h), (2, stride_w)):
            k, n = ws[axis], xs[axis]
            pad = max(0, k - (n - 1) % s - 1) if padding == 1 else 0
            assert pad == 0, "this rewrite assumes zero padding"
            assert out_shape[axis] == s * (n - 1) + k - pad
        buffer = schema.BufferT()
        buffer.data = np.array(out_shape, dtype=np.int32).tobytes()
        model.buffers.append(buffer)
        tensor = schema.TensorT()
        tensor.shape = [4]
        tensor.type = schema.TensorType.INT32
        tensor.buffer = len(model.buffers) - 1
        tensor.name = b"output_shape_for_reference"
        graph.tensors.append(tensor)
        options = schema.TransposeConvOptionsT()
        options.padding = schema.Padding.SAME if padding == 1 else schema.Padding.VALID
        options.strideW = stride_w
        options.strideH = stride_h
        op.opcodeIndex = new_code
        op.inputs = [len(graph.tensors) - 1, w, x, b]
        op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
        op.builtinOptions = options
        op.customOptions = None
    builder = flatbuffers.Builder(len(buf) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in NAMES:
        path = os.path.join(MODELS, name)
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/fetch-models first")
        rewritten = rewrite(open(path, "rb").read())
        # LiteRT's builtin kernels, without the XNNPACK delegate it applies by default:
        # on selfie_segmentation XNNPACK's result differs from the builtin kernels' by
        # 2.0e-4 of the largest output (nnc's by 2.2e-5), more than the test allows.
        interpreter = Interpreter(
            model_content=rewritten,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )
        interpreter.allocate_tensors()
        detail = interpreter.get_input_details()[0]
        x = model_input(detail["shape"])
        interpreter.set_tensor(detail["index"], x)
        interpreter.invoke()
        out = interpreter.get_output_details()
        assert len(out) == 1
        y = interpreter.get_tensor(out[0]["index"]).astype(np.float32)
        stem = name[: -len(".tflite")]
        np.save(os.path.join(OUT, f"{stem}.output.npy"), y)
        print(f"{stem}: input {x.shape}, output {y.shape}, range [{y.min():.4f}, {y.max():.4f}]")


if __name__ == "__main__":
    main()
