#!/usr/bin/env python3
"""Generates nnc's ONNX test corpus: small ONNX models with reference inputs and outputs.

Usage (from the repository root):

    python3 scripts/gen_onnx_testdata.py            # regenerate every case
    python3 scripts/gen_onnx_testdata.py conv_plain gemm_trans_b   # only these cases
    python3 scripts/gen_onnx_testdata.py --list     # list the case names

Needs Python 3 with numpy, onnx (1.17) and onnxruntime (1.31; reference outputs come
from its CPUExecutionProvider, single-threaded, with graph optimizations disabled so
the reference is the model's own semantics).

Writes, for every case:

    testdata/onnx/<case>/model.onnx
    testdata/onnx/<case>/input_<i>.npy    graph inputs in graph order (initializers excluded)
    testdata/onnx/<case>/output_<i>.npy   graph outputs in graph order

plus testdata/models/tiny_cnn.onnx (+ tiny_cnn.input.npy, tiny_cnn.output.npy), the
README's example classifier. `testdata/onnx/unsupported_ops` has a model only: nnc must
reject it, so it has no reference output.

Everything is deterministic: each case seeds its own numpy generator from its name, so
running the script again rewrites every file byte for byte (and adding a case does not
change the others). A full run also deletes the directories of cases that no longer
exist. The files are committed; the Rust tests (compiler/tests/lowering.rs) never run
Python.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "testdata" / "onnx"
MODELS = ROOT / "testdata" / "models"

# A fixed IR version keeps the files identical whatever onnx release writes them
# (IR 8 is the oldest that carries opset 18, the newest opset used here).
IR_VERSION = 8
PRODUCER = "nnc gen_onnx_testdata.py"

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.uint64): TensorProto.UINT64,
    np.dtype(np.bool_): TensorProto.BOOL,
}


class Graph:
    """Builds one ONNX model; every tensor it makes comes from the case's own RNG."""

    def __init__(self, name: str, opset: int = 13, domains: dict[str, int] | None = None):
        self.name = name
        self.opset = opset
        self.domains = domains or {}
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[str] = []
        self.initializers: list[onnx.TensorProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self._counter = 0

    # ---- values ------------------------------------------------------------------

    def input(self, name: str, shape, data: np.ndarray | None = None, dtype=np.float32) -> str:
        """A graph input; its reference value is `data` or standard-normal floats."""
        if data is None:
            data = self.rng.standard_normal(shape).astype(dtype)
        data = np.asarray(data)
        assert list(data.shape) == list(shape), (name, data.shape, shape)
        self.inputs.append(helper.make_tensor_value_info(name, NP_TO_ONNX[data.dtype], list(shape)))
        self.feeds[name] = data
        return name

    def const(self, name: str, value) -> str:
        """An initializer."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, scale: float = 0.5) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def ints(self, name: str, values) -> str:
        return self.const(name, np.asarray(values, dtype=np.int64))

    def floats(self, name: str, values) -> str:
        return self.const(name, np.asarray(values, dtype=np.float32))

    # ---- nodes -------------------------------------------------------------------

    def node(self, op: str, inputs, outputs=1, name: str | None = None, domain: str = "", **attrs):
        """Adds a node; `outputs` is a count (fresh names) or a list of names. Returns
        the output name (one output) or the list of names."""
        self._counter += 1
        if isinstance(outputs, int):
            outputs = [f"{op.lower()}_{self._counter}_out{k}" if outputs > 1 else f"{op.lower()}_{self._counter}"
                       for k in range(outputs)]
        node = helper.make_node(op, list(inputs), list(outputs), name=name or f"{op.lower()}_{self._counter}",
                                domain=domain or None, **attrs)
        self.nodes.append(node)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def output(self, *names: str) -> None:
        self.outputs.extend(names)

    # ---- model -------------------------------------------------------------------

    def model(self, infer: bool = True) -> onnx.ModelProto:
        # A case whose operator onnx cannot infer (its function body trips onnx's own
        # inference) declares float outputs; onnxruntime's run supplies the shapes.
        float_outputs = getattr(self, "float_outputs_without_inference", False)
        outputs = []
        for n in self.outputs:
            if float_outputs:
                outputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
                continue
            v = onnx.ValueInfoProto()
            v.name = n
            outputs.append(v)
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outputs, self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in sorted(self.domains.items())]
        # Cases of newer types (float8: IR 9, int4: IR 10) set their own.
        ir_version = getattr(self, "ir_version", IR_VERSION)
        model = helper.make_model(graph, opset_imports=opsets, producer_name=PRODUCER, ir_version=ir_version)
        if infer and float_outputs:
            for o, value in zip(model.graph.output, run_reference(model, self.feeds)):
                o.type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, value.shape))
            onnx.checker.check_model(model)
        elif infer:
            # Declare the outputs' types and shapes as ONNX infers them (strictly, so a
            # malformed case fails here), without keeping the intermediate value_info.
            inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
            del model.graph.output[:]
            model.graph.output.extend(inferred.graph.output)
            for o in model.graph.output:
                if o.type.tensor_type.elem_type == 0:
                    # Contrib operators (com.microsoft) have no ONNX inference: declare a
                    # float output, then take type and shape from the reference run.
                    o.type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
            if any(not o.type.tensor_type.HasField("shape") for o in model.graph.output):
                # Shapes computed from shapes (Shape -> ... -> Reshape) are beyond ONNX's
                # inference: take them from the reference run.
                for o, value in zip(model.graph.output, run_reference(model, self.feeds)):
                    if not o.type.tensor_type.HasField("shape"):
                        elem = NP_TO_ONNX.get(value.dtype, o.type.tensor_type.elem_type)
                        o.type.CopyFrom(helper.make_tensor_type_proto(elem, value.shape))
            onnx.checker.check_model(model, full_check=True)
        return model


def run_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3  # errors only
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return [np.asarray(v) for v in session.run(names, feeds)]


# =====================================================================================
# Cases. Each function builds one Graph; @case registers it under its directory name.
# =====================================================================================

CASES: dict[str, Callable[[], Graph]] = {}


def case(fn):
    CASES[fn.__name__.rstrip("_")] = fn
    return fn


def positive(g: Graph, shape, low=0.2, high=3.0) -> np.ndarray:
    return g.rng.uniform(low, high, shape).astype(np.float32)


def small_ints(g: Graph, shape, low=-2, high=3) -> np.ndarray:
    """Integer-valued floats, so comparisons and arg-reductions see equal values."""
    return g.rng.integers(low, high, shape).astype(np.float32)


# ---- Conv ---------------------------------------------------------------------------

def conv_graph(name, x_shape, w_shape, bias=True, opset=13, **attrs) -> Graph:
    g = Graph(name, opset)
    x = g.input("x", x_shape)
    inputs = [x, g.weight("w", w_shape)]
    if bias:
        inputs.append(g.weight("b", [w_shape[0]]))
    g.output(g.node("Conv", inputs, ["y"], name="conv", **attrs))
    return g


@case
def conv_plain():
    return conv_graph("conv_plain", [1, 3, 5, 5], [4, 3, 3, 3], pads=[1, 1, 1, 1])


@case
def conv_strides_2():
    return conv_graph("conv_strides_2", [1, 3, 7, 7], [4, 3, 3, 3], pads=[1, 1, 1, 1], strides=[2, 2])


@case
def conv_dilations_2():
    return conv_graph("conv_dilations_2", [1, 3, 7, 7], [4, 3, 3, 3], pads=[2, 2, 2, 2], dilations=[2, 2])


@case
def conv_auto_pad_same_upper():
    # Input 6, stride 2, kernel 3: total padding 1, which SAME_UPPER puts at the end.
    return conv_graph("conv_auto_pad_same_upper", [1, 3, 6, 6], [4, 3, 3, 3], auto_pad="SAME_UPPER", strides=[2, 2])


@case
def conv_auto_pad_same_lower():
    return conv_graph("conv_auto_pad_same_lower", [1, 3, 6, 6], [4, 3, 3, 3], auto_pad="SAME_LOWER", strides=[2, 2])


@case
def conv_auto_pad_valid():
    return conv_graph("conv_auto_pad_valid", [1, 3, 6, 6], [4, 3, 3, 3], auto_pad="VALID")


@case
def conv_asymmetric_pads():
    # ONNX pads are [top, left, bottom, right] = [1, 2, 0, 1].
    return conv_graph("conv_asymmetric_pads", [1, 3, 5, 5], [4, 3, 3, 3], pads=[1, 2, 0, 1])


@case
def conv_no_bias():
    return conv_graph("conv_no_bias", [1, 3, 5, 5], [4, 3, 3, 3], bias=False, pads=[1, 1, 1, 1])


@case
def conv_depthwise():
    return conv_graph("conv_depthwise", [1, 4, 5, 5], [4, 1, 3, 3], group=4, pads=[1, 1, 1, 1])


@case
def conv_depthwise_multiplier_2():
    return conv_graph("conv_depthwise_multiplier_2", [1, 4, 5, 5], [8, 1, 3, 3], group=4, pads=[1, 1, 1, 1])


@case
def conv_grouped():
    return conv_graph("conv_grouped", [1, 4, 5, 5], [6, 2, 3, 3], group=2, pads=[1, 1, 1, 1])


@case
def conv_1d():
    return conv_graph("conv_1d", [1, 3, 8], [4, 3, 3], pads=[1, 1])


@case
def non_zero_gather():
    # torch.nonzero as detection post-processing writes it: the coordinates of the
    # positive scores (how many depends on the data), transposed to one row per hit,
    # and the scores at them gathered. Every shape after NonZero is known only at run
    # time.
    g = Graph("non_zero_gather", opset=13)
    x = g.input("x", [4, 6])
    scores = g.node("Relu", [x])
    hits = g.node("NonZero", [scores])
    rows = g.node("Transpose", [hits], perm=[1, 0])
    g.output(g.node("GatherND", [scores, rows]))
    g.output(hits)
    return g


@case
def non_max_suppression_gather():
    # NMS appended to a detector (as YOLO exports write it): 3 classes over 40 boxes,
    # thresholds as constants, then the selected boxes gathered. How many are selected
    # depends on the data; every shape after NMS is known only at run time.
    g = Graph("non_max_suppression_gather", opset=13)
    corner = g.rng.uniform(0, 80, (1, 40, 2)).astype(np.float32)
    size = g.rng.uniform(5, 30, (1, 40, 2)).astype(np.float32)
    boxes = g.input("boxes", [1, 40, 4], data=np.concatenate([corner, corner + size], axis=2))
    scores = g.input("scores", [1, 3, 40], data=g.rng.uniform(0, 1, (1, 3, 40)).astype(np.float32))
    selected = g.node("NonMaxSuppression", [boxes, scores, g.ints("max_out", [6]),
                                            g.floats("iou", [0.4]), g.floats("score", [0.3])])
    which = g.node("Gather", [selected, g.ints("box_column", 2)], axis=1)
    flat = g.node("Squeeze", [boxes, g.ints("batch_axis", [0])])
    g.output(selected, g.node("Gather", [flat, which], axis=0))
    return g


@case
def compress_runtime_condition():
    # The rows whose sum is positive, doubled: Compress's condition is computed, so how
    # many rows remain (and every shape after) is known only at run time.
    g = Graph("compress_runtime_condition", opset=13)
    x = g.input("x", [6, 3])
    keep = g.node("Greater", [g.node("ReduceSum", [x, g.ints("axes", [1])], keepdims=0),
                              g.floats("zero", 0.0)])
    rows = g.node("Compress", [x, keep], axis=0)
    g.output(g.node("Mul", [rows, g.floats("two", 2.0)]))
    return g


@case
def unique_values_and_rows():
    # Unique over token ids (sorted, all four outputs) and over the rows of a matrix with
    # repeated rows (first-occurrence order); the counts depend on the data.
    g = Graph("unique_values_and_rows", opset=13)
    ids = g.input("ids", [12], data=g.rng.integers(0, 6, 12).astype(np.int64))
    rows = g.rng.standard_normal((3, 4)).astype(np.float32)
    m = g.input("m", [5, 4], data=rows[[2, 0, 2, 1, 0]])
    g.output(*g.node("Unique", [ids], 4, sorted=1))
    values, first, inverse, counts = g.node("Unique", [m], 4, axis=0, sorted=0)
    g.output(values, inverse, counts)
    return g


@case
def reverse_sequence_rank3():
    # Time-major [T, B, C] with run-time lengths, and batch-major with constant ones.
    g = Graph("reverse_sequence_rank3", opset=13)
    x = g.input("x", [5, 3, 4])
    lens = g.input("lens", [3], data=np.array([5, 2, 3], dtype=np.int64))
    g.output(g.node("ReverseSequence", [x, lens], time_axis=0, batch_axis=1))
    y = g.input("y", [2, 6, 3])
    g.output(g.node("ReverseSequence", [y, g.ints("y_lens", [4, 6])], time_axis=1,
                    batch_axis=0))
    return g


@case
def float8_casts():
    # float32 through each float8 format and back. `x` spans subnormals, ties and
    # magnitudes beyond every format's range (saturating casts); `y` stays inside the
    # smallest range (448 is e4m3fnuz's 240 rounded up: kept below 240) for the
    # non-saturating casts, whose out-of-range results are NaN.
    g = Graph("float8_casts", opset=19)
    g.ir_version = 9
    special = np.array([0.0, -0.0, 1e-3, -2e-3, 0.0009765625, 0.013671875, 17.0, 19.0, 240.0,
                        250.0, 448.0, 464.0, 500.0, -600.0, 57344.0, 61440.0, 1e6, -1e6],
                       dtype=np.float32)
    x = g.input("x", [64], data=np.concatenate([special, (g.rng.standard_normal(46) * 30)
                                                 .astype(np.float32)]))
    y = g.input("y", [48], data=np.concatenate([special[:9], (g.rng.standard_normal(39) * 20)
                                                 .clip(-239, 239).astype(np.float32)]))
    formats = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
               TensorProto.FLOAT8E5M2FNUZ]
    for t in formats:
        narrow = g.node("Cast", [x], to=t, saturate=1)
        g.output(g.node("Cast", [narrow], to=TensorProto.FLOAT))
    for t in formats:
        narrow = g.node("Cast", [y], to=t, saturate=0)
        g.output(g.node("Cast", [narrow], to=TensorProto.FLOAT))
    return g


@case
def float8_quantize():
    # QuantizeLinear to float8 with a per-channel scale, then DequantizeLinear back.
    g = Graph("float8_quantize", opset=19)
    g.ir_version = 9
    x = g.input("x", [2, 4, 6])
    scale = g.floats("scale", [0.01, 0.02, 0.05, 0.1])
    zp = "zp"
    g.initializers.append(helper.make_tensor(zp, TensorProto.FLOAT8E4M3FN, [4], [0.0] * 4))
    q = g.node("QuantizeLinear", [x, scale, zp], axis=1)
    g.output(g.node("DequantizeLinear", [q, scale, zp], axis=1))
    return g


@case
def int4_weight_matmul():
    # 4-bit weight-only quantization as LLM exports write it: int4 and uint4 weights
    # with one scale (and zero point) per block of 16 input rows, dequantized by
    # DequantizeLinear and multiplied.
    g = Graph("int4_weight_matmul", opset=21)
    g.ir_version = 10
    x = g.input("x", [3, 64])
    g.initializers.append(helper.make_tensor(
        "w4", TensorProto.INT4, [64, 32], g.rng.integers(-8, 8, 64 * 32).tolist()))
    g.initializers.append(helper.make_tensor(
        "w4_zp", TensorProto.INT4, [4, 32], g.rng.integers(-2, 3, 4 * 32).tolist()))
    s4 = g.const("w4_scale", positive(g, (4, 32), 0.01, 0.1))
    w = g.node("DequantizeLinear", ["w4", s4, "w4_zp"], axis=0, block_size=16)
    g.output(g.node("MatMul", [x, w]))
    g.initializers.append(helper.make_tensor(
        "u4", TensorProto.UINT4, [64, 8], g.rng.integers(0, 16, 64 * 8).tolist()))
    g.initializers.append(helper.make_tensor(
        "u4_zp", TensorProto.UINT4, [4, 8], [8] * 32))
    su = g.const("u4_scale", positive(g, (4, 8), 0.01, 0.1))
    u = g.node("DequantizeLinear", ["u4", su, "u4_zp"], axis=0, block_size=16)
    g.output(g.node("MatMul", [x, u]))
    return g


@case
def conv_integer():
    # What ONNX Runtime's quantize_dynamic writes for a Conv: uint8 data with a zero
    # point, uint8 weights with their own, int32 sums; grouped, strided and padded.
    g = Graph("conv_integer", opset=13)
    x = g.input("x", [1, 4, 7, 7], data=g.rng.integers(0, 256, (1, 4, 7, 7)).astype(np.uint8))
    w = g.const("w", g.rng.integers(0, 256, (6, 2, 3, 3)).astype(np.uint8))
    xz, wz = g.const("x_zp", np.uint8(131)), g.const("w_zp", np.uint8(120))
    g.output(g.node("ConvInteger", [x, w, xz, wz], ["y"], name="conv", group=2,
                    pads=[1, 0, 1, 2], strides=[2, 1]))
    return g


@case
def conv_integer_wide():
    # Sums beyond 2^24 (64 channels x 9 taps x 255 x 255): nnc splits the input channels
    # into ranges whose float32 sums stay exact and adds their int32 results.
    g = Graph("conv_integer_wide", opset=13)
    x = g.input("x", [1, 64, 5, 5], data=g.rng.integers(200, 256, (1, 64, 5, 5)).astype(np.uint8))
    w = g.const("w", g.rng.integers(200, 256, (4, 64, 3, 3)).astype(np.uint8))
    g.output(g.node("ConvInteger", [x, w], ["y"], name="conv", pads=[1, 1, 1, 1]))
    return g


@case
def conv_integer_run_time_weights():
    g = Graph("conv_integer_run_time_weights", opset=13)
    x = g.input("x", [1, 3, 5, 5], data=g.rng.integers(0, 256, (1, 3, 5, 5)).astype(np.uint8))
    w = g.input("w", [2, 3, 3, 3], data=g.rng.integers(0, 256, (2, 3, 3, 3)).astype(np.uint8))
    xz, wz = g.const("x_zp", np.uint8(128)), g.const("w_zp", np.uint8(100))
    g.output(g.node("ConvInteger", [x, w, xz, wz], ["y"], name="conv", pads=[1, 1, 1, 1]))
    return g


@case
def conv_3d():
    return conv_graph("conv_3d", [1, 3, 4, 5, 5], [4, 3, 3, 3, 3], pads=[1, 1, 1, 1, 1, 1])


@case
def conv_3d_depth_stride_dilation():
    # Depth stride 2 and dilation 2, asymmetric pads, a 2-sample batch.
    return conv_graph("conv_3d_depth_stride_dilation", [2, 2, 9, 6, 5], [3, 2, 3, 2, 3],
                      pads=[2, 0, 1, 1, 1, 0], strides=[2, 1, 2], dilations=[2, 1, 1])


@case
def conv_3d_factorized():
    # R(2+1)D's pair: a spatial 1x3x3 convolution, then a temporal 3x1x1 one.
    g = Graph("conv_3d_factorized")
    x = g.input("x", [1, 3, 6, 7, 7])
    y = g.node("Conv", [x, g.weight("ws", [5, 3, 1, 3, 3]), g.weight("bs", [5])], name="spatial",
               pads=[0, 1, 1, 0, 1, 1])
    y = g.node("Relu", [y])
    y = g.node("Conv", [y, g.weight("wt", [4, 5, 3, 1, 1]), g.weight("bt", [4])], name="temporal",
               pads=[1, 0, 0, 1, 0, 0], strides=[2, 1, 1])
    g.output(y)
    return g


@case
def conv_3d_depthwise():
    # MViT's pooling and X3D's channel-wise convolutions.
    return conv_graph("conv_3d_depthwise", [1, 4, 5, 6, 6], [8, 1, 3, 3, 3], group=4,
                      pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 2])


@case
def conv_3d_grouped():
    return conv_graph("conv_3d_grouped", [1, 4, 6, 5, 5], [6, 2, 2, 1, 3], group=2,
                      pads=[0, 0, 1, 1, 0, 1], strides=[2, 1, 1])


@case
def conv_3d_same_upper_no_bias():
    return conv_graph("conv_3d_same_upper_no_bias", [1, 2, 5, 6, 6], [3, 2, 2, 3, 3], bias=False,
                      auto_pad="SAME_UPPER", strides=[2, 2, 2])


def batch_norm_params(g: Graph, prefix: str, c: int) -> list[str]:
    """Non-trivial BatchNormalization parameters: scale, bias, mean, var (var > 0)."""
    return [
        g.const(f"{prefix}_scale", g.rng.uniform(0.5, 1.5, c).astype(np.float32)),
        g.const(f"{prefix}_bias", (g.rng.standard_normal(c) * 0.3).astype(np.float32)),
        g.const(f"{prefix}_mean", (g.rng.standard_normal(c) * 0.3).astype(np.float32)),
        g.const(f"{prefix}_var", g.rng.uniform(0.5, 2.0, c).astype(np.float32)),
    ]


@case
def conv_batch_norm():
    g = Graph("conv_batch_norm")
    x = g.input("x", [1, 3, 5, 5])
    y = g.node("Conv", [x, g.weight("w", [4, 3, 3, 3]), g.weight("b", [4])], name="conv", pads=[1, 1, 1, 1])
    g.output(g.node("BatchNormalization", [y, *batch_norm_params(g, "bn", 4)], ["y"], name="bn", epsilon=1e-3))
    return g


@case
def conv_relu():
    g = Graph("conv_relu")
    x = g.input("x", [1, 3, 5, 5])
    y = g.node("Conv", [x, g.weight("w", [4, 3, 3, 3]), g.weight("b", [4])], name="conv", pads=[1, 1, 1, 1])
    g.output(g.node("Relu", [y], ["y"], name="relu"))
    return g


@case
def conv_clip_relu6():
    g = Graph("conv_clip_relu6")
    x = g.input("x", [1, 3, 5, 5], data=g.rng.standard_normal([1, 3, 5, 5]).astype(np.float32) * 4)
    y = g.node("Conv", [x, g.weight("w", [4, 3, 3, 3], 1.0), g.weight("b", [4])], name="conv", pads=[1, 1, 1, 1])
    lo, hi = g.floats("clip_min", 0.0), g.floats("clip_max", 6.0)
    g.output(g.node("Clip", [y, lo, hi], ["y"], name="clip"))
    return g


@case
def conv_clip_relu6_opset10_attributes():
    # Clip-6 (opsets 6 to 10) takes min and max as attributes. nnc supports opsets from
    # 7, so the model imports opset 10, whose Clip is still the version-6 form.
    g = Graph("conv_clip_relu6_opset10_attributes", opset=10)
    x = g.input("x", [1, 3, 5, 5], data=g.rng.standard_normal([1, 3, 5, 5]).astype(np.float32) * 4)
    y = g.node("Conv", [x, g.weight("w", [4, 3, 3, 3], 1.0), g.weight("b", [4])], name="conv", pads=[1, 1, 1, 1])
    g.output(g.node("Clip", [y], ["y"], name="clip", min=0.0, max=6.0))
    return g


@case
def conv_depthwise_dilated():
    return conv_graph("conv_depthwise_dilated", [1, 4, 7, 7], [4, 1, 3, 3], group=4, pads=[2, 2, 2, 2],
                      dilations=[2, 2])


# ---- Convolutions in context: what the layout and folding passes see -----------------

def conv_layer(g: Graph, x: str, name: str, c_in: int, c_out: int) -> str:
    return g.node("Conv", [x, g.weight(f"{name}_w", [c_out, c_in, 3, 3]), g.weight(f"{name}_b", [c_out])],
                  name=name, pads=[1, 1, 1, 1])


@case
def conv_reduce_mean_no_keepdims():
    # The classifier-head idiom x.mean(dim=(2, 3)).
    g = Graph("conv_reduce_mean_no_keepdims")
    y = conv_layer(g, g.input("x", [1, 3, 5, 5]), "conv", 3, 4)
    g.output(g.node("ReduceMean", [y], ["y"], name="mean", axes=[2, 3], keepdims=0))
    return g


@case
def conv_concat_channels():
    g = Graph("conv_concat_channels")
    x = g.input("x", [1, 3, 5, 5])
    a, b = conv_layer(g, x, "conv_a", 3, 4), conv_layer(g, x, "conv_b", 3, 2)
    g.output(g.node("Concat", [a, b], ["y"], name="concat", axis=1))
    return g


@case
def conv_softmax_channels():
    # Per-pixel class scores, as segmentation heads compute them.
    g = Graph("conv_softmax_channels")
    y = conv_layer(g, g.input("x", [1, 3, 5, 5]), "conv", 3, 4)
    g.output(g.node("Softmax", [y], ["y"], name="softmax", axis=1))
    return g


@case
def conv_then_transpose_to_nhwc():
    # Models that hand back NHWC end in an explicit Transpose, which meets the lowering's own.
    g = Graph("conv_then_transpose_to_nhwc")
    y = conv_layer(g, g.input("x", [1, 3, 5, 5]), "conv", 3, 4)
    g.output(g.node("Transpose", [y], ["y"], name="to_nhwc", perm=[0, 2, 3, 1]))
    return g


@case
def conv_mul_add_per_channel():
    # A batch norm written out as Mul and Add by [C,1,1] constants (a "scale" layer).
    g = Graph("conv_mul_add_per_channel")
    y = conv_layer(g, g.input("x", [1, 3, 5, 5]), "conv", 3, 4)
    y = g.node("Mul", [y, g.const("scale", g.rng.uniform(0.5, 1.5, [4, 1, 1]).astype(np.float32))], name="scale")
    g.output(g.node("Add", [y, g.weight("shift", [4, 1, 1])], ["y"], name="shift"))
    return g


@case
def conv_relu_batch_norm():
    # Batch norm after the activation cannot fold into the convolution.
    g = Graph("conv_relu_batch_norm")
    y = conv_layer(g, g.input("x", [1, 3, 5, 5]), "conv", 3, 4)
    y = g.node("Relu", [y], name="relu")
    g.output(g.node("BatchNormalization", [y, *batch_norm_params(g, "bn", 4)], ["y"], name="bn"))
    return g


# ---- ConvTranspose ------------------------------------------------------------------

def conv_transpose_graph(name, x_shape, w_shape, **attrs) -> Graph:
    g = Graph(name)
    x = g.input("x", x_shape)
    w, b = g.weight("w", w_shape), g.weight("b", [w_shape[1]])
    g.output(g.node("ConvTranspose", [x, w, b], ["y"], name="deconv", **attrs))
    return g


@case
def conv_transpose_basic():
    return conv_transpose_graph("conv_transpose_basic", [1, 3, 4, 4], [3, 2, 3, 3])


@case
def conv_transpose_strides_pads():
    return conv_transpose_graph("conv_transpose_strides_pads", [1, 3, 3, 3], [3, 2, 3, 3], strides=[2, 2],
                                pads=[1, 1, 1, 1])


@case
def conv_transpose_output_padding():
    # The PyTorch upsampling idiom: stride 2, pads 1, output_padding 1 doubles the size.
    return conv_transpose_graph("conv_transpose_output_padding", [1, 3, 3, 3], [3, 2, 3, 3], strides=[2, 2],
                                pads=[1, 1, 1, 1], output_padding=[1, 1])


@case
def conv_transpose_output_padding_no_pads():
    # output_padding beyond the end pad: the extra rows and columns hold only the bias.
    return conv_transpose_graph("conv_transpose_output_padding_no_pads", [1, 3, 3, 3], [3, 2, 3, 3], strides=[2, 2],
                                output_padding=[1, 1])


@case
def conv_transpose_output_shape():
    # Full output would be 7x7; output_shape asks for 6x6, so one row/column is cut.
    return conv_transpose_graph("conv_transpose_output_shape", [1, 3, 3, 3], [3, 2, 3, 3], strides=[2, 2],
                                output_shape=[6, 6])


@case
def conv_transpose_auto_pad_same_upper():
    return conv_transpose_graph("conv_transpose_auto_pad_same_upper", [1, 3, 3, 3], [3, 2, 3, 3], strides=[2, 2],
                                auto_pad="SAME_UPPER")


@case
def conv_transpose_3d():
    # A 3-D UNet's upsampling: kernel 2, stride 2.
    return conv_transpose_graph("conv_transpose_3d", [1, 4, 3, 4, 4], [4, 3, 2, 2, 2], strides=[2, 2, 2])


@case
def conv_transpose_3d_pads_output_padding():
    return conv_transpose_graph("conv_transpose_3d_pads_output_padding", [2, 2, 3, 3, 4], [2, 3, 3, 3, 2],
                                strides=[2, 1, 2], pads=[1, 1, 0, 1, 0, 1], output_padding=[1, 0, 1])


@case
def conv_transpose_3d_dilated_output_shape():
    return conv_transpose_graph("conv_transpose_3d_dilated_output_shape", [1, 2, 3, 3, 3], [2, 2, 2, 3, 2],
                                strides=[3, 1, 1], dilations=[2, 1, 2], output_shape=[8, 4, 5])


@case
def conv_transpose_1d():
    return conv_transpose_graph("conv_transpose_1d", [1, 3, 5], [3, 2, 3], strides=[2])


# ---- Gemm and MatMul ----------------------------------------------------------------

@case
def gemm_trans_b():
    g = Graph("gemm_trans_b")
    a = g.input("a", [2, 4])
    g.output(g.node("Gemm", [a, g.weight("b", [3, 4]), g.weight("c", [3])], ["y"], name="gemm", transB=1))
    return g


@case
def gemm_alpha_beta():
    g = Graph("gemm_alpha_beta")
    a = g.input("a", [2, 4])
    g.output(g.node("Gemm", [a, g.weight("b", [4, 3]), g.weight("c", [3])], ["y"], name="gemm", alpha=0.5, beta=2.0))
    return g


@case
def gemm_c_matrix():
    g = Graph("gemm_c_matrix")
    a = g.input("a", [2, 4])
    g.output(g.node("Gemm", [a, g.weight("b", [4, 3]), g.weight("c", [2, 3])], ["y"], name="gemm", beta=0.5))
    return g


@case
def gemm_c_column():
    # C [M, 1] broadcasts along the columns (per row). With M == N its element count
    # equals the number of units, but it is not a per-unit bias.
    g = Graph("gemm_c_column")
    a = g.input("a", [3, 4])
    g.output(g.node("Gemm", [a, g.weight("b", [4, 3]), g.weight("c", [3, 1])], ["y"], name="gemm"))
    return g


@case
def gemm_trans_a():
    g = Graph("gemm_trans_a")
    a = g.input("a", [4, 2])
    g.output(g.node("Gemm", [a, g.weight("b", [4, 3]), g.weight("c", [3])], ["y"], name="gemm", transA=1))
    return g


@case
def gemm_runtime_b():
    g = Graph("gemm_runtime_b")
    a, b = g.input("a", [2, 4]), g.input("b", [4, 3])
    g.output(g.node("Gemm", [a, b, g.weight("c", [3])], ["y"], name="gemm"))
    return g


@case
def gemm_runtime_b_trans_b_alpha_beta():
    g = Graph("gemm_runtime_b_trans_b_alpha_beta")
    a, b = g.input("a", [2, 4]), g.input("b", [3, 4])
    g.output(g.node("Gemm", [a, b, g.weight("c", [3])], ["y"], name="gemm", transB=1, alpha=0.5, beta=2.0))
    return g


@case
def matmul_const_2d_b_3d_a():
    g = Graph("matmul_const_2d_b_3d_a")
    a = g.input("a", [2, 3, 4])
    g.output(g.node("MatMul", [a, g.weight("b", [4, 5])], ["y"], name="matmul"))
    return g


@case
def matmul_const_1d_b():
    g = Graph("matmul_const_1d_b")
    a = g.input("a", [2, 3, 4])
    g.output(g.node("MatMul", [a, g.weight("b", [4])], ["y"], name="matmul"))
    return g


@case
def matmul_runtime_3d():
    g = Graph("matmul_runtime_3d")
    a, b = g.input("a", [2, 3, 4]), g.input("b", [2, 4, 5])
    g.output(g.node("MatMul", [a, b], ["y"], name="matmul"))
    return g


@case
def matmul_broadcast_batch():
    g = Graph("matmul_broadcast_batch")
    a, b = g.input("a", [2, 3, 4]), g.input("b", [4, 5])
    g.output(g.node("MatMul", [a, b], ["y"], name="matmul"))
    return g


@case
def matmul_1d_a():
    # A vector times constant weights: y[n] = sum_k a[k] * b[k, n], output rank 1.
    g = Graph("matmul_1d_a")
    a = g.input("a", [4])
    g.output(g.node("MatMul", [a, g.weight("b", [4, 5])], ["y"], name="matmul"))
    return g


@case
def matmul_1d_a_runtime_b():
    g = Graph("matmul_1d_a_runtime_b")
    a, b = g.input("a", [4]), g.input("b", [2, 4, 5])
    g.output(g.node("MatMul", [a, b], ["y"], name="matmul"))
    return g


# ---- BatchNormalization -------------------------------------------------------------

@case
def batch_norm_rank4():
    g = Graph("batch_norm_rank4")
    x = g.input("x", [1, 3, 4, 4])
    g.output(g.node("BatchNormalization", [x, *batch_norm_params(g, "bn", 3)], ["y"], name="bn"))
    return g


@case
def batch_norm_rank3():
    g = Graph("batch_norm_rank3")
    x = g.input("x", [2, 3, 4])
    g.output(g.node("BatchNormalization", [x, *batch_norm_params(g, "bn", 3)], ["y"], name="bn"))
    return g


@case
def batch_norm_rank2():
    g = Graph("batch_norm_rank2")
    x = g.input("x", [2, 3])
    g.output(g.node("BatchNormalization", [x, *batch_norm_params(g, "bn", 3)], ["y"], name="bn"))
    return g


# ---- Activations --------------------------------------------------------------------

def unary_graph(name, op, shape=(2, 3, 4), data=None, opset=13, extra_inputs=(), **attrs) -> Graph:
    g = Graph(name, opset)
    x = g.input("x", list(shape), data=data(g) if data else None)
    extra = [f(g) if callable(f) else f for f in extra_inputs]
    g.output(g.node(op, [x, *extra], ["y"], name=op.lower(), **attrs))
    return g


@case
def relu():
    return unary_graph("relu", "Relu")


@case
def sigmoid():
    return unary_graph("sigmoid", "Sigmoid")


@case
def tanh():
    return unary_graph("tanh", "Tanh")


@case
def leaky_relu():
    return unary_graph("leaky_relu", "LeakyRelu", alpha=0.1)


@case
def prelu_per_channel():
    return unary_graph("prelu_per_channel", "PRelu", shape=(1, 3, 4, 4),
                       extra_inputs=[lambda g: g.floats("slope", [[[0.1]], [[0.25]], [[-0.5]]])])


@case
def elu():
    return unary_graph("elu", "Elu", alpha=0.7)


@case
def hard_sigmoid():
    return unary_graph("hard_sigmoid", "HardSigmoid", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 4).astype(np.float32),
                       alpha=0.25, beta=0.4)


@case
def hard_swish_opset14():
    return unary_graph("hard_swish_opset14", "HardSwish", opset=14,
                       data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 4).astype(np.float32))


@case
def selu():
    return unary_graph("selu", "Selu")


@case
def softplus():
    # Includes large magnitudes, where a naive log(1 + exp(x)) overflows.
    return unary_graph("softplus", "Softplus", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 30).astype(np.float32))


@case
def softsign():
    return unary_graph("softsign", "Softsign")


@case
def clip_arbitrary():
    return unary_graph("clip_arbitrary", "Clip",
                       extra_inputs=[lambda g: g.floats("min", -0.5), lambda g: g.floats("max", 0.7)])


@case
def clip_relu1():
    return unary_graph("clip_relu1", "Clip", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 2).astype(np.float32),
                       extra_inputs=[lambda g: g.floats("min", -1.0), lambda g: g.floats("max", 1.0)])


# ---- Softmax ------------------------------------------------------------------------

@case
def softmax_axis_last():
    return unary_graph("softmax_axis_last", "Softmax", axis=-1)


@case
def softmax_axis_1_rank3():
    return unary_graph("softmax_axis_1_rank3", "Softmax", axis=1)


@case
def softmax_opset11_axis_1_rank4():
    # Before opset 13, Softmax normalizes over all dimensions from `axis` on, flattened.
    return unary_graph("softmax_opset11_axis_1_rank4", "Softmax", shape=(1, 3, 2, 2), opset=11, axis=1)


@case
def log_softmax():
    return unary_graph("log_softmax", "LogSoftmax", axis=-1)


# ---- Other normalizations and composite activations ---------------------------------

@case
def instance_normalization():
    g = Graph("instance_normalization")
    x = g.input("x", [1, 3, 4, 4])
    scale, bias = g.const("scale", g.rng.uniform(0.5, 1.5, 3).astype(np.float32)), g.weight("bias", [3])
    g.output(g.node("InstanceNormalization", [x, scale, bias], ["y"], name="instance_norm", epsilon=1e-4))
    return g


@case
def lrn():
    return unary_graph("lrn", "LRN", shape=(1, 5, 3, 3), size=3, alpha=0.02, beta=0.75, bias=1.5)


@case
def celu():
    return unary_graph("celu", "Celu", alpha=0.5)


@case
def thresholded_relu():
    return unary_graph("thresholded_relu", "ThresholdedRelu", alpha=0.3)


@case
def mish():
    return unary_graph("mish", "Mish", opset=18)


# ---- Elementwise binary -------------------------------------------------------------

def broadcast_binary_graph(name, op, positive_lhs=False, nonzero_rhs=False) -> Graph:
    """`op` three times: [2,3,4] op [4], [2,1,4] op [3,1], and [2,3,4] op scalar constant."""
    g = Graph(name)

    def lhs(shape):
        return positive(g, shape) if positive_lhs else None

    def rhs(shape):
        if nonzero_rhs:
            return (positive(g, shape, 0.5, 2.0) * g.rng.choice([-1.0, 1.0], shape)).astype(np.float32)
        return None

    a = g.input("a", [2, 3, 4], lhs([2, 3, 4]))
    b = g.input("b", [4], rhs([4]))
    c = g.input("c", [2, 1, 4], lhs([2, 1, 4]))
    d = g.input("d", [3, 1], rhs([3, 1]))
    k = g.floats("k", 1.5)
    g.output(
        g.node(op, [a, b], ["y_vector"], name=f"{op.lower()}_vector"),
        g.node(op, [c, d], ["y_both"], name=f"{op.lower()}_both"),
        g.node(op, [a, k], ["y_scalar"], name=f"{op.lower()}_scalar"),
    )
    return g


@case
def add_broadcast():
    return broadcast_binary_graph("add_broadcast", "Add")


@case
def sub_broadcast():
    return broadcast_binary_graph("sub_broadcast", "Sub")


@case
def mul_broadcast():
    return broadcast_binary_graph("mul_broadcast", "Mul")


@case
def div_broadcast():
    return broadcast_binary_graph("div_broadcast", "Div", nonzero_rhs=True)


@case
def pow_broadcast():
    return broadcast_binary_graph("pow_broadcast", "Pow", positive_lhs=True)


@case
def max_broadcast():
    return broadcast_binary_graph("max_broadcast", "Max")


@case
def min_broadcast():
    return broadcast_binary_graph("min_broadcast", "Min")


@case
def variadic_max_min_sum_mean():
    g = Graph("variadic_max_min_sum_mean")
    a, b, c = g.input("a", [2, 3]), g.input("b", [3]), g.input("c", [2, 1])
    g.output(*(g.node(op, [a, b, c], [f"y_{op.lower()}"], name=op.lower()) for op in ["Max", "Min", "Sum", "Mean"]))
    return g


@case
def comparisons():
    g = Graph("comparisons")
    a, b = g.input("a", [2, 3], small_ints(g, [2, 3])), g.input("b", [3], small_ints(g, [3]))
    ops = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
    g.output(*(g.node(op, [a, b], [f"y_{op.lower()}"], name=op.lower()) for op in ops))
    return g


@case
def logical_ops():
    g = Graph("logical_ops")
    a = g.input("a", [2, 3], g.rng.integers(0, 2, [2, 3]).astype(np.bool_))
    b = g.input("b", [3], g.rng.integers(0, 2, [3]).astype(np.bool_))
    outs = [g.node(op, [a, b], [f"y_{op.lower()}"], name=op.lower()) for op in ["And", "Or", "Xor"]]
    outs.append(g.node("Not", [a], ["y_not"], name="not"))
    g.output(*outs)
    return g


@case
def where_broadcast():
    g = Graph("where_broadcast")
    cond = g.input("cond", [2, 3], g.rng.integers(0, 2, [2, 3]).astype(np.bool_))
    x, y = g.input("x", [2, 3]), g.input("y", [3])
    g.output(g.node("Where", [cond, x, y], ["out"], name="where"))
    return g


# ---- Pools --------------------------------------------------------------------------

def pool_graph(name, op, x_shape, **attrs) -> Graph:
    g = Graph(name)
    x = g.input("x", x_shape)
    g.output(g.node(op, [x], ["y"], name=op.lower(), **attrs))
    return g


@case
def max_pool_2x2_s2():
    return pool_graph("max_pool_2x2_s2", "MaxPool", [1, 2, 4, 4], kernel_shape=[2, 2], strides=[2, 2])


@case
def max_pool_3x3_s2_pads():
    return pool_graph("max_pool_3x3_s2_pads", "MaxPool", [1, 2, 5, 5], kernel_shape=[3, 3], strides=[2, 2],
                      pads=[1, 1, 1, 1])


@case
def max_pool_ceil_mode():
    # 5 wide, kernel 2, stride 2: floor gives 2 outputs, ceil 3 (the last window hangs over).
    return pool_graph("max_pool_ceil_mode", "MaxPool", [1, 2, 5, 5], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)


@case
def average_pool_exclude_pad():
    return pool_graph("average_pool_exclude_pad", "AveragePool", [1, 2, 5, 5], kernel_shape=[3, 3], strides=[2, 2],
                      pads=[1, 1, 1, 1], count_include_pad=0)


@case
def average_pool_include_pad():
    return pool_graph("average_pool_include_pad", "AveragePool", [1, 2, 5, 5], kernel_shape=[3, 3], strides=[2, 2],
                      pads=[1, 1, 1, 1], count_include_pad=1)


@case
def average_pool_include_pad_ceil_mode():
    # 5 + 2 pads, kernel 2, stride 2, ceil: 3 windows (a 4th would start in the end pad).
    return pool_graph("average_pool_include_pad_ceil_mode", "AveragePool", [1, 2, 5, 5], kernel_shape=[2, 2],
                      strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1, ceil_mode=1)


@case
def average_pool_ceil_mode():
    return pool_graph("average_pool_ceil_mode", "AveragePool", [1, 2, 5, 5], kernel_shape=[2, 2], strides=[2, 2],
                      ceil_mode=1)


@case
def global_average_pool():
    return pool_graph("global_average_pool", "GlobalAveragePool", [1, 3, 4, 4])


@case
def global_max_pool():
    return pool_graph("global_max_pool", "GlobalMaxPool", [1, 3, 4, 4])


@case
def max_pool_3d():
    # S3D's pools: 3x3x3 stride 1 padded (the branches), then 2x3x3 stride 2 with ceil_mode.
    g = Graph("max_pool_3d")
    x = g.input("x", [1, 3, 5, 7, 7])
    y = g.node("MaxPool", [x], name="branch", kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1])
    y = g.node("MaxPool", [y], name="reduce", kernel_shape=[2, 3, 3], strides=[2, 2, 2], ceil_mode=1)
    g.output(y)
    return g


@case
def max_pool_3d_spatial_only():
    return pool_graph("max_pool_3d_spatial_only", "MaxPool", [2, 4, 3, 8, 8], kernel_shape=[1, 3, 3],
                      strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])


@case
def max_pool_1d():
    return pool_graph("max_pool_1d", "MaxPool", [1, 2, 8], kernel_shape=[2], strides=[2])


# ---- Shape and data movement --------------------------------------------------------

@case
def concat_axis_1():
    g = Graph("concat_axis_1")
    a, b = g.input("a", [2, 3, 4]), g.input("b", [2, 2, 4])
    g.output(g.node("Concat", [a, b], ["y"], name="concat", axis=1))
    return g


@case
def concat_axis_negative():
    g = Graph("concat_axis_negative")
    a, b = g.input("a", [2, 3]), g.input("b", [2, 2])
    g.output(g.node("Concat", [a, b, g.weight("c", [2, 1])], ["y"], name="concat", axis=-1))
    return g


@case
def reshape_zero_and_minus_one():
    g = Graph("reshape_zero_and_minus_one")
    x = g.input("x", [2, 3, 4])
    g.output(g.node("Reshape", [x, g.ints("shape", [0, -1])], ["y"], name="reshape"))
    return g


@case
def flatten_axis_1():
    return unary_graph("flatten_axis_1", "Flatten", shape=(2, 3, 2, 2), axis=1)


@case
def flatten_axis_2():
    return unary_graph("flatten_axis_2", "Flatten", shape=(2, 3, 2, 2), axis=2)


@case
def transpose():
    return unary_graph("transpose", "Transpose", perm=[0, 2, 1])


@case
def squeeze_unsqueeze_opset11():
    g = Graph("squeeze_unsqueeze_opset11", opset=11)
    x, z = g.input("x", [2, 1, 3]), g.input("z", [2, 3])
    g.output(g.node("Squeeze", [x], ["squeezed"], name="squeeze", axes=[1]),
             g.node("Unsqueeze", [z], ["unsqueezed"], name="unsqueeze", axes=[0, 3]))
    return g


@case
def squeeze_unsqueeze_opset13():
    g = Graph("squeeze_unsqueeze_opset13")
    x, z = g.input("x", [2, 1, 3]), g.input("z", [2, 3])
    g.output(g.node("Squeeze", [x, g.ints("squeeze_axes", [1])], ["squeezed"], name="squeeze"),
             g.node("Unsqueeze", [z, g.ints("unsqueeze_axes", [0, 3])], ["unsqueezed"], name="unsqueeze"))
    return g


def pad_graph(name, mode, value=None, opset=13) -> Graph:
    g = Graph(name, opset)
    x = g.input("x", [1, 2, 3, 3])
    inputs = [x, g.ints("pads", [0, 0, 1, 2, 0, 0, 2, 1])]
    if value is not None:
        inputs.append(g.floats("value", value))
    g.output(g.node("Pad", inputs, ["y"], name="pad", mode=mode))
    return g


@case
def pad_constant_zero():
    return pad_graph("pad_constant_zero", "constant")


@case
def pad_constant_value():
    return pad_graph("pad_constant_value", "constant", 1.5)


@case
def pad_reflect():
    return pad_graph("pad_reflect", "reflect")


def slice_graph(name, starts, ends, axes, steps=None) -> Graph:
    g = Graph(name)
    x = g.input("x", [2, 5, 6])
    inputs = [x, g.ints("starts", starts), g.ints("ends", ends), g.ints("axes", axes)]
    if steps is not None:
        inputs.append(g.ints("steps", steps))
    g.output(g.node("Slice", inputs, ["y"], name="slice"))
    return g


@case
def slice_steps_2():
    return slice_graph("slice_steps_2", [0, 1], [5, 6], [1, 2], [2, 2])


@case
def slice_negative_steps():
    # Axis 1 backwards from 4 by 2 (rows 4, 2); axis 2 reversed whole (ends far below 0).
    return slice_graph("slice_negative_steps", [4, -1], [0, -(2**63)], [1, 2], [-2, -1])


@case
def slice_negative_starts():
    return slice_graph("slice_negative_starts", [-3, -4], [2**63 - 1, -1], [-1, 1])


@case
def split_equal():
    g = Graph("split_equal")
    x = g.input("x", [2, 6])
    g.output(*g.node("Split", [x], ["y0", "y1", "y2"], name="split", axis=1))
    return g


@case
def split_unequal():
    g = Graph("split_unequal")
    x = g.input("x", [2, 6])
    g.output(*g.node("Split", [x, g.ints("split", [1, 2, 3])], ["y0", "y1", "y2"], name="split", axis=1))
    return g


@case
def split_opset18_num_outputs():
    # 7 into 3 parts: ceil(7 / 3) = 3, so [3, 3, 1].
    g = Graph("split_opset18_num_outputs", opset=18)
    x = g.input("x", [2, 7])
    g.output(*g.node("Split", [x], ["y0", "y1", "y2"], name="split", axis=1, num_outputs=3))
    return g


@case
def gather_const_indices():
    g = Graph("gather_const_indices")
    x = g.input("x", [3, 4])
    g.output(g.node("Gather", [x, g.ints("indices", [2, 0])], ["y"], name="gather", axis=0))
    return g


@case
def gather_scalar_index():
    g = Graph("gather_scalar_index")
    x = g.input("x", [2, 3, 4])
    g.output(g.node("Gather", [x, g.const("index", np.array(1, dtype=np.int64))], ["y"], name="gather", axis=1))
    return g


@case
def gather_negative_index():
    g = Graph("gather_negative_index")
    x = g.input("x", [2, 3, 4])
    g.output(g.node("Gather", [x, g.ints("indices", [-1, 0])], ["y"], name="gather", axis=1))
    return g


@case
def gather_runtime_indices():
    g = Graph("gather_runtime_indices")
    x = g.input("x", [3, 4])
    idx = g.input("indices", [2, 2], np.array([[2, 0], [1, 2]], dtype=np.int64))
    g.output(g.node("Gather", [x, idx], ["y"], name="gather", axis=0))
    return g


@case
def tile():
    g = Graph("tile")
    x = g.input("x", [2, 3])
    g.output(g.node("Tile", [x, g.ints("repeats", [2, 1])], ["y"], name="tile"))
    return g


@case
def expand():
    g = Graph("expand")
    x = g.input("x", [3, 1])
    g.output(g.node("Expand", [x, g.ints("shape", [2, 3, 4])], ["y"], name="expand"))
    return g


@case
def depth_to_space_dcr():
    return unary_graph("depth_to_space_dcr", "DepthToSpace", shape=(1, 8, 2, 3), blocksize=2, mode="DCR")


@case
def depth_to_space_crd():
    return unary_graph("depth_to_space_crd", "DepthToSpace", shape=(1, 8, 2, 3), blocksize=2, mode="CRD")


@case
def space_to_depth():
    return unary_graph("space_to_depth", "SpaceToDepth", shape=(1, 2, 4, 6), blocksize=2)


# ---- Resize -------------------------------------------------------------------------

def resize_graph(name, scales=None, sizes=None, **attrs) -> Graph:
    g = Graph(name)
    x = g.input("x", [1, 2, 3, 4])
    inputs = [x, ""]  # no roi
    inputs.append(g.floats("scales", scales) if scales is not None else "")
    if sizes is not None:
        inputs.append(g.ints("sizes", sizes))
    g.output(g.node("Resize", inputs, ["y"], name="resize", **attrs))
    return g


@case
def resize_nearest_asymmetric_floor():
    return resize_graph("resize_nearest_asymmetric_floor", scales=[1, 1, 2, 2], mode="nearest",
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@case
def resize_nearest_default():
    return resize_graph("resize_nearest_default", scales=[1, 1, 2, 2], mode="nearest")


@case
def resize_linear_half_pixel_sizes():
    return resize_graph("resize_linear_half_pixel_sizes", sizes=[1, 2, 6, 8], mode="linear")


@case
def resize_linear_align_corners():
    return resize_graph("resize_linear_align_corners", sizes=[1, 2, 5, 7], mode="linear",
                        coordinate_transformation_mode="align_corners")


@case
def upsample_opset9_nearest():
    g = Graph("upsample_opset9_nearest", opset=9)
    x = g.input("x", [1, 2, 3, 4])
    g.output(g.node("Upsample", [x, g.floats("scales", [1, 1, 2, 2])], ["y"], name="upsample", mode="nearest"))
    return g


# ---- Reductions ---------------------------------------------------------------------

def reduce_keepdims_graph(name, op, opset=13) -> Graph:
    """`op` twice: over axis 1 keeping it, and over the last axis dropping it."""
    g = Graph(name, opset)
    x = g.input("x", [2, 3, 4], positive(g, [2, 3, 4], 0.5, 1.5) if op == "ReduceProd" else None)
    g.output(g.node(op, [x], ["y_keepdims"], name=f"{op.lower()}_keepdims", axes=[1], keepdims=1),
             g.node(op, [x], ["y_no_keepdims"], name=f"{op.lower()}_no_keepdims", axes=[-1], keepdims=0))
    return g


@case
def reduce_mean_keepdims():
    return reduce_keepdims_graph("reduce_mean_keepdims", "ReduceMean")


@case
def reduce_sum_opset11_keepdims():
    # ReduceSum takes axes as an attribute up to opset 11 (an input from 13).
    return reduce_keepdims_graph("reduce_sum_opset11_keepdims", "ReduceSum", opset=11)


@case
def reduce_max_keepdims():
    return reduce_keepdims_graph("reduce_max_keepdims", "ReduceMax")


@case
def reduce_min_keepdims():
    return reduce_keepdims_graph("reduce_min_keepdims", "ReduceMin")


@case
def reduce_prod_keepdims():
    return reduce_keepdims_graph("reduce_prod_keepdims", "ReduceProd")


@case
def reduce_mean_all_axes_scalar():
    return unary_graph("reduce_mean_all_axes_scalar", "ReduceMean", keepdims=0)


@case
def reduce_l1():
    return unary_graph("reduce_l1", "ReduceL1", axes=[1], keepdims=1)


@case
def reduce_l2():
    return unary_graph("reduce_l2", "ReduceL2", axes=[1], keepdims=1)


@case
def reduce_sum_square():
    return unary_graph("reduce_sum_square", "ReduceSumSquare", axes=[1], keepdims=1)


@case
def reduce_log_sum_exp():
    # Large inputs: a naive log(sum(exp(x))) overflows in float32.
    return unary_graph("reduce_log_sum_exp", "ReduceLogSumExp", axes=[2], keepdims=0,
                       data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 50).astype(np.float32))


@case
def reduce_sum_opset13_axes_input():
    return unary_graph("reduce_sum_opset13_axes_input", "ReduceSum", keepdims=1,
                       extra_inputs=[lambda g: g.ints("axes", [0, 2])])


def arg_graph(name, op, **attrs) -> Graph:
    # Integer-valued inputs so that ties occur and select_last_index matters.
    return unary_graph(name, op, data=lambda g: small_ints(g, [2, 3, 4], 0, 3), **attrs)


@case
def argmax_keepdims():
    return arg_graph("argmax_keepdims", "ArgMax", axis=1, keepdims=1)


@case
def argmin_no_keepdims():
    return arg_graph("argmin_no_keepdims", "ArgMin", axis=1, keepdims=0)


@case
def argmax_select_last_index():
    return arg_graph("argmax_select_last_index", "ArgMax", axis=1, keepdims=1, select_last_index=1)


@case
def argmin_select_last_index_no_keepdims():
    return arg_graph("argmin_select_last_index_no_keepdims", "ArgMin", axis=-1, keepdims=0, select_last_index=1)


@case
def argmax_rank1_no_keepdims():
    # The result is a scalar.
    return unary_graph("argmax_rank1_no_keepdims", "ArgMax", shape=(5,), axis=0, keepdims=0)


def topk_graph(name, largest) -> Graph:
    g = Graph(name)
    x = g.input("x", [2, 5, 3])
    g.output(*g.node("TopK", [x, g.ints("k", [2])], ["values", "indices"], name="topk", axis=1, largest=largest))
    return g


@case
def topk_largest():
    return topk_graph("topk_largest", 1)


@case
def topk_smallest():
    return topk_graph("topk_smallest", 0)


# ---- Elementwise unary --------------------------------------------------------------

@case
def exp():
    return unary_graph("exp", "Exp")


@case
def log():
    return unary_graph("log", "Log", data=lambda g: positive(g, [2, 3, 4]))


@case
def sqrt():
    return unary_graph("sqrt", "Sqrt", data=lambda g: positive(g, [2, 3, 4]))


@case
def reciprocal():
    return unary_graph("reciprocal", "Reciprocal", data=lambda g: positive(g, [2, 3, 4], 0.5, 2.0))


@case
def neg():
    return unary_graph("neg", "Neg")


@case
def abs_():  # the trailing underscore keeps the builtin; the case is "abs"
    return unary_graph("abs", "Abs")


@case
def floor():
    return unary_graph("floor", "Floor", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 3).astype(np.float32))


@case
def ceil():
    return unary_graph("ceil", "Ceil", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 3).astype(np.float32))


@case
def sin():
    return unary_graph("sin", "Sin", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 3).astype(np.float32))


@case
def cos():
    return unary_graph("cos", "Cos", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 3).astype(np.float32))


@case
def sign():
    # Exact zeros included: Sign(0) = 0.
    return unary_graph("sign", "Sign", data=lambda g: small_ints(g, [2, 3, 4]) * 0.5)


# ---- Identity, constants, casts, shape arithmetic -----------------------------------

@case
def identity():
    # Identity on both sides of a Relu: both copies disappear.
    g = Graph("identity")
    x = g.input("x", [2, 3, 4])
    a = g.node("Identity", [x], name="identity_in")
    b = g.node("Relu", [a], name="relu")
    g.output(g.node("Identity", [b], ["y"], name="identity_out"))
    return g


@case
def dropout_inference():
    g = Graph("dropout_inference")
    x = g.input("x", [2, 3, 4])
    a = g.node("Relu", [x], name="relu")
    g.output(g.node("Dropout", [a, g.floats("ratio", 0.5)], ["y"], name="dropout"))
    return g


@case
def constant_add():
    g = Graph("constant_add")
    x = g.input("x", [2, 3, 4])
    c = g.node("Constant", [], ["c"], name="constant",
               value=numpy_helper.from_array(g.rng.standard_normal([4]).astype(np.float32), "c_value"))
    g.output(g.node("Add", [x, c], ["y"], name="add"))
    return g


@case
def cast_float_int64_float():
    # Float -> int64 truncates toward zero; back to float keeps the integer.
    g = Graph("cast_float_int64_float")
    x = g.input("x", [2, 3], (g.rng.standard_normal([2, 3]) * 5).astype(np.float32))
    i = g.node("Cast", [x], ["as_int64"], name="to_int64", to=TensorProto.INT64)
    g.output(g.node("Cast", [i], ["y"], name="to_float", to=TensorProto.FLOAT))
    return g


@case
def shape_chain_reshape():
    # x.reshape(x.shape[0], -1) as exporters write it: all shape arithmetic is constant.
    g = Graph("shape_chain_reshape")
    x = g.input("x", [1, 3, 4, 4])
    s = g.node("Shape", [x], name="shape")
    n = g.node("Gather", [s, g.const("zero", np.array(0, dtype=np.int64))], name="gather", axis=0)
    n1 = g.node("Unsqueeze", [n, g.ints("unsqueeze_axes", [0])], name="unsqueeze")
    shape = g.node("Concat", [n1, g.ints("minus_one", [-1])], name="concat", axis=0)
    g.output(g.node("Reshape", [x, shape], ["y"], name="reshape"))
    return g


@case
def constant_subgraphs_fold():
    # Range, ConstantOfShape, Shape, Size and Cast all evaluate at compile time:
    # y = (x + [0, 1, 2, 3]) * 2 / size(x).
    g = Graph("constant_subgraphs_fold")
    x = g.input("x", [2, 4])
    r = g.node("Range", [g.floats("start", 0.0), g.floats("limit", 4.0), g.floats("delta", 1.0)], name="range")
    twos = g.node("ConstantOfShape", [g.node("Shape", [x], name="shape")], name="constant_of_shape",
                  value=numpy_helper.from_array(np.array([2.0], dtype=np.float32), "two"))
    size = g.node("Cast", [g.node("Size", [x], name="size")], name="size_to_float", to=TensorProto.FLOAT)
    y = g.node("Mul", [g.node("Add", [x, r], name="add"), twos], name="mul")
    g.output(g.node("Div", [y, size], ["y"], name="div"))
    return g


# ---- Losses -------------------------------------------------------------------------

def loss_graph(name, op, x_shape, reduction=None, opset=13, weight=None, ignore_index=None, ignored=(),
               log_prob=False, target_dtype=np.int64) -> Graph:
    """NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss of x [N, C, d...] against random
    targets in [0, C), with the flat target positions `ignored` set to `ignore_index`.
    `weight` is None, "const" (an initializer) or "input" (a graph input)."""
    g = Graph(name, opset)
    c = x_shape[1]
    t_shape = [x_shape[0], *x_shape[2:]]
    x = g.input("x", x_shape)
    target = g.rng.integers(0, c, t_shape).astype(target_dtype)
    for k in ignored:
        target.flat[k] = ignore_index
    inputs = [x, g.input("target", t_shape, target)]
    if weight == "const":
        inputs.append(g.const("weight", positive(g, [c])))
    elif weight == "input":
        inputs.append(g.input("weight", [c], positive(g, [c])))
    attrs = {}
    if reduction is not None:
        attrs["reduction"] = reduction
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    result = g.node(op, inputs, outputs, name="loss", **attrs)
    g.output(*(result if log_prob else [result]))
    return g


@case
def nll_loss_nc_mean():
    # The default reduction (mean) of [N, C] without weights.
    return loss_graph("nll_loss_nc_mean", "NegativeLogLikelihoodLoss", [4, 5])


@case
def nll_loss_none():
    return loss_graph("nll_loss_none", "NegativeLogLikelihoodLoss", [3, 5, 2], reduction="none", opset=12)


@case
def nll_loss_ncd1d2_weight_ignore_index_sum():
    # ignore_index 1 is also a valid class: targets equal to it count for nothing.
    return loss_graph("nll_loss_ncd1d2_weight_ignore_index_sum", "NegativeLogLikelihoodLoss", [2, 4, 3, 2],
                      reduction="sum", opset=22, weight="const", ignore_index=1, ignored=(0, 5, 7))


@case
def nll_loss_ncd1_weight_input_negative_ignore_index_mean():
    # Weighted mean over the elements not ignored; the weights are a run-time input.
    return loss_graph("nll_loss_ncd1_weight_input_negative_ignore_index_mean", "NegativeLogLikelihoodLoss",
                      [3, 4, 5], reduction="mean", weight="input", ignore_index=-1, ignored=(1, 2, 9))


@case
def nll_loss_ignore_index_mean_no_weight():
    # The mean divides by the number of elements not ignored.
    return loss_graph("nll_loss_ignore_index_mean_no_weight", "NegativeLogLikelihoodLoss", [2, 3, 4],
                      reduction="mean", ignore_index=2, ignored=(0, 3))


@case
def nll_loss_all_ignored_mean():
    # Every target ignored: 0 / 0, NaN (ONNX's function body and ONNX Runtime agree).
    return loss_graph("nll_loss_all_ignored_mean", "NegativeLogLikelihoodLoss", [3, 4], reduction="mean",
                      weight="const", ignore_index=3, ignored=(0, 1, 2))


@case
def nll_loss_int32_target_weight_none():
    return loss_graph("nll_loss_int32_target_weight_none", "NegativeLogLikelihoodLoss", [3, 4, 2],
                      reduction="none", weight="const", target_dtype=np.int32)


@case
def sce_mean_with_log_prob():
    return loss_graph("sce_mean_with_log_prob", "SoftmaxCrossEntropyLoss", [3, 5], log_prob=True)


@case
def sce_sum_ncd1d2():
    return loss_graph("sce_sum_ncd1d2", "SoftmaxCrossEntropyLoss", [2, 3, 4, 2], reduction="sum", opset=12)


@case
def sce_ncd1_weight_ignore_index_none():
    return loss_graph("sce_ncd1_weight_ignore_index_none", "SoftmaxCrossEntropyLoss", [2, 4, 3],
                      reduction="none", weight="const", ignore_index=2, ignored=(1, 4))


@case
def sce_ncd1d2_weight_ignore_index_mean_with_log_prob():
    return loss_graph("sce_ncd1d2_weight_ignore_index_mean_with_log_prob", "SoftmaxCrossEntropyLoss",
                      [2, 5, 2, 3], reduction="mean", weight="input", ignore_index=-5, ignored=(2, 3, 11),
                      log_prob=True)


# ---- Attention ----------------------------------------------------------------------

@case
def attention_4d_basic():
    # Scaled dot-product attention on [batch, heads, seq, head_size], cross-attention
    # lengths (4 queries, 6 keys), default scale 1/sqrt(8).
    g = Graph("attention_4d_basic", opset=23)
    q = g.input("q", [2, 3, 4, 8])
    k = g.input("k", [2, 3, 6, 8])
    v = g.input("v", [2, 3, 6, 8])
    g.output(g.node("Attention", [q, k, v], ["y"], name="attention"))
    return g


@case
def attention_3d_gqa_causal():
    # 3-D inputs split into 8 query heads and 2 key/value heads (each kv head serves 4
    # query heads), causal, value heads of another size (6) than the key heads (8).
    g = Graph("attention_3d_gqa_causal", opset=23)
    q = g.input("q", [2, 5, 64])
    k = g.input("k", [2, 5, 16])
    v = g.input("v", [2, 5, 12])
    g.output(g.node("Attention", [q, k, v], ["y"], name="attention", q_num_heads=8, kv_num_heads=2,
                    is_causal=1))
    return g


@case
def attention_bool_mask_scale():
    # A run-time boolean mask [batch, 1, q, kv] (True = attend) with one fully masked
    # query row, which must come out as zeros; explicit scale.
    g = Graph("attention_bool_mask_scale", opset=23)
    q = g.input("q", [2, 2, 4, 8])
    k = g.input("k", [2, 2, 6, 8])
    v = g.input("v", [2, 2, 6, 8])
    mask = g.rng.random([2, 1, 4, 6]) < 0.6
    mask[:, :, :, 0] = True
    mask[1, 0, 2, :] = False
    m = g.input("mask", [2, 1, 4, 6], data=mask)
    g.output(g.node("Attention", [q, k, v, m], ["y"], name="attention", scale=0.25))
    return g


@case
def attention_past_kv_present():
    # A decoding step with a cache: 3-D inputs (3 new tokens, 2 heads), past keys and
    # values [batch, heads, 4, head_size] concatenated before the new ones, causal with
    # the frontier offset by the past length, a float mask added, present_key /
    # present_value outputs.
    g = Graph("attention_past_kv_present", opset=23)
    q = g.input("q", [2, 3, 16])
    k = g.input("k", [2, 3, 16])
    v = g.input("v", [2, 3, 16])
    m = g.input("mask", [3, 7])
    pk = g.input("past_key", [2, 2, 4, 8])
    pv = g.input("past_value", [2, 2, 4, 8])
    g.output(*g.node("Attention", [q, k, v, m, pk, pv], ["y", "present_key", "present_value"],
                     name="attention", q_num_heads=2, kv_num_heads=2, is_causal=1))
    return g


@case
def attention_softcap():
    # softcap * tanh(scores / softcap) before the mask; qk_matmul_output mode 1 is the
    # softcapped scores.
    g = Graph("attention_softcap", opset=23)
    q = g.input("q", [1, 2, 4, 8], data=(g.rng.standard_normal([1, 2, 4, 8]) * 3).astype(np.float32))
    k = g.input("k", [1, 2, 5, 8], data=(g.rng.standard_normal([1, 2, 5, 8]) * 3).astype(np.float32))
    v = g.input("v", [1, 2, 5, 8])
    m = g.input("mask", [4, 5])
    y, _, _, qk = g.node("Attention", [q, k, v, m], ["y", "", "", "qk"], name="attention", softcap=2.0,
                         qk_matmul_output_mode=1)
    g.output(y, qk)
    return g


@case
def attention_const_mask_softmax_output():
    # A constant boolean mask with a fully masked row, combined with the causal frontier
    # at compile time; qk_matmul_output mode 3 (the probabilities, zero on that row).
    g = Graph("attention_const_mask_softmax_output", opset=23)
    q = g.input("q", [1, 2, 4, 8])
    k = g.input("k", [1, 2, 4, 8])
    v = g.input("v", [1, 2, 4, 8])
    mask = np.ones([4, 4], dtype=np.bool_)
    mask[1, :] = False
    mask[3, 2] = False
    m = g.const("mask", mask)
    y, _, _, qk = g.node("Attention", [q, k, v, m], ["y", "", "", "qk"], name="attention", is_causal=1,
                         qk_matmul_output_mode=3)
    g.output(y, qk)
    return g


@case
def attention_nonpad_kv_seqlen():
    # Opset 24's external cache: nonpad_kv_seqlen (a run-time input) masks the padding
    # keys of each batch and offsets the causal frontier to nonpad_kv_seqlen - q_seq;
    # grouped heads (4 query heads over 2 kv heads).
    g = Graph("attention_nonpad_kv_seqlen", opset=24)
    q = g.input("q", [2, 4, 2, 8])
    k = g.input("k", [2, 2, 6, 8])
    v = g.input("v", [2, 2, 6, 8])
    lengths = g.input("nonpad_kv_seqlen", [2], data=np.array([3, 6], dtype=np.int64))
    g.output(g.node("Attention", [q, k, v, "", "", "", lengths], ["y"], name="attention", is_causal=1))
    return g


@case
def microsoft_attention_packed_qkv():
    # ONNX Runtime's fused BERT attention: one packed [16, 48] Q/K/V projection with its
    # bias, 2 heads, a raw [batch, seq] int32 mask (0 = padding) whose -10000 is added.
    g = Graph("microsoft_attention_packed_qkv", domains={"com.microsoft": 1})
    x = g.input("x", [2, 4, 16])
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=np.int32)
    m = g.input("mask_index", [2, 4], data=mask)
    g.output(g.node("Attention", [x, g.weight("qkv_weight", [16, 48]), g.weight("qkv_bias", [48]), m], ["y"],
                    name="attention", domain="com.microsoft", num_heads=2))
    return g


@case
def microsoft_attention_unidirectional():
    # GPT-2's fused attention: causal, and value heads of another size (qkv_hidden_sizes).
    g = Graph("microsoft_attention_unidirectional", domains={"com.microsoft": 1})
    x = g.input("x", [1, 5, 8])
    g.output(g.node("Attention", [x, g.weight("qkv_weight", [8, 28])], ["y"], name="attention",
                    domain="com.microsoft", num_heads=2, unidirectional=1, qkv_hidden_sizes=[8, 8, 12]))
    return g


@case
def microsoft_multi_head_attention():
    # Cross attention: separate 3-D query (3 tokens) and key/value (5 tokens), the packed
    # projection bias, a [batch, kv] key padding mask and an additive attention bias.
    g = Graph("microsoft_multi_head_attention", domains={"com.microsoft": 1})
    q = g.input("query", [2, 3, 16])
    k = g.input("key", [2, 5, 16])
    v = g.input("value", [2, 5, 16])
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=np.int32)
    m = g.input("key_padding_mask", [2, 5], data=mask)
    ab = g.input("attention_bias", [1, 2, 3, 5])
    g.output(g.node("MultiHeadAttention", [q, k, v, g.weight("bias", [48]), m, ab], ["y"],
                    name="attention", domain="com.microsoft", num_heads=2))
    return g


@case
def microsoft_multi_head_attention_past():
    # A decoder step: past key and value [batch, heads, 3, head] concatenated before the
    # new ones, causal (unidirectional), present key and value outputs, custom scale.
    g = Graph("microsoft_multi_head_attention_past", domains={"com.microsoft": 1})
    q = g.input("query", [1, 2, 8])
    k = g.input("key", [1, 2, 8])
    v = g.input("value", [1, 2, 8])
    pk = g.input("past_key", [1, 2, 3, 4])
    pv = g.input("past_value", [1, 2, 3, 4])
    g.output(*g.node("MultiHeadAttention", [q, k, v, "", "", "", pk, pv], ["y", "present_key", "present_value"],
                     name="attention", domain="com.microsoft", num_heads=2, unidirectional=1, scale=0.3))
    return g


# ---- Remainders, integer division, further math ------------------------------------

@case
def mod_integer_sign_of_divisor():
    g = Graph("mod_integer_sign_of_divisor")
    a = g.input("a", [2, 4], data=np.array([[7, -7, 7, -7], [0, 5, -12, 13]], dtype=np.int64))
    b = g.input("b", [2, 4], data=np.array([[3, 3, -3, -3], [4, -5, 5, 4]], dtype=np.int64))
    g.output(g.node("Mod", [a, b], ["python"], name="mod"),
             g.node("Mod", [a, b], ["c"], name="fmod", fmod=1))
    return g


@case
def mod_float_fmod_broadcast():
    g = Graph("mod_float_fmod_broadcast")
    a = g.input("a", [2, 3], data=(g.rng.standard_normal([2, 3]) * 10).astype(np.float32))
    g.output(g.node("Mod", [a, g.floats("b", [3.0, -2.5, 0.75])], ["y"], name="mod", fmod=1))
    return g


@case
def div_integer_truncates():
    g = Graph("div_integer_truncates")
    a = g.input("a", [6], data=np.array([7, -7, 7, -7, 0, -9], dtype=np.int64))
    b = g.input("b", [6], data=np.array([2, 2, -2, -2, 3, 4], dtype=np.int64))
    g.output(g.node("Div", [a, b], ["y"], name="div"))
    return g


@case
def bitwise_and_shifts():
    g = Graph("bitwise_and_shifts", opset=18)
    a = g.input("a", [2, 3], data=np.array([[1, 255, 128], [7, 0, 200]], dtype=np.uint8))
    s = g.input("s", [2, 3], data=np.array([[1, 1, 1], [5, 3, 0]], dtype=np.uint8))
    i = g.input("i", [2, 3], data=np.array([[-5, 12, 7], [0, -1, 100]], dtype=np.int32))
    j = g.input("j", [2, 3], data=np.array([[3, 10, -8], [9, 6, 1]], dtype=np.int32))
    g.output(g.node("BitShift", [a, s], ["left"], name="shift_left", direction="LEFT"),
             g.node("BitShift", [a, s], ["right"], name="shift_right", direction="RIGHT"),
             g.node("BitwiseAnd", [i, j], ["and"], name="and"),
             g.node("BitwiseOr", [i, j], ["or"], name="or"),
             g.node("BitwiseXor", [i, j], ["xor"], name="xor"),
             g.node("BitwiseNot", [a], ["not_u8"], name="not_u8"),
             g.node("BitwiseNot", [i], ["not_i32"], name="not_i32"))
    return g


@case
def cumsum_exclusive_reverse():
    g = Graph("cumsum_exclusive_reverse", opset=14)
    x = g.input("x", [2, 3, 4])
    i = g.input("i", [2, 3], data=g.rng.integers(-5, 5, [2, 3]).astype(np.int64))
    g.output(g.node("CumSum", [x, g.ints("axis", np.array(1))], ["y"], name="cumsum", exclusive=1, reverse=1),
             g.node("CumSum", [i, g.ints("axis_i", np.array(-1))], ["z"], name="cumsum_int"))
    return g


@case
def resize_cubic_exclude_outside():
    # No NN resize interpolates cubically: nnc's RESAMPLE with compiler-made tap tables.
    g = Graph("resize_cubic_exclude_outside", opset=19)
    x = g.input("x", [1, 2, 4, 5])
    g.output(g.node("Resize", [x, "", g.floats("scales", [1.0, 1.0, 1.5, 0.6])], ["y"], name="resize",
                    mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5))
    return g


@case
def resize_tf_crop_and_resize_extrapolation():
    g = Graph("resize_tf_crop_and_resize_extrapolation", opset=19)
    x = g.input("x", [1, 1, 4, 4])
    roi = g.floats("roi", [0, 0, -0.2, 0.4, 1, 1, 0.6, 1.3])
    g.output(g.node("Resize", [x, roi, "", g.ints("sizes", [1, 1, 3, 5])], ["y"], name="resize",
                    mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                    extrapolation_value=10.0))
    return g


@case
def resize_linear_antialias_downsample():
    g = Graph("resize_linear_antialias_downsample", opset=19)
    x = g.input("x", [1, 1, 8, 8])
    g.output(g.node("Resize", [x, "", g.floats("scales", [1.0, 1.0, 0.4, 0.6])], ["y"], name="resize",
                    mode="linear", antialias=1))
    return g


@case
def eye_like_and_shrink():
    g = Graph("eye_like_and_shrink", opset=13)
    x = g.input("x", [3, 4])
    g.output(g.node("EyeLike", [x], ["eye"], name="eye_like", k=1),
             g.node("Shrink", [x], ["shrunk"], name="shrink", lambd=0.4, bias=0.1))
    return g


@case
def math_unary_functions():
    g = Graph("math_unary_functions", opset=13)
    unit = g.input("unit", [2, 3], data=np.array([[-0.9, -0.5, 0.0], [0.25, 0.5, 0.9]], dtype=np.float32))
    big = g.input("big", [2, 3], data=np.array([[1.0, 1.5, 2.0], [3.0, 10.0, 100.0]], dtype=np.float32))
    half = g.input("halves", [2, 4], data=np.array([[-2.5, -1.5, -0.5, 0.5], [1.5, 2.5, 2.4, -2.6]], dtype=np.float32))
    outs = [g.node("Round", [half], ["round"], name="round")]
    for op in ["Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh"]:
        outs.append(g.node(op, [unit], [op.lower()], name=op.lower()))
    outs.append(g.node("Acosh", [big], ["acosh"], name="acosh"))
    g.output(*outs)
    return g


@case
def rms_normalization_opset23():
    g = Graph("rms_normalization_opset23", opset=23)
    x = g.input("x", [2, 3, 8])
    g.output(g.node("RMSNormalization", [x, g.weight("scale", [8])], ["y"], name="rms_norm", epsilon=1e-5))
    return g


# ---- Float16 ------------------------------------------------------------------------

@case
def float16_layer():
    # Float16 in, weights and out; nnc computes in float32 and rounds at the output.
    g = Graph("float16_layer")
    x = g.input("x", [2, 8], data=g.rng.standard_normal([2, 8]).astype(np.float16))
    w = g.const("w", (g.rng.standard_normal([8, 4]) * 0.5).astype(np.float16))
    b = g.const("b", g.rng.standard_normal([4]).astype(np.float16))
    y = g.node("Add", [g.node("MatMul", [x, w], name="matmul"), b], name="add")
    g.output(g.node("Softmax", [g.node("Relu", [y], name="relu")], ["y"], name="softmax", axis=-1))
    return g


@case
def integer_types_as_int32():
    # int16, uint16, uint32 and uint64 compute as int32, range-checked at the boundary.
    g = Graph("integer_types_as_int32")
    outs = []
    for dtype, name in [(np.int16, "i16"), (np.uint16, "u16"), (np.uint32, "u32"), (np.uint64, "u64")]:
        low = -300 if dtype == np.int16 else 0
        a = g.input(f"a_{name}", [2, 3], data=g.rng.integers(low, 300, [2, 3]).astype(dtype))
        b = g.input(f"b_{name}", [2, 3], data=g.rng.integers(1, 40, [2, 3]).astype(dtype))
        outs.append(g.node("Mod", [a, b], [f"mod_{name}"], name=f"mod_{name}"))
    g.output(*outs)
    return g


@case
def float64_arithmetic():
    # Float64 computes as float32 (the NN set has no float64); the import notes it.
    g = Graph("float64_arithmetic")
    x = g.input("x", [2, 5], data=g.rng.standard_normal([2, 5]))
    w = g.const("w", g.rng.standard_normal([5]))
    y = g.node("Mul", [x, w], name="mul")
    g.output(g.node("Softmax", [g.node("Add", [y, x], name="add")], ["y"], name="softmax"),
             g.node("Cast", [y], ["as_float"], name="to_float", to=TensorProto.FLOAT))
    return g


@case
def cast_float_to_float16_and_back():
    # The middle Cast rounds to float16 exactly as ONNX does, though nnc computes in float32.
    g = Graph("cast_float_to_float16_and_back")
    x = g.input("x", [3, 4], data=(g.rng.standard_normal([3, 4]) * 1000).astype(np.float32))
    half = g.node("Cast", [x], ["half"], name="to_half", to=TensorProto.FLOAT16)
    g.output(half, g.node("Cast", [half], ["back"], name="to_float", to=TensorProto.FLOAT))
    return g


# ---- Scatter, OneHot, Hardmax --------------------------------------------------------

@case
def scatter_elements_axis1_add():
    # Duplicate indices add up; -1 is the last column.
    g = Graph("scatter_elements_axis1_add", opset=16)
    x = g.input("x", [3, 4])
    idx = g.ints("indices", [[1, 1], [0, 3], [-1, 2]])
    updates = g.input("updates", [3, 2])
    g.output(g.node("ScatterElements", [x, idx, updates], ["y"], name="scatter", axis=1, reduction="add"))
    return g


@case
def scatter_elements_negative_indices():
    g = Graph("scatter_elements_negative_indices", opset=13)
    x = g.input("x", [3, 3])
    idx = g.ints("indices", [[-1, 0, -3], [1, -2, 2]])
    updates = g.input("updates", [2, 3])
    g.output(g.node("ScatterElements", [x, idx, updates], ["y"], name="scatter"))
    return g


@case
def scatter_elements_int_max_min():
    # int64 data computes as int32; indices at run time.
    g = Graph("scatter_elements_int_max_min", opset=18)
    x = g.input("x", [2, 4], data=g.rng.integers(-50, 50, [2, 4]).astype(np.int64))
    idx = g.input("indices", [2, 3], data=np.array([[0, 3, 3], [-4, 1, 0]], dtype=np.int64))
    updates = g.input("updates", [2, 3], data=g.rng.integers(-50, 50, [2, 3]).astype(np.int64))
    g.output(g.node("ScatterElements", [x, idx, updates], ["max"], name="scatter_max", axis=1, reduction="max"),
             g.node("ScatterElements", [x, idx, updates], ["min"], name="scatter_min", axis=-1, reduction="min"))
    return g


@case
def scatter_deprecated_opset10():
    g = Graph("scatter_deprecated_opset10", opset=10)
    x = g.input("x", [2, 5])
    idx = g.ints("indices", [[4, 0], [2, 1]])
    updates = g.input("updates", [2, 2])
    g.output(g.node("Scatter", [x, idx, updates], ["y"], name="scatter", axis=1))
    return g


@case
def scatter_nd_slices():
    # Whole [3, 2] slices of a [4, 3, 2] tensor; -1 is the last one.
    g = Graph("scatter_nd_slices", opset=13)
    x = g.input("x", [4, 3, 2])
    updates = g.input("updates", [2, 3, 2])
    g.output(g.node("ScatterND", [x, g.ints("indices", [[1], [-1]]), updates], ["y"], name="scatter_nd"))
    return g


@case
def scatter_nd_mul():
    # Single elements; (0, 1) is multiplied twice.
    g = Graph("scatter_nd_mul", opset=16)
    x = g.input("x", [2, 3])
    updates = g.input("updates", [3])
    idx = g.ints("indices", [[0, 1], [1, -1], [0, 1]])
    g.output(g.node("ScatterND", [x, idx, updates], ["y"], name="scatter_nd", reduction="mul"))
    return g


@case
def one_hot_axis_minus1_negative_index():
    # -1 and -5 count from the end of depth 5; 5 and -6 are out of range: all off.
    g = Graph("one_hot_axis_minus1_negative_index", opset=11)
    idx = g.input("indices", [2, 3], data=np.array([[0, 4, -1], [5, -5, -6]], dtype=np.int64))
    g.output(g.node("OneHot", [idx, g.ints("depth", np.array(5)), g.floats("values", [-1.0, 3.0])], ["y"],
                    name="one_hot", axis=-1))
    return g


@case
def one_hot_axis0_float_indices_runtime_values():
    # Float indices truncate toward zero; the values are a graph input.
    g = Graph("one_hot_axis0_float_indices_runtime_values", opset=11)
    idx = g.input("indices", [3], data=np.array([2.7, 0.0, -1.2], dtype=np.float32))
    values = g.input("values", [2], data=np.array([0.5, -2.0], dtype=np.float32))
    g.output(g.node("OneHot", [idx, g.const("depth", np.array([4.0], dtype=np.float32)), values], ["y"],
                    name="one_hot", axis=0))
    return g


@case
def hardmax_axis1_opset13():
    # Integer-valued inputs, so ties pick the first maximum.
    g = Graph("hardmax_axis1_opset13", opset=13)
    x = g.input("x", [2, 4, 3], data=small_ints(g, [2, 4, 3]))
    g.output(g.node("Hardmax", [x], ["y"], name="hardmax", axis=1))
    return g


@case
def hardmax_opset11_coerced():
    # Before opset 13, the maximum is over everything from axis 1 on: [2, 12].
    g = Graph("hardmax_opset11_coerced", opset=11)
    x = g.input("x", [2, 3, 4])
    g.output(g.node("Hardmax", [x], ["y"], name="hardmax"))
    return g


# ---- Transformer operators ----------------------------------------------------------

@case
def matmul_3d_bias_first():
    # A transformer projection: MatMul on [batch, seq, hidden], then the bias added with
    # the constant first, as torch exports it. The ADD folds into the FULLY_CONNECTED's
    # bias through the reshape back to 3-D.
    g = Graph("matmul_3d_bias_first")
    x = g.input("x", [2, 3, 8])
    y = g.node("MatMul", [x, g.weight("w", [8, 4])], name="matmul")
    g.output(g.node("Add", [g.weight("b", [4]), y], ["y"], name="add_bias"))
    return g


@case
def layer_norm_last_axis():
    g = Graph("layer_norm_last_axis", opset=17)
    x = g.input("x", [2, 5, 8])
    g.output(g.node("LayerNormalization", [x, g.weight("scale", [8]), g.weight("bias", [8])], ["y"],
                    name="layer_norm", epsilon=1e-5))
    return g


@case
def layer_norm_axis1_with_statistics():
    # Normalizes over the last two axes; Mean and InvStdDev are outputs too; no bias.
    g = Graph("layer_norm_axis1_with_statistics", opset=17)
    x = g.input("x", [2, 3, 4], data=(g.rng.standard_normal([2, 3, 4]) * 3 + 5).astype(np.float32))
    g.output(*g.node("LayerNormalization", [x, g.weight("scale", [3, 4])], ["y", "mean", "inv_std_dev"],
                     name="layer_norm", axis=1, epsilon=1e-3))
    return g


@case
def gelu_exact_opset20():
    return unary_graph("gelu_exact_opset20", "Gelu", opset=20,
                       data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 3).astype(np.float32))


@case
def gelu_tanh_opset20():
    return unary_graph("gelu_tanh_opset20", "Gelu", opset=20, approximate="tanh",
                       data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 3).astype(np.float32))


@case
def group_normalization_opset21():
    g = Graph("group_normalization_opset21", opset=21)
    x = g.input("x", [2, 6, 3, 2], data=(g.rng.standard_normal([2, 6, 3, 2]) * 2 + 1).astype(np.float32))
    g.output(g.node("GroupNormalization", [x, g.weight("scale", [6]), g.weight("bias", [6])], ["y"],
                    name="group_norm", num_groups=3, epsilon=1e-4))
    return g


@case
def mean_variance_normalization():
    g = Graph("mean_variance_normalization", opset=13)
    x = g.input("x", [2, 3, 2, 2], data=(g.rng.standard_normal([2, 3, 2, 2]) * 3 + 2).astype(np.float32))
    g.output(g.node("MeanVarianceNormalization", [x], ["y"], name="mvn"),
             g.node("MeanVarianceNormalization", [x], ["y_last"], name="mvn_last", axes=[3]))
    g.float_outputs_without_inference = True  # onnx's inference of the function body fails
    return g


@case
def erf():
    return unary_graph("erf", "Erf", data=lambda g: (g.rng.standard_normal([2, 3, 4]) * 2).astype(np.float32))


@case
def is_nan_and_is_inf():
    g = Graph("is_nan_and_is_inf", opset=20)
    data = np.array([[1.0, np.nan, np.inf], [-np.inf, 0.0, -2.5]], dtype=np.float32)
    x = g.input("x", [2, 3], data=data)
    g.output(g.node("IsNaN", [x], ["nan"], name="is_nan"),
             g.node("IsInf", [x], ["inf"], name="is_inf"),
             g.node("IsInf", [x], ["pos_inf"], name="is_pos_inf", detect_negative=0))
    return g


@case
def gather_elements_axis1():
    g = Graph("gather_elements_axis1")
    x = g.input("x", [3, 4])
    idx = g.ints("indices", [[0, 3], [-1, 1], [2, 2]])
    g.output(g.node("GatherElements", [x, idx], ["y"], name="gather_elements", axis=1))
    return g


@case
def gather_nd_plain():
    g = Graph("gather_nd_plain")
    x = g.input("x", [3, 4, 2])
    g.output(g.node("GatherND", [x, g.ints("indices", [[0, 1], [2, -1]])], ["y"], name="gather_nd"))
    return g


@case
def gather_nd_batch_dims_1():
    g = Graph("gather_nd_batch_dims_1")
    x = g.input("x", [2, 3, 4])
    g.output(g.node("GatherND", [x, g.ints("indices", [[[1], [0]], [[2], [2]]])], ["y"], name="gather_nd",
                    batch_dims=1))
    return g


@case
def trilu_upper_k1():
    g = Graph("trilu_upper_k1", opset=14)
    x = g.input("x", [2, 4, 5])
    g.output(g.node("Trilu", [x, g.ints("k", np.array(1))], ["y"], name="trilu"))
    return g


@case
def trilu_lower():
    g = Graph("trilu_lower", opset=14)
    x = g.input("x", [3, 3])
    g.output(g.node("Trilu", [x], ["y"], name="trilu", upper=0))
    return g


@case
def microsoft_skip_layer_norm_and_gelus():
    # The operators ONNX Runtime's transformer optimizer writes.
    g = Graph("microsoft_skip_layer_norm_and_gelus", domains={"com.microsoft": 1})
    x = g.input("x", [2, 3, 8])
    skip = g.input("skip", [2, 3, 8])
    normed = g.node("SkipLayerNormalization", [x, skip, g.weight("gamma", [8]), g.weight("beta", [8]),
                                               g.weight("bias", [8])],
                    name="skip_layer_norm", domain="com.microsoft", epsilon=1e-5)
    fast = g.node("FastGelu", [normed, g.weight("fast_bias", [8])], ["fast"], name="fast_gelu",
                  domain="com.microsoft")
    bias = g.node("BiasGelu", [normed, g.weight("gelu_bias", [8])], ["bias_gelu"], name="bias_gelu",
                  domain="com.microsoft")
    plain = g.node("Gelu", [normed], ["gelu"], name="gelu", domain="com.microsoft")
    g.output(fast, bias, plain)
    return g


@case
def ml_linear_classifier_multiclass_softmax():
    g = Graph("ml_linear_classifier_multiclass_softmax", domains={"ai.onnx.ml": 1})
    x = g.input("x", [4, 3])
    y, z = g.node("LinearClassifier", [x], ["label", "scores"], name="classifier", domain="ai.onnx.ml",
                  coefficients=[float(v) for v in g.rng.standard_normal(9)],
                  intercepts=[0.1, -0.2, 0.3], classlabels_ints=[10, 20, 30],
                  post_transform="SOFTMAX")
    g.output(y, z)
    return g


@case
def ml_linear_classifier_binary_logistic():
    g = Graph("ml_linear_classifier_binary_logistic", domains={"ai.onnx.ml": 1})
    x = g.input("x", [5, 2])
    y, z = g.node("LinearClassifier", [x], ["label", "scores"], name="classifier", domain="ai.onnx.ml",
                  coefficients=[0.5, -0.25], intercepts=[0.1], classlabels_ints=[7, 9],
                  post_transform="LOGISTIC")
    g.output(y, z)
    return g


@case
def ml_linear_classifier_binary_none_int_input():
    g = Graph("ml_linear_classifier_binary_none_int_input", domains={"ai.onnx.ml": 1})
    x = g.input("x", [4, 2], data=np.array([[1, 2], [-1, 0], [0, -3], [4, 1]], dtype=np.int64))
    y, z = g.node("LinearClassifier", [x], ["label", "scores"], name="classifier", domain="ai.onnx.ml",
                  coefficients=[0.5, -0.25], intercepts=[0.1], classlabels_ints=[0, 1])
    g.output(y, z)
    return g


@case
def ml_linear_regressor_two_targets():
    g = Graph("ml_linear_regressor_two_targets", domains={"ai.onnx.ml": 1})
    x = g.input("x", [3, 4])
    g.output(g.node("LinearRegressor", [x], ["y"], name="regressor", domain="ai.onnx.ml",
                    coefficients=[float(v) for v in g.rng.standard_normal(8)], intercepts=[0.5, -1.0],
                    targets=2))
    return g


@case
def ml_normalizer_scaler_binarizer():
    g = Graph("ml_normalizer_scaler_binarizer", domains={"ai.onnx.ml": 1})
    data = g.rng.standard_normal([3, 4]).astype(np.float32)
    data[2] = 0.0  # a zero row: every norm leaves it zero
    x = g.input("x", [3, 4], data=data)
    outs = [g.node("Normalizer", [x], [f"norm_{k.lower()}"], name=f"normalizer_{k.lower()}", domain="ai.onnx.ml",
                   norm=k) for k in ["MAX", "L1", "L2"]]
    outs.append(g.node("Scaler", [x], ["scaled"], name="scaler", domain="ai.onnx.ml",
                       offset=[0.5, -0.5, 1.0, 0.0], scale=[2.0, 1.0, 0.5, 3.0]))
    outs.append(g.node("Binarizer", [x], ["binary"], name="binarizer", domain="ai.onnx.ml", threshold=0.25))
    g.output(*outs)
    return g


def recurrent_graph(name: str, op: str, direction: str, hidden: int, seq_lens=None, layout=0,
                    peepholes=False, **attrs):
    """One RNN/GRU/LSTM over [seq 4, batch 3, input 2] ([batch, seq, input] with layout 1)
    with biases and initial states (and peepholes when asked)."""
    g = Graph(name, opset=14)
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if direction == "bidirectional" else 1
    x = g.input("x", [4, 3, 2] if layout == 0 else [3, 4, 2])
    inputs = [x, g.weight("w", [dirs, gates * hidden, 2]), g.weight("r", [dirs, gates * hidden, hidden]),
              g.weight("b", [dirs, 2 * gates * hidden])]
    # sequence_lens is int32 in ONNX's definition; "" omits it.
    inputs.append(g.const("seq_lens", np.asarray(seq_lens, dtype=np.int32)) if seq_lens is not None else "")
    state = [dirs, 3, hidden] if layout == 0 else [3, dirs, hidden]
    inputs.append(g.input("h0", state))
    outputs = ["y", "y_h"]
    if op == "LSTM":
        inputs.append(g.input("c0", state))
        if peepholes:
            inputs.append(g.weight("p", [dirs, 3 * hidden]))
        outputs.append("y_c")
    if layout:
        attrs["layout"] = layout
    g.output(*g.node(op, inputs, outputs, name=op.lower(), direction=direction, hidden_size=hidden, **attrs))
    return g


@case
def lstm_activations_clip_input_forget():
    return recurrent_graph("lstm_activations_clip_input_forget", "LSTM", "forward", 3,
                           activations=["HardSigmoid", "LeakyRelu", "Softsign"], activation_alpha=[0.3, 0.2],
                           activation_beta=[0.4], clip=1.5, input_forget=1)


@case
def lstm_bidirectional_sequence_lens():
    return recurrent_graph("lstm_bidirectional_sequence_lens", "LSTM", "bidirectional", 3, seq_lens=[4, 2, 1])


@case
def gru_reverse_sequence_lens_activations():
    return recurrent_graph("gru_reverse_sequence_lens_activations", "GRU", "reverse", 3, seq_lens=[3, 4, 1],
                           activations=["Sigmoid", "Relu"], linear_before_reset=1)


@case
def rnn_bidirectional_per_direction_activations():
    return recurrent_graph("rnn_bidirectional_per_direction_activations", "RNN", "bidirectional", 4,
                           activations=["Affine", "ScaledTanh"], activation_alpha=[0.5, 1.2],
                           activation_beta=[0.1, 0.8], clip=2.0)


# The cases below lower to UNIDIRECTIONAL_SEQUENCE_LSTM / _RNN (one per direction). ONNX
# Runtime refuses layout 1, so the batch-major form is left to the ONNX node tests
# (test_lstm_batchwise, test_simple_rnn_batchwise).
@case
def lstm_sequence_op_forward():
    return recurrent_graph("lstm_sequence_op_forward", "LSTM", "forward", 3)


@case
def lstm_sequence_op_bidirectional_peepholes_full_lens():
    return recurrent_graph("lstm_sequence_op_bidirectional_peepholes_full_lens", "LSTM", "bidirectional", 3,
                           seq_lens=[4, 4, 4], peepholes=True)


@case
def lstm_sequence_op_reverse_relu():
    return recurrent_graph("lstm_sequence_op_reverse_relu", "LSTM", "reverse", 5, peepholes=True,
                           activations=["Sigmoid", "Relu", "Relu"])


@case
def rnn_sequence_op_bidirectional_relu():
    return recurrent_graph("rnn_sequence_op_bidirectional_relu", "RNN", "bidirectional", 4,
                           activations=["Relu", "Relu"])


@case
def rnn_sequence_op_reverse_relu():
    return recurrent_graph("rnn_sequence_op_reverse_relu", "RNN", "reverse", 3, activations=["Relu"])


def if_graph(name: str, cond_from_input: bool):
    """y = If(cond, then: x * w + a, else: relu(x) - b); both branches read outer values."""
    g = Graph(name, opset=13)
    x = g.input("x", [2, 3])
    w = g.weight("w", [2, 3])
    a = g.input("a", [3])
    b = g.floats("b", [0.5, -1.0, 2.0])
    if cond_from_input:
        cond = g.input("cond", [], data=np.array(False))
    else:
        # Computed from a static shape: known at compile time.
        shape = g.node("Shape", [x])
        first = g.node("Gather", [shape, g.ints("zero", 0)], axis=0)
        cond = g.node("Equal", [first, g.ints("two", 2)])
    then_branch = helper.make_graph(
        [helper.make_node("Mul", [x, w], ["t0"]), helper.make_node("Add", ["t0", a], ["then_out"])],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 3])])
    else_branch = helper.make_graph(
        [helper.make_node("Relu", [x], ["e0"]), helper.make_node("Sub", ["e0", b], ["else_out"])],
        "else", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])])
    y = g.node("If", [cond], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch)
    g.output(g.node("Sigmoid", [y], ["z"]))
    return g


@case
def if_branches_differ_in_shape():
    """A run-time condition choosing between a [4, 3] and a [2, 3] result: the IF's output
    has a first dimension known only at run time."""
    g = Graph("if_branches_differ_in_shape", opset=13)
    x = g.input("x", [2, 3])
    cond = g.input("cond", [], data=np.array(True))
    then_branch = helper.make_graph(
        [helper.make_node("Concat", [x, x], ["then_out"], axis=0)],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [4, 3])])
    else_branch = helper.make_graph(
        [helper.make_node("Neg", [x], ["else_out"])],
        "else", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])])
    y = g.node("If", [cond], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch)
    g.output(g.node("Relu", [y], ["z"]))
    return g


@case
def if_static_shape_condition():
    return if_graph("if_static_shape_condition", cond_from_input=False)


@case
def if_runtime_condition():
    return if_graph("if_runtime_condition", cond_from_input=True)


@case
def unsupported_ops():
    # Independent branches, so that no unsupported node hides another (nnc skips nodes
    # that read an unsupported node's output).
    g = Graph("unsupported_ops", opset=15, domains={"com.microsoft": 1})
    x = g.input("x", [3, 3])
    g.output(
        g.node("Det", [x], ["det_a_out"], name="det_a"),
        g.node("Det", [x], ["det_b_out"], name="det_b"),
        g.node("QuickGelu", [x], ["quick_gelu_out"], name="quick_gelu", domain="com.microsoft"),
        g.node("Bernoulli", [x], ["bernoulli_out"], name="bernoulli"),
    )
    return g


UNSUPPORTED_OUTPUT_TYPES = {
    "det_a_out": (TensorProto.FLOAT, []),
    "det_b_out": (TensorProto.FLOAT, []),
    "quick_gelu_out": (TensorProto.FLOAT, [3, 3]),
    "bernoulli_out": (TensorProto.FLOAT, [3, 3]),
}


# ---- The README's example model -----------------------------------------------------

def tiny_cnn() -> Graph:
    """A small classifier, float32 [1,3,32,32] -> 10 class probabilities."""
    g = Graph("tiny_cnn")
    x = g.input("input", [1, 3, 32, 32], g.rng.uniform(0, 1, [1, 3, 32, 32]).astype(np.float32))

    def he(name, shape):  # He-style init keeps activations in a sane range
        fan_in = int(np.prod(shape[1:]))
        return g.weight(name, shape, float(np.sqrt(2.0 / fan_in)))

    def bn(y, prefix, c):
        return g.node("BatchNormalization", [y, *batch_norm_params(g, prefix, c)], name=prefix)

    y = g.node("Conv", [x, he("conv1.weight", [8, 3, 3, 3]), g.weight("conv1.bias", [8], 0.1)], name="conv1",
               pads=[1, 1, 1, 1])
    y = g.node("Relu", [bn(y, "bn1", 8)], name="relu1")
    pooled = g.node("MaxPool", [y], name="pool1", kernel_shape=[2, 2], strides=[2, 2])
    y = g.node("Conv", [pooled, he("dw.weight", [8, 1, 3, 3])], name="dw", group=8, pads=[1, 1, 1, 1])
    y = g.node("Clip", [bn(y, "bn2", 8), g.floats("relu6_min", 0.0), g.floats("relu6_max", 6.0)], name="relu6")
    y = g.node("Add", [y, pooled], name="residual")
    y = g.node("Conv", [y, he("pw.weight", [16, 8, 1, 1])], name="pw")
    y = g.node("Relu", [bn(y, "bn3", 16)], name="relu3")
    y = g.node("GlobalAveragePool", [y], name="gap")
    y = g.node("Flatten", [y], name="flatten", axis=1)
    y = g.node("Gemm", [y, he("fc.weight", [10, 16]), g.weight("fc.bias", [10], 0.1)], name="fc", transB=1)
    g.output(g.node("Softmax", [y], ["probabilities"], name="softmax", axis=-1))
    return g


# =====================================================================================
# Writing
# =====================================================================================

def save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        # (not np.ascontiguousarray: it turns a rank-0 array into shape [1])
        np.save(f, np.asarray(array), allow_pickle=False)


def declare_actual_output_shapes(name: str, model: onnx.ModelProto, outputs: list[np.ndarray]) -> None:
    """Where ONNX's shape inference disagrees with onnxruntime (AveragePool's ceil_mode
    rule changed in opset 19 and onnx 1.17 infers the old one), declare what
    onnxruntime computed, so that the model file agrees with its reference output."""
    for o, value in zip(model.graph.output, outputs):
        declared = [d.dim_value for d in o.type.tensor_type.shape.dim]
        if declared != list(value.shape):
            print(f"note: {name}: output '{o.name}' is {list(value.shape)}; ONNX shape inference says {declared}")
            o.type.CopyFrom(helper.make_tensor_type_proto(o.type.tensor_type.elem_type, value.shape))
            onnx.checker.check_model(model)


def write_case(name: str) -> int:
    g = CASES[name]()
    directory = CORPUS / name
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    if name == "unsupported_ops":
        # onnx has no schema for com.microsoft::Gelu, so declare the outputs by hand.
        model = g.model(infer=False)
        del model.graph.output[:]
        for out in g.outputs:
            elem, shape = UNSUPPORTED_OUTPUT_TYPES[out]
            model.graph.output.append(helper.make_tensor_value_info(out, elem, shape))
        onnx.checker.check_model(model)
        (directory / "model.onnx").write_bytes(model.SerializeToString())
        return 1
    model = g.model()
    outputs = run_reference(model, g.feeds)
    declare_actual_output_shapes(name, model, outputs)
    (directory / "model.onnx").write_bytes(model.SerializeToString())
    for i, v in enumerate(g.feeds.values()):
        save_npy(directory / f"input_{i}.npy", v)
    for i, v in enumerate(outputs):
        save_npy(directory / f"output_{i}.npy", v)
    return 1 + len(g.feeds) + len(outputs)


def write_tiny_cnn() -> None:
    g = tiny_cnn()
    model = g.model()
    MODELS.mkdir(parents=True, exist_ok=True)
    (MODELS / "tiny_cnn.onnx").write_bytes(model.SerializeToString())
    (data,) = g.feeds.values()
    save_npy(MODELS / "tiny_cnn.input.npy", data)
    (probabilities,) = run_reference(model, g.feeds)
    save_npy(MODELS / "tiny_cnn.output.npy", probabilities)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all, plus tiny_cnn)")
    parser.add_argument("--list", action="store_true", help="list the case names and exit")
    args = parser.parse_args()
    if args.list:
        print("\n".join([*CASES, "tiny_cnn"]))
        return 0
    unknown = [c for c in args.cases if c not in CASES and c != "tiny_cnn"]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    selected = args.cases or [*CASES, "tiny_cnn"]
    if not args.cases and CORPUS.exists():
        # The corpus is this script's alone: drop directories of cases that are gone.
        for stale in sorted(d for d in CORPUS.iterdir() if d.is_dir() and d.name not in CASES):
            print(f"removing {stale.relative_to(ROOT)} (no such case)")
            shutil.rmtree(stale)
    files = 0
    for name in selected:
        if name == "tiny_cnn":
            write_tiny_cnn()
            files += 3
        else:
            files += write_case(name)
    print(f"wrote {files} files for {len(selected)} case(s) under {ROOT / 'testdata'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
