#!/usr/bin/env python3
"""Generates nnc's TFLite test corpus: small per-operation TFLite models with reference
inputs and outputs from TFLite's reference kernels.

Usage (from the repository root):

    target/tf-venv/bin/python scripts/gen_tflite_testdata.py          # every case
    target/tf-venv/bin/python scripts/gen_tflite_testdata.py conv_same  # only these
    target/tf-venv/bin/python scripts/gen_tflite_testdata.py --list    # case names

Needs TensorFlow (2.21; `python3 -m venv target/tf-venv && target/tf-venv/bin/pip
install tensorflow-cpu==2.21.0`). Models are built as tf.functions over numpy
constants, converted with tf.lite.TFLiteConverter, and run by tf.lite.Interpreter with
the REFERENCE kernels (OpResolverType.BUILTIN_REF, one thread): those outputs are what
nnc's kernels are tested against.

Writes, for every case:

    testdata/tflite/<case>/model.tflite
    testdata/tflite/<case>/input_<i>.npy    the exact tensors fed, in the model's input
                                            types (int8/uint8 for quantized models)
    testdata/tflite/<case>/output_<i>.npy   what the reference kernels computed

A case name ends in `_int8` (full-integer int8 model, int8 inputs and outputs), `_uint8`
(the same model with uint8 inputs and outputs: QUANTIZE ops convert at both ends),
`_int8_float_io` (int8 inside, float inputs and outputs) or `_legacy_uint8` (uint8
everywhere, from TF1-style fake quantization); the others are float32, among them
`conv_float16_weights` (float16 weights behind DEQUANTIZE), `fully_connected_sparse`
(sparse weights behind DENSIFY) and `external_buffers` (constants stored after the
flatbuffer). `unsupported_ops` has a model only. testdata/tflite/README.md says more.

Everything is deterministic: each case seeds its own numpy generator from its name, so
a rerun rewrites the same files (and adding a case changes no other). A full run also
deletes directories of cases that no longer exist. The files are committed; the Rust
tests (compiler/tests/tflite.rs) never run Python.
"""

from __future__ import annotations

import argparse
import warnings
import os
import re
import shutil
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import flatbuffers  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.lite.python import schema_py_generated as schema  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "testdata" / "tflite"


# =====================================================================================
# Cases
# =====================================================================================


@dataclass
class Spec:
    """One model input: its shape, dtype and how to draw reference values."""

    shape: list[int | None]
    dtype: tf.DType = tf.float32
    low: float = -2.0
    high: float = 2.0
    # Shape actually fed when `shape` has a dynamic (None) dimension.
    run_shape: list[int] | None = None


@dataclass
class Case:
    name: str
    build: Callable[[np.random.Generator], Callable]
    inputs: list[Spec]
    mode: str = "float"
    # Extra converter settings applied after the mode's.
    tweak: Callable | None = None
    # Rewrites the converted model (schema object API) to get an operator form the
    # converter does not emit by itself.
    edit: Callable | None = None


CASES: dict[str, Case] = {}
QUANT_SUFFIX = {"int8": "_int8", "uint8": "_uint8", "int8_float_io": "_int8_float_io"}


def case(name: str, inputs: list[Spec], modes=("float",), tweak=None, edit=None):
    """Registers a builder under `name` for each conversion mode."""

    def register(build):
        for mode in modes:
            full = name + QUANT_SUFFIX.get(mode, "")
            assert full not in CASES, full
            CASES[full] = Case(full, build, inputs, mode, tweak, edit)
        return build

    return register


# ---- editing converted models -------------------------------------------------------

OP = schema.BuiltinOperator


