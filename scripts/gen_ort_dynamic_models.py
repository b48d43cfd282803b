#!/usr/bin/env python3
"""Generates testdata/ort_dynamic/: models ONNX Runtime's `quantize_dynamic` quantized,
with inputs, ONNX Runtime's outputs of the quantized model and the float model's outputs.

Usage (from the repository root, with onnx and onnxruntime installed, e.g. the venv
scripts/setup makes for the zoo):

    target/zoo-venv/bin/python scripts/gen_ort_dynamic_models.py

Cases (each testdata/ort_dynamic/<case>/):

    bert_per_tensor    testdata/transformers/bert_opset17 (tiny random BertModel, made by
                       scripts/gen_transformer_models.py), quantize_dynamic defaults:
                       int8 weights, one scale per tensor (MatMuls and the embedding Gathers)
    bert_per_channel   the same with per_channel=True (one weight scale per output column)
    mlp_per_tensor     a two-layer MLP written here ([2, 5, 48] -> 64 -> Relu -> 16, biases
                       added by Add after each MatMul), int8 weights per tensor
    mlp_per_channel    the same MLP, per_channel=True
    mlp_uint8_centred  mlp_per_channel with its weights rewritten as uint8 with zero point
                       128 (w + 128): the same values, an exactly convertible uint8 form
    mlp_uint8          the MLP with weight_type=QUInt8 (asymmetric uint8 weights, zero
                       points off centre): nnc refuses it, naming the weights
    mlp_unfused        mlp_per_tensor with the first DynamicQuantizeLinear's three outputs
                       and the first MatMulInteger's int32 result as graph outputs too, so
                       nnc cannot fuse that chain and lowers DynamicQuantizeLinear and
                       MatMulInteger on their own (outputs 1-4 must match exactly)
    mlp_unfused_zeros  the same on an all-zero input (DynamicQuantizeLinear's empty range)
    mlp_ort_fused      mlp_per_channel as ONNX Runtime's optimizer saves it
                       (ORT_ENABLE_EXTENDED): com.microsoft.DynamicQuantizeMatMul nodes

Files: model.onnx (quantized), input_0.npy, output_0.npy... (ONNX Runtime on the quantized
model: single thread, graph optimisations disabled so the reference is the model's own
nodes), float_output_0.npy... (ONNX Runtime on the float model). Deterministic for given
package versions (numpy seed 0); versions are printed and written to README.md there.
"""

import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "testdata", "ort_dynamic")
BERT = os.path.join(ROOT, "testdata", "transformers", "bert_opset17")


def run(path, inputs):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, inputs)))


def mlp(path):
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((48, 64)) / np.sqrt(48)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(64)).astype(np.float32)
    w2 = (rng.standard_normal((64, 16)) / np.sqrt(64)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(16)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["y0"], name="fc2"),
        helper.make_node("Add", ["b2", "y0"], ["y"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 16])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    x = rng.standard_normal((2, 5, 48)).astype(np.float32)
    # Rows of different ranges: per-row quantization has something to follow.
    x *= np.array([0.1, 0.5, 1.0, 2.0, 4.0], np.float32)[None, :, None]
    return [x]


def centred_uint8(src, dst):
    """`src` (int8 weights, zero point 0) with every MatMulInteger's weights as uint8
    w + 128 with zero point 128: the same integers minus the zero point."""
    model = onnx.load(src)
    weights = {n.input[1] for n in model.graph.node if n.op_type == "MatMulInteger"}
    zps = {n.input[3] for n in model.graph.node if n.op_type == "MatMulInteger" and len(n.input) > 3}
    for t in model.graph.initializer:
        if t.name in weights or t.name in zps:
            a = numpy_helper.to_array(t)
            assert a.dtype == np.int8, (t.name, a.dtype)
            if t.name in zps:
                assert not a.any(), "expected zero points of 0"
            t.CopyFrom(numpy_helper.from_array((a.astype(np.int16) + 128).astype(np.uint8), t.name))
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, dst)


def unfused(src, dst):
    """`src` with its first DynamicQuantizeLinear's outputs and first MatMulInteger's
    result added to the graph outputs."""
    model = onnx.load(src)
    dql = next(n for n in model.graph.node if n.op_type == "DynamicQuantizeLinear")
    mm = next(n for n in model.graph.node if n.op_type == "MatMulInteger")
    types = [(TensorProto.UINT8, [2, 5, 48]), (TensorProto.FLOAT, []), (TensorProto.UINT8, [])]
    for name, (t, shape) in zip(dql.output, types):
        model.graph.output.append(helper.make_tensor_value_info(name, t, shape))
    model.graph.output.append(
        helper.make_tensor_value_info(mm.output[0], TensorProto.INT32, [2, 5, 64])
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, dst)


