#!/usr/bin/env python3
"""Writes testdata/hostile/: tiny ONNX models crafted to make a compiler panic, hang or
allocate without bound (the findings of the hardening issue). Each must be refused by
`nnc compile` with a clear error, quickly and within a small memory budget; the tests in
cli/tests/hostile.rs hold that. Needs the `onnx` package; the outputs are committed, so
tests need no Python.

Usage: scripts/gen_hostile_models.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "testdata", "hostile")

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)


def save(name, nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="nnc-hostile")
    model.ir_version = 8
    path = os.path.join(OUT, name + ".onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    print(f"{name}.onnx: {os.path.getsize(path)} bytes")


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def main():
    os.makedirs(OUT, exist_ok=True)
    # Split with a num_outputs no node could have.
    for label, n in [("2p40", 2**40), ("minus1", -1), ("i64max", I64_MAX),
                     ("i64min", I64_MIN), ("2p31m1", 2**31 - 1)]:
        save(f"split_num_outputs_{label}",
             [helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=n)],
             [f32("x", [4, 2])], [f32("a", None), f32("b", None)])
    # Range with an empty start tensor.
    save("range_empty_start",
         [helper.make_node("Range", ["s", "l", "d"], ["y"])],
         [], [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
         [numpy_helper.from_array(np.array([], dtype=np.int64), "s"), i64("l", 10),
          i64("d", 1)])
    # Slice with more starts than the input has dimensions.
    save("slice_more_starts_than_rank",
         [helper.make_node("Slice", ["x", "st", "en"], ["y"])],
         [f32("x", [4])], [f32("y", None)],
         [i64("st", [0, 0, 0]), i64("en", [1, 1, 1])])
    # Each fold is under any per-tensor cap, together they are gigabytes.
    nodes, outs = [], []
    for k in range(48):
        nodes.append(helper.make_node(
            "ConstantOfShape", ["shape"], [f"c{k}"],
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [float(k)])))
        outs.append(f32(f"c{k}", None))
    save("constant_of_shape_many", nodes, [], outs, [i64("shape", [1 << 26])])
    # One fold of 2^40 elements.
    save("constant_of_shape_huge",
         [helper.make_node("ConstantOfShape", ["shape"], ["y"],
                           value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))],
         [], [f32("y", None)], [i64("shape", [1 << 20, 1 << 20])])
    # Expand and Tile of a constant to hundreds of megabytes, repeatedly.
    nodes, outs = [], []
    for k in range(24):
        nodes.append(helper.make_node("Expand", ["one", "shape"], [f"e{k}"]))
        nodes.append(helper.make_node("Tile", [f"e{k}", "reps"], [f"t{k}"]))
        outs.append(f32(f"t{k}", None))
    save("expand_tile_many", nodes, [], outs,
         [numpy_helper.from_array(np.ones([1], np.float32), "one"),
          i64("shape", [1 << 24]), i64("reps", [4])])
    # Range folding to 2^40 elements, and many of 2^26.
    save("range_huge",
         [helper.make_node("Range", ["s", "l", "d"], ["y"])],
         [], [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
         [i64("s", 0), i64("l", 1 << 40), i64("d", 1)])
    nodes, outs = [], []
    for k in range(32):
        nodes.append(helper.make_node("Range", ["s", "l", "d"], [f"r{k}"]))
        outs.append(helper.make_tensor_value_info(f"r{k}", TensorProto.INT64, None))
    save("range_many", nodes, [], outs, [i64("s", 0), i64("l", 1 << 26), i64("d", 1)])
    # A declared input shape of 2^62 elements.
    save("declared_shape_huge",
         [helper.make_node("Relu", ["x"], ["y"])],
         [f32("x", [1 << 31, 1 << 31, 1 << 31])], [f32("y", None)])
    # Pad 'edge' by 2^31 - 10 elements: the index table lowering builds would be 8 GiB.
    save("pad_edge_huge",
         [helper.make_node("Pad", ["x", "pads"], ["y"], mode="edge")],
         [f32("x", [1, 4])], [f32("y", None)], [i64("pads", [0, 0, 0, 2**31 - 10])])
    # Resize to 2^30 x 2^29: checking the sampling grid would loop for minutes.
    save("resize_huge_sizes",
         [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
         [f32("x", [1, 2, 3, 4])], [f32("y", None)], [i64("sizes", [1, 2, 1 << 30, 1 << 29])])
    # One constant folded into a gigabyte weight of the compiled file.
    save("fold_to_gigabyte_weight",
         [helper.make_node("ConstantOfShape", ["shape"], ["c"],
                           value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
          helper.make_node("Add", ["x", "c"], ["y"])],
         [f32("x", [1 << 28])], [f32("y", None)], [i64("shape", [1 << 28])])


if __name__ == "__main__":
    main()