def opcode_index(m, code: int, custom: str | None = None) -> int:
    """The model's operator-code entry for `code` (and custom name), added if missing."""
    for i, oc in enumerate(m.operatorCodes):
        if max(oc.builtinCode, oc.deprecatedBuiltinCode) == code and (custom is None or oc.customCode == custom.encode()):
            return i
    oc = schema.OperatorCodeT()
    oc.builtinCode = code
    # Codes past 127 live only in builtin_code; the byte field holds the placeholder.
    oc.deprecatedBuiltinCode = min(code, OP.PLACEHOLDER_FOR_GREATER_OP_CODES)
    oc.version = 1
    oc.customCode = custom
    m.operatorCodes.append(oc)
    return len(m.operatorCodes) - 1


def ops_of(m, code: int):
    """The main subgraph's operators whose operator code is `code`."""
    return [
        op
        for op in m.subgraphs[0].operators
        if max(m.operatorCodes[op.opcodeIndex].builtinCode, m.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode) == code
    ]


def retype(op, opcode: int, options_type=schema.BuiltinOptions.NONE, options=None) -> None:
    op.opcodeIndex = opcode
    op.builtinOptionsType = options_type
    op.builtinOptions = options


def pack(m) -> bytes:
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def externalize_buffers(m) -> bytes:
    """Moves every buffer's bytes after the flatbuffer, located by `offset` and `size`
    (the layout TFLite uses for models over 2 GB)."""
    blobs = []
    for buffer in m.buffers:
        if buffer.data is not None and len(buffer.data) > 0:
            blobs.append((buffer, bytes(bytearray(buffer.data))))
            buffer.data = None
            buffer.offset = 2  # any value > 1 makes the packed layout final
            buffer.size = len(blobs[-1][1])
    size = len(pack(m))
    align = lambda n: (n + 15) // 16 * 16  # noqa: E731
    cursor = align(size)
    for buffer, blob in blobs:
        buffer.offset = cursor
        cursor = align(cursor + len(blob))
    flat = pack(m)
    assert len(flat) == size
    out = bytearray(flat)
    for buffer, blob in blobs:
        out.extend(b"\0" * (buffer.offset - len(out)))
        out.extend(blob)
    return bytes(out)


def edit_model(model: bytes, edit: Callable) -> bytes:
    m = schema.ModelT.InitFromPackedBuf(bytearray(model), 0)
    # An edit either changes the model in place or writes the file itself.
    written = edit(m)
    return written if isinstance(written, bytes) else pack(m)


def w(rng: np.random.Generator, *shape, scale=0.5) -> tf.Tensor:
    """A float32 weight constant."""
    return tf.constant((rng.standard_normal(shape) * scale).astype(np.float32))


IMG = Spec([1, 8, 8, 3])
QUANT = ("float", "int8")
QUANT_U8 = ("float", "int8", "uint8")

# ---- convolutions -------------------------------------------------------------------


def conv_case(name, x_shape, filt, strides, padding, dilations=1, act=None, modes=QUANT, bias=True):
    @case(name, [Spec(x_shape)], modes)
    def build(rng):
        k = w(rng, *filt)
        b = w(rng, filt[-1], scale=0.2)

        def f(x):
            y = tf.nn.conv2d(x, k, strides=strides, padding=padding, dilations=dilations)
            if bias:
                y = tf.nn.bias_add(y, b)
            return act(y) if act else y

        return f


conv_case("conv_same_relu6", [1, 8, 8, 3], [3, 3, 3, 4], 1, "SAME", act=tf.nn.relu6, modes=QUANT_U8)
conv_case("conv_valid_stride2", [1, 9, 9, 3], [3, 3, 3, 5], 2, "VALID", act=tf.nn.relu)
conv_case("conv_same_stride2", [1, 8, 8, 2], [3, 3, 2, 4], 2, "SAME")
conv_case("conv_dilated", [1, 9, 9, 2], [3, 3, 2, 3], 1, "SAME", dilations=2)
conv_case("conv_1x1_no_bias", [1, 4, 4, 6], [1, 1, 6, 4], 1, "VALID", bias=False)
conv_case("conv_grouped", [1, 6, 6, 4], [3, 3, 2, 6], 1, "SAME", modes=("float",))