def ort_fused(src, dst):
    """`src` as ONNX Runtime's extended graph optimizations leave it."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = dst
    ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    ops = {n.op_type for n in onnx.load(dst).graph.node}
    assert "DynamicQuantizeMatMul" in ops and "MatMulInteger" not in ops, ops


def save(case, model_path, inputs, float_outputs):
    d = os.path.join(OUT, case)
    os.makedirs(d, exist_ok=True)
    shutil.copy(model_path, os.path.join(d, "model.onnx"))
    for i, x in enumerate(inputs):
        np.save(os.path.join(d, f"input_{i}.npy"), x)
    outputs = run(model_path, inputs)
    for i, q in enumerate(outputs):
        np.save(os.path.join(d, f"output_{i}.npy"), q)
    for i, f in enumerate(float_outputs):
        np.save(os.path.join(d, f"float_output_{i}.npy"), f)
    m = onnx.load(model_path)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    q, f = outputs[0].astype(np.float64), float_outputs[0].astype(np.float64)
    sqnr = 10 * np.log10(max((f**2).sum(), 1e-300) / max(((q - f) ** 2).sum(), 1e-300))
    line = (
        f"| {case} | {ops.get('MatMulInteger', 0) + ops.get('DynamicQuantizeMatMul', 0)} | {ops.get('DynamicQuantizeLinear', 0)} "
        f"| {os.path.getsize(model_path)} | {sqnr:.1f} |"
    )
    print(line)
    return line


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    tmp = os.path.join(OUT, ".tmp")
    os.makedirs(tmp)
    lines = []

    bert = os.path.join(BERT, "model.onnx")
    inputs = [np.load(os.path.join(BERT, f"input_{i}.npy")) for i in range(3)]
    float_outputs = run(bert, inputs)
    for case, per_channel in (("bert_per_tensor", False), ("bert_per_channel", True)):
        q = os.path.join(tmp, case + ".onnx")
        quantize_dynamic(bert, q, per_channel=per_channel, weight_type=QuantType.QInt8)
        lines.append(save(case, q, inputs, float_outputs))

    f = os.path.join(tmp, "mlp.onnx")
    inputs = mlp(f)
    float_outputs = run(f, inputs)
    for case, per_channel, wtype in (
        ("mlp_per_tensor", False, QuantType.QInt8),
        ("mlp_per_channel", True, QuantType.QInt8),
        ("mlp_uint8", False, QuantType.QUInt8),
    ):
        q = os.path.join(tmp, case + ".onnx")
        quantize_dynamic(f, q, per_channel=per_channel, weight_type=wtype)
        lines.append(save(case, q, inputs, float_outputs))
    c = os.path.join(tmp, "mlp_uint8_centred.onnx")
    centred_uint8(os.path.join(tmp, "mlp_per_channel.onnx"), c)
    lines.append(save("mlp_uint8_centred", c, inputs, float_outputs))
    u = os.path.join(tmp, "mlp_unfused.onnx")
    unfused(os.path.join(tmp, "mlp_per_tensor.onnx"), u)
    lines.append(save("mlp_unfused", u, inputs, float_outputs))
    zeros = [np.zeros_like(inputs[0])]
    lines.append(save("mlp_unfused_zeros", u, zeros, run(f, zeros)))
    o = os.path.join(tmp, "mlp_ort_fused.onnx")
    ort_fused(os.path.join(tmp, "mlp_per_channel.onnx"), o)
    lines.append(save("mlp_ort_fused", o, inputs, float_outputs))
    shutil.rmtree(tmp)

    with open(os.path.join(OUT, "README.md"), "w") as out:
        out.write(
            "# ONNX Runtime dynamically quantized models\n\n"
            "Made by `scripts/gen_ort_dynamic_models.py` (see there); "
            f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}, "
            f"Python {sys.version.split()[0]}.\n\n"
            "| case | MatMulInteger (or DynamicQuantizeMatMul) | DynamicQuantizeLinear | bytes "
            "| ORT SQNR vs float (dB) |\n"
            "|---|---|---|---|---|\n"
        )
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