def depthwise_case(name, x_shape, filt, strides, padding, dilations=1, act=None, modes=QUANT):
    @case(name, [Spec(x_shape)], modes)
    def build(rng):
        k = w(rng, *filt)
        b = w(rng, filt[2] * filt[3], scale=0.2)

        def f(x):
            y = tf.nn.depthwise_conv2d(
                x, k, strides=[1, strides, strides, 1], padding=padding, dilations=[dilations, dilations]
            )
            y = tf.nn.bias_add(y, b)
            return act(y) if act else y

        return f


depthwise_case("depthwise_same_relu6", [1, 8, 8, 4], [3, 3, 4, 1], 1, "SAME", act=tf.nn.relu6, modes=QUANT_U8)
depthwise_case("depthwise_multiplier2_valid", [1, 7, 7, 3], [3, 3, 3, 2], 2, "VALID")
depthwise_case("depthwise_dilated", [1, 9, 9, 2], [3, 3, 2, 1], 1, "SAME", dilations=2, modes=("float",))


def transpose_conv_case(name, x_shape, filt, out_shape, stride, padding, modes=QUANT):
    @case(name, [Spec(x_shape)], modes)
    def build(rng):
        # conv2d_transpose filters are [h, w, out_channels, in_channels].
        k = w(rng, *filt)
        b = w(rng, filt[2], scale=0.2)

        def f(x):
            y = tf.nn.conv2d_transpose(x, k, out_shape, strides=stride, padding=padding)
            return tf.nn.bias_add(y, b)

        return f


transpose_conv_case("transpose_conv_same_stride2", [1, 4, 4, 3], [3, 3, 2, 3], [1, 8, 8, 2], 2, "SAME")
transpose_conv_case("transpose_conv_valid", [1, 3, 3, 2], [3, 3, 4, 2], [1, 7, 7, 4], 2, "VALID", modes=("float",))


def fc_case(name, x_shape, units, act=None, modes=QUANT_U8, bias=True):
    @case(name, [Spec(x_shape)], modes)
    def build(rng):
        k = w(rng, x_shape[-1], units)
        b = w(rng, units, scale=0.2)

        def f(x):
            y = tf.matmul(x, k)
            if bias:
                y = y + b
            return act(y) if act else y

        return f


fc_case("fully_connected", [2, 12], 5)
fc_case("fully_connected_relu", [1, 16], 8, act=tf.nn.relu, modes=("float",))


@case("fully_connected_keep_dims", [Spec([2, 3, 6])], QUANT)
def _(rng):
    k = w(rng, 6, 4)
    b = w(rng, 4, scale=0.2)
    return lambda x: tf.tensordot(x, k, axes=1) + b


# ---- elementwise --------------------------------------------------------------------


def binary_case(name, fn, a_shape, b_shape, modes=QUANT, const_b=False, low=-2.0, high=2.0):
    inputs = [Spec(a_shape, low=low, high=high)] + ([] if const_b else [Spec(b_shape, low=low, high=high)])

    @case(name, inputs, modes)
    def build(rng):
        if const_b:
            c = tf.constant(rng.uniform(low, high, b_shape).astype(np.float32))
            return lambda a: fn(a, c)
        return fn

    return build


binary_case("add", tf.add, [1, 4, 4, 3], [1, 4, 4, 3], QUANT_U8)
binary_case("add_broadcast_relu", lambda a, b: tf.nn.relu(a + b), [2, 3, 4], [4])
binary_case("sub", tf.subtract, [1, 3, 5], [1, 3, 5])
binary_case("sub_const", tf.subtract, [2, 6], [6], const_b=True, modes=("float",))
binary_case("mul", tf.multiply, [1, 4, 4, 3], [1, 1, 1, 3])
binary_case("mul_const_relu6", lambda a, b: tf.nn.relu6(a * b), [1, 5, 3], [3], const_b=True, modes=("float",))
binary_case("div", tf.divide, [2, 5], [2, 5], modes=("float",), low=0.5, high=3.0)
binary_case("maximum", tf.maximum, [2, 3, 4], [2, 3, 4])
binary_case("minimum", tf.minimum, [2, 3, 4], [4], const_b=True)


def unary_case(name, fn, shape, modes=QUANT, low=-3.0, high=3.0):
    @case(name, [Spec(shape, low=low, high=high)], modes)
    def build(rng):
        return fn


unary_case("relu", tf.nn.relu, [1, 4, 4, 3])
unary_case("relu6", tf.nn.relu6, [2, 3, 5], low=-2.0, high=8.0)
unary_case("relu_n1_to_1", lambda x: tf.minimum(tf.maximum(x, -1.0), 1.0), [2, 7])
unary_case("logistic", tf.math.sigmoid, [2, 3, 4], QUANT_U8)
unary_case("tanh", tf.math.tanh, [3, 5])
unary_case("hard_swish", lambda x: x * tf.nn.relu6(x + 3.0) * (1.0 / 6.0), [1, 4, 4, 3], low=-5.0, high=5.0)
unary_case("leaky_relu", lambda x: tf.nn.leaky_relu(x, alpha=0.2), [2, 3, 4])
unary_case("exp", tf.math.exp, [2, 6], ("float",))
unary_case("log", tf.math.log, [2, 6], ("float",), low=0.1, high=4.0)
unary_case("sqrt", tf.math.sqrt, [2, 6], ("float",), low=0.0, high=4.0)
unary_case("rsqrt", tf.math.rsqrt, [2, 6], ("float",), low=0.1, high=4.0)
unary_case("softmax", tf.nn.softmax, [2, 10], QUANT_U8)


def softmax_beta(m):
    for op in ops_of(m, OP.SOFTMAX):
        op.builtinOptions.beta = 0.5


@case("softmax_beta", [Spec([1, 3, 6])], edit=softmax_beta)
def _(rng):
    return tf.nn.softmax


@case("prelu", [Spec([1, 4, 4, 3])], QUANT)
def _(rng):
    alpha = tf.constant(rng.uniform(0.05, 0.5, [1, 1, 3]).astype(np.float32))

    # The form the converter recognizes as PRELU: relu(x) + relu(-x) * (-alpha).
    def f(x):
        return tf.nn.relu(x) + tf.nn.relu(-x) * (-alpha)

    return f


# ---- pools --------------------------------------------------------------------------


def pool_case(name, fn, shape=(1, 8, 8, 3), modes=QUANT_U8):
    unary_case(name, fn, list(shape), modes)


pool_case("avg_pool_same", lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"))
pool_case("max_pool_valid", lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), modes=QUANT)
pool_case("max_pool_same_stride1", lambda x: tf.nn.max_pool2d(x, 3, 1, "SAME"), modes=("float",))


def to_l2_pool(m):
    # The converter has no L2_POOL_2D pattern: an AVERAGE_POOL_2D becomes one (same options).
    for op in ops_of(m, OP.AVERAGE_POOL_2D):
        op.opcodeIndex = opcode_index(m, OP.L2_POOL_2D)


@case("l2_pool", [Spec([1, 6, 6, 2])], edit=to_l2_pool)
def _(rng):
    return lambda x: tf.nn.avg_pool2d(x, 3, 3, "VALID")

# ---- shapes and data movement -------------------------------------------------------

unary_case("reshape", lambda x: tf.reshape(x, [2, 12]), [2, 3, 4])


def to_squeeze(m):
    # The converter turns every static squeeze into RESHAPE; make it a SQUEEZE again.
    for op in ops_of(m, OP.RESHAPE):
        options = schema.SqueezeOptionsT()
        options.squeezeDims = [0, 2]
        retype(op, opcode_index(m, OP.SQUEEZE), schema.BuiltinOptions.SqueezeOptions, options)
        op.inputs = op.inputs[:1]


@case("squeeze", [Spec([1, 3, 1, 4])], QUANT, edit=to_squeeze)
def _(rng):
    return lambda x: tf.squeeze(x, axis=[0, 2])


# With a dynamic dimension EXPAND_DIMS survives conversion (a static one becomes RESHAPE).
@case("expand_dims", [Spec([None, 5], run_shape=[1, 5])])
def _(rng):
    return lambda x: tf.expand_dims(x, axis=1)
unary_case("transpose", lambda x: tf.transpose(x, [0, 3, 1, 2]), [1, 2, 3, 4])
unary_case("strided_slice", lambda x: x[:, 1:7:2, ::-1, 1], [1, 8, 5, 3])
unary_case("strided_slice_masks", lambda x: x[0, :-1, 2:], [2, 4, 6], ("float",))
unary_case("slice", lambda x: tf.slice(x, [0, 1, 2], [2, 2, -1]), [2, 4, 5], ("float",))
unary_case("gather", lambda x: tf.gather(x, [2, 0, 2, 1], axis=1), [2, 3, 4], ("float",))
unary_case("split", lambda x: tf.split(x, 3, axis=-1), [2, 3, 6], ("float",))
unary_case("pad", lambda x: tf.pad(x, [[0, 0], [1, 2], [2, 1], [0, 0]]), [1, 3, 4, 2])
unary_case(
    "padv2", lambda x: tf.pad(x, [[0, 0], [1, 1], [0, 2], [0, 0]], constant_values=1.5), [1, 3, 3, 2], ("float",)
)
unary_case("mirror_pad_reflect", lambda x: tf.pad(x, [[0, 0], [2, 1], [1, 2], [0, 0]], mode="REFLECT"), [1, 4, 4, 2], ("float",))
unary_case("mirror_pad_symmetric", lambda x: tf.pad(x, [[1, 1], [0, 2]], mode="SYMMETRIC"), [3, 3], ("float",))
unary_case("space_to_depth", lambda x: tf.nn.space_to_depth(x, 2), [1, 4, 6, 2], ("float",))
unary_case("depth_to_space", lambda x: tf.nn.depth_to_space(x, 2), [1, 2, 3, 8], ("float",))
unary_case("resize_bilinear", lambda x: tf.compat.v1.image.resize_bilinear(x, [7, 9]), [1, 4, 5, 2])
unary_case(
    "resize_bilinear_align_corners",
    lambda x: tf.compat.v1.image.resize_bilinear(x, [7, 5], align_corners=True),
    [1, 3, 4, 2],
    ("float",),
)
unary_case(
    "resize_bilinear_half_pixel",
    lambda x: tf.image.resize(x, [6, 10], method="bilinear"),
    [1, 3, 4, 2],
    ("float",),
)
unary_case("resize_nearest", lambda x: tf.compat.v1.image.resize_nearest_neighbor(x, [8, 6]), [1, 4, 3, 2])
unary_case(
    "resize_nearest_half_pixel",
    lambda x: tf.image.resize(x, [6, 9], method="nearest"),
    [1, 4, 3, 2],
    ("float",),
)


@case("concatenation", [Spec([1, 3, 3, 2]), Spec([1, 3, 3, 4])], QUANT)
def _(rng):
    return lambda a, b: tf.concat([a, b], axis=-1)


@case("concatenation_relu", [Spec([2, 3]), Spec([2, 5])], ("float",))
def _(rng):
    return lambda a, b: tf.nn.relu(tf.concat([a, b], axis=1))


@case("pack", [Spec([2, 3]), Spec([2, 3]), Spec([2, 3])], ("float",))
def _(rng):
    return lambda a, b, c: tf.stack([a, b, c], axis=1)


@case("gather_runtime_indices", [Spec([5, 3]), Spec([4], tf.int32, 0, 5)], ("float",))
def _(rng):
    return lambda x, i: tf.gather(x, i, axis=0)


@case("shape_reshape", [Spec([None, 4, 3], run_shape=[2, 4, 3])], ("float",))
def _(rng):
    # SHAPE survives conversion only with a dynamic dimension; nnc folds it to a constant.
    return lambda x: tf.reshape(x, [tf.shape(x)[0], -1])


# ---- reductions ---------------------------------------------------------------------

unary_case("mean", lambda x: tf.reduce_mean(x, axis=[1, 2]), [1, 4, 4, 3])
unary_case("mean_keep_dims", lambda x: tf.reduce_mean(x, axis=[-1], keepdims=True), [2, 3, 4], ("float",))
unary_case("sum", lambda x: tf.reduce_sum(x, axis=[1]), [2, 3, 4], ("float",))
unary_case("reduce_max", lambda x: tf.reduce_max(x, axis=[0, 2], keepdims=True), [2, 3, 4], ("float",))
unary_case("arg_max", lambda x: tf.math.argmax(x, axis=-1), [2, 3, 5])
unary_case("arg_min", lambda x: tf.math.argmin(x, axis=1, output_type=tf.int32), [2, 4, 3], ("float",))

# ---- matrix multiply ----------------------------------------------------------------


@case("batch_matmul", [Spec([2, 3, 4]), Spec([2, 4, 5])], QUANT)
def _(rng):
    return lambda a, b: tf.matmul(a, b)


@case("batch_matmul_adj", [Spec([2, 4, 3]), Spec([2, 5, 4])], ("float",))
def _(rng):
    return lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True)


@case("batch_matmul_broadcast", [Spec([2, 2, 3, 4]), Spec([4, 5])], ("float",))
def _(rng):
    return lambda a, b: tf.matmul(a, b)


# ---- quantization-specific ----------------------------------------------------------


@case("quantize_dequantize", [IMG], ("int8_float_io",))
def _(rng):
    k = w(rng, 3, 3, 3, 4)
    return lambda x: tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME"))


@case("conv_float16_weights", [IMG])
def _(rng):
    k = w(rng, 3, 3, 3, 4)
    b = w(rng, 4)
    return lambda x: tf.nn.bias_add(tf.nn.conv2d(x, k, 1, "SAME"), b)


CASES["conv_float16_weights"].mode = "float16"


@case("external_buffers", [IMG], edit=externalize_buffers)
def _(rng):
    k = w(rng, 3, 3, 3, 4)
    b = w(rng, 4)
    return lambda x: tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, k, 1, "SAME"), b))


@case("fully_connected_sparse", [Spec([2, 16])])
def _(rng):
    # 90% zeros in 1x4 blocks along the input dimension: the converter keeps the
    # weights sparse (and inserts DENSIFY).
    dense = rng.standard_normal((16, 16)).astype(np.float32)
    mask = rng.random((16, 4)) < 0.1
    dense *= np.repeat(mask, 4, axis=1)
    k = tf.constant(dense)
    return lambda x: tf.matmul(x, k)


CASES["fully_connected_sparse"].mode = "sparse"




def make_unsupported(m):
    # RELU and RELU6 become the same custom operator, TANH becomes CUMSUM (an extended
    # builtin code, 128, past the byte field), and EXP reads CUMSUM's output.
    for op in ops_of(m, OP.RELU) + ops_of(m, OP.RELU6):
        retype(op, opcode_index(m, OP.CUSTOM, "NncTestCustomOp"))
    for op in ops_of(m, OP.TANH):
        retype(op, opcode_index(m, OP.CUMSUM))


@case("unsupported_ops", [Spec([2, 3])], edit=make_unsupported)
def _(rng):
    return lambda x: (tf.nn.relu(x), tf.nn.relu6(x), tf.exp(tf.math.tanh(x)), x + 1.0)


CASES["unsupported_ops"].mode = "model_only"


# ---- uint8 everywhere: TF1 fake quantization ----------------------------------------


def legacy_case(name: str, shape: list[int], input_range: tuple[float, float]):
    """A TF1 graph with fake-quant nodes, converted with inference_type uint8: every
    activation and weight is uint8 (per-tensor), as in pre-TF2 quantized models."""

    def register(body):
        def build(rng):
            tf1 = tf.compat.v1
            graph = tf.Graph()
            with graph.as_default():
                x = tf1.placeholder(tf.float32, shape, name="x0")
                lo, hi = input_range
                y = body(rng, fake_quant(x, lo, hi))
                with tf1.Session(graph=graph) as sess:
                    converter = tf1.lite.TFLiteConverter.from_session(sess, [x], [y])
                    converter.inference_type = tf.uint8
                    # real = (q - mean) / std covers [lo, hi] with 256 steps.
                    std = 255.0 / (hi - lo)
                    converter.quantized_input_stats = {"x0": (-lo * std, std)}
                    return converter.convert()

        CASES[name] = Case(name, build, [Spec(shape, low=input_range[0], high=input_range[1])], "legacy_uint8")
        return body

    return register


def fake_quant(x, lo, hi):
    return tf.quantization.fake_quant_with_min_max_args(x, min=lo, max=hi)


def fq_weight(rng, *shape, scale=0.5):
    k = (rng.standard_normal(shape) * scale).astype(np.float32)
    bound = float(np.abs(k).max())
    return fake_quant(tf.constant(k), -bound, bound)


@legacy_case("conv_pool_legacy_uint8", [1, 8, 8, 3], (-2.0, 2.0))
def _(rng, x):
    y = tf.nn.conv2d(x, fq_weight(rng, 3, 3, 3, 4), 1, "SAME")
    y = fake_quant(tf.nn.relu6(tf.nn.bias_add(y, tf.constant(rng.standard_normal(4).astype(np.float32) * 0.2))), 0.0, 6.0)
    return fake_quant(tf.nn.avg_pool2d(y, 2, 2, "VALID"), 0.0, 6.0)


@legacy_case("depthwise_add_legacy_uint8", [1, 6, 6, 4], (-2.0, 2.0))
def _(rng, x):
    k = fq_weight(rng, 3, 3, 4, 1)
    y = tf.nn.depthwise_conv2d(x, k, [1, 1, 1, 1], "SAME")
    y = fake_quant(tf.nn.bias_add(y, tf.constant(rng.standard_normal(4).astype(np.float32) * 0.2)), -4.0, 4.0)
    y = fake_quant(y + x, -5.0, 5.0)
    return fake_quant(tf.nn.max_pool2d(y, 2, 2, "VALID"), -5.0, 5.0)


@legacy_case("fully_connected_softmax_legacy_uint8", [2, 12], (-2.0, 2.0))
def _(rng, x):
    y = tf.matmul(x, fq_weight(rng, 12, 6)) + tf.constant(rng.standard_normal(6).astype(np.float32) * 0.2)
    y = fake_quant(y, -6.0, 6.0)
    return fake_quant(tf.nn.softmax(y), 0.0, 255.0 / 256.0)


# =====================================================================================
# Conversion and reference runs
# =====================================================================================


def sample(rng: np.random.Generator, spec: Spec) -> np.ndarray:
    shape = spec.run_shape or spec.shape
    if spec.dtype == tf.int32:
        return rng.integers(int(spec.low), int(spec.high), shape).astype(np.int32)
    return rng.uniform(spec.low, spec.high, shape).astype(np.float32)


def convert(c: Case, fn: Callable, rng: np.random.Generator) -> bytes:
    if c.mode == "legacy_uint8":
        return fn  # the builder converted already
    specs = [tf.TensorSpec(s.shape, s.dtype, name=f"x{i}") for i, s in enumerate(c.inputs)]
    module = tf.Module()
    module.f = tf.function(fn, input_signature=specs)
    concrete = module.f.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    if c.mode in ("int8", "uint8", "int8_float_io"):
        # The calibrator feeds samples in the model's input order, which need not be
        # the function's argument order: learn it from a float conversion.
        float_model = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module).convert()
        order = [
            argument_index(d["name"], len(c.inputs))
            for d in tf.lite.Interpreter(model_content=float_model).get_input_details()
        ]
        calibration = []
        for _ in range(16):
            drawn = [sample(rng, s) for s in c.inputs]
            calibration.append([drawn[i] for i in order])
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: iter(calibration)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if c.mode != "int8_float_io":
            io = tf.int8 if c.mode == "int8" else tf.uint8
            converter.inference_input_type = io
            converter.inference_output_type = io
    elif c.mode == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif c.mode == "sparse":
        converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    if c.tweak:
        c.tweak(converter)
    model = converter.convert()
    return edit_model(model, c.edit) if c.edit else model


def reference(model: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    interpreter = tf.lite.Interpreter(
        model_content=model,
        num_threads=1,
        experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_REF,
    )
    inputs = interpreter.get_input_details()
    for d, x in zip(inputs, feeds):
        if list(d["shape"]) != list(x.shape):
            interpreter.resize_tensor_input(d["index"], x.shape)
    interpreter.allocate_tensors()
    for d, x in zip(inputs, feeds):
        interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    return [np.array(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()]


def quantize_feed(x: np.ndarray, detail: dict) -> np.ndarray:
    """The float sample in the model's input type (quantized with its parameters)."""
    dtype = detail["dtype"]
    if dtype in (np.float32, np.int32, np.int64):
        return x.astype(dtype)
    scale, zero_point = detail["quantization"]
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero_point, info.min, info.max).astype(dtype)


def argument_index(tensor_name: str, count: int) -> int:
    """Which function argument (`x<i>`) a model input tensor came from."""
    match = re.search(r"x(\d+)(:\d+)?$", tensor_name)
    if not match or int(match.group(1)) >= count:
        raise ValueError(f"cannot tell which argument input '{tensor_name}' is")
    return int(match.group(1))


def write_case(name: str) -> int:
    c = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    fn = c.build(rng)
    model = convert(c, fn, rng)
    out = CORPUS / name
    if c.mode == "model_only":
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        (out / "model.tflite").write_bytes(model)
        print(f"{name}: {len(model)} bytes (model only)")
        return 1
    details = tf.lite.Interpreter(model_content=model).get_input_details()
    floats = [sample(rng, s) for s in c.inputs]
    # The converter may order the model's inputs differently from the function's
    # arguments: input_<i>.npy follows the model (its subgraph inputs), matched by name.
    feeds = [quantize_feed(floats[argument_index(d["name"], len(floats))], d) for d in details]
    outputs = reference(model, feeds)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "model.tflite").write_bytes(model)
    for i, x in enumerate(feeds):
        np.save(out / f"input_{i}.npy", x)
    for i, y in enumerate(outputs):
        np.save(out / f"output_{i}.npy", y)
    ops = sorted({d["op_name"] for d in tf.lite.Interpreter(model_content=model)._get_ops_details()})
    print(f"{name}: {len(model)} bytes, ops {', '.join(ops)}")
    return 1 + len(feeds) + len(outputs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--list", action="store_true", help="list the case names and exit")
    args = parser.parse_args()
    if args.list:
        print("\n".join(CASES))
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    selected = args.cases or list(CASES)
    if not args.cases and CORPUS.exists():
        for stale in sorted(d for d in CORPUS.iterdir() if d.is_dir() and d.name not in CASES):
            print(f"removing {stale.relative_to(ROOT)} (no such case)")
            shutil.rmtree(stale)
    files = sum(write_case(name) for name in selected)
    print(f"wrote {files} files for {len(selected)} case(s) under {CORPUS.relative_to(ROOT)}")
    print(f"TensorFlow {tf.__version__}, numpy {np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
