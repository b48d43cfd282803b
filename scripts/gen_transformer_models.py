#!/usr/bin/env python3
"""Generates nnc's transformer test models: tiny, randomly initialised Hugging Face
models exported to ONNX, with ONNX Runtime reference inputs and outputs.

Usage (from the repository root):

    pip install -r scripts/requirements-transformers.txt
    python3 scripts/gen_transformer_models.py            # regenerate every model
    python3 scripts/gen_transformer_models.py bert gpt2   # only these families

Four model families (no pretrained weights are downloaded: every model is built from a
small config with a fixed torch seed):

    bert             BertModel (input_ids, attention_mask with padding, token_type_ids)
    gpt2             GPT2LMHeadModel, use_cache=False (input_ids -> logits)
    vit              ViTModel, 32x32 RGB image, 8x8 patches
    whisper_encoder  WhisperModel's encoder (input_features -> last_hidden_state)

each exported twice:

    <family>_opset17   torch.onnx.export(..., dynamo=False, opset_version=17)  (TorchScript)
    <family>_dynamo    torch.onnx.export(..., dynamo=True,  opset_version=18)  (torch.export
                       + onnxscript; local functions inlined so only standard ops remain)

Shapes are static. Every model is checked with onnx.checker (full_check) and run with
ONNX Runtime's CPUExecutionProvider (single thread, graph optimisations disabled, so the
reference is the model's own semantics). Writes:

    testdata/transformers/<name>/model.onnx
    testdata/transformers/<name>/input_<i>.npy    graph inputs in graph order, graph dtype
    testdata/transformers/<name>/output_<i>.npy   graph outputs in graph order
    testdata/transformers/README.md               per-model opset, op counts, I/O, versions

and prints the op summary. A full run deletes and rewrites testdata/transformers/, and
is deterministic for a given set of package versions (recorded in the README). If an
export or the ONNX Runtime run fails, the failure is recorded in the README and that
model is skipped.
"""

import collections
import io
import os
import shutil
import sys
import traceback
import warnings

import numpy as np
import onnx
import onnx.checker
import onnx.inliner
import onnxruntime as ort

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "testdata", "transformers")

OPSET_TORCHSCRIPT = 17
OPSET_DYNAMO = 18
SEED = 0
MAX_MODEL_BYTES = 2 * 1024 * 1024


# ---------------------------------------------------------------------------------------
# Model families. Each builder returns (module, example inputs as numpy arrays in the
# order of the module's forward arguments, input names, output names, description).
# ---------------------------------------------------------------------------------------


class _Outputs(torch.nn.Module):
    """Wraps a HF model so forward takes positional tensors and returns a tuple."""

    def __init__(self, model, arg_names, out_names, call=None):
        super().__init__()
        self.model = model
        self.arg_names = list(arg_names)
        self.out_names = list(out_names)
        self.call = call

    def forward(self, *args):
        kwargs = dict(zip(self.arg_names, args))
        fn = self.call if self.call is not None else self.model
        out = fn(**kwargs, return_dict=True)
        return tuple(out[n] for n in self.out_names)


def build_bert(rng):
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        type_vocab_size=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.1,
        attn_implementation="eager",
    )
    model = BertModel(config).eval()
    batch, seq = 2, 12
    input_ids = rng.integers(0, config.vocab_size, size=(batch, seq), dtype=np.int64)
    attention_mask = np.ones((batch, seq), dtype=np.int64)
    attention_mask[1, 8:] = 0  # second sequence: 8 real tokens, 4 padding
    input_ids[1, 8:] = 0  # [PAD]
    token_type_ids = np.zeros((batch, seq), dtype=np.int64)
    token_type_ids[0, 6:] = 1
    token_type_ids[1, 5:8] = 1
    names = ["input_ids", "attention_mask", "token_type_ids"]
    outs = ["last_hidden_state", "pooler_output"]
    desc = (
        "BertModel: vocab 512, hidden 32, 2 layers, 4 heads, intermediate 64, eager "
        "attention; batch 2 x seq 12, second row padded (attention_mask 0) after 8 tokens"
    )
    return _Outputs(model, names, outs), [input_ids, attention_mask, token_type_ids], names, outs, desc


def build_gpt2(rng):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=256,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_inner=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        initializer_range=0.1,
        use_cache=False,
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(config).eval()
    batch, seq = 2, 16
    input_ids = rng.integers(0, config.vocab_size, size=(batch, seq), dtype=np.int64)
    # attention_mask is a graph input (as in Hugging Face/optimum exports). Without it,
    # transformers >= 5 inspects position_ids for packed sequences with torch.diff,
    # which the TorchScript exporter cannot export.
    attention_mask = np.ones((batch, seq), dtype=np.int64)
    # Second sequence: 5 left-padding positions, then 11 real tokens (left padding, as in
    # batched generation, so the mask changes the real tokens' outputs; the padded query
    # rows are fully masked, which the additive finfo.min mask keeps finite).
    attention_mask[1, :5] = 0
    input_ids[1, :5] = 0
    names = ["input_ids", "attention_mask"]
    outs = ["logits"]

    def call(input_ids, attention_mask, return_dict):
        return model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            return_dict=return_dict,
        )

    desc = (
        "GPT2LMHeadModel: vocab 256, n_embd 32, 2 layers, 4 heads, n_inner 64, eager "
        "attention, tied lm_head, use_cache=False (no KV cache: causal + padding mask); "
        "batch 2 x seq 16, second row left-padded (attention_mask 0 on its first 5 tokens)"
    )
    return _Outputs(model, names, outs, call=call), [input_ids, attention_mask], names, outs, desc


def build_vit(rng):
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.1,
        attn_implementation="eager",
    )
    model = ViTModel(config).eval()
    pixel_values = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    names = ["pixel_values"]
    outs = ["last_hidden_state", "pooler_output"]
    desc = (
        "ViTModel: 32x32x3 image, patch 8 (16 patches + CLS = 17 tokens), hidden 32, "
        "2 layers, 4 heads, intermediate 64, eager attention; batch 1"
    )
    return _Outputs(model, names, outs), [pixel_values], names, outs, desc


def build_whisper_encoder(rng):
    from transformers import WhisperConfig, WhisperModel

    config = WhisperConfig(
        vocab_size=128,
        num_mel_bins=16,
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=4,
        decoder_layers=1,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=16,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        init_std=0.1,
        use_cache=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=None,
        begin_suppress_tokens=None,
        attn_implementation="eager",
    )
    encoder = WhisperModel(config).get_encoder().eval()
    # The encoder's two convolutions (the second has stride 2) map 2 * max_source_positions
    # frames to max_source_positions positions; the encoder requires exactly that length.
    frames = 2 * config.max_source_positions
    input_features = rng.standard_normal((1, config.num_mel_bins, frames)).astype(np.float32)
    names = ["input_features"]
    outs = ["last_hidden_state"]
    desc = (
        "WhisperModel encoder: 16 mel bins x 32 frames -> 16 positions, d_model 32, "
        "2 layers, 4 heads, ffn 64, eager attention; batch 1"
    )
    return _Outputs(encoder, names, outs), [input_features], names, outs, desc


FAMILIES = collections.OrderedDict(
    [
        ("bert", build_bert),
        ("gpt2", build_gpt2),
        ("vit", build_vit),
        ("whisper_encoder", build_whisper_encoder),
    ]
)


# ---------------------------------------------------------------------------------------
# Export, check, run.
# ---------------------------------------------------------------------------------------


def build(family):
    """Builds the family's module and inputs with fixed seeds (same for both exporters)."""
    torch.manual_seed(SEED)
    rng = np.random.default_rng(abs(hash_name(family)))
    return FAMILIES[family](rng)


def hash_name(name):
    h = 0
    for c in name.encode():
        h = (h * 131 + c) % (2**31 - 1)
    return h


def export_torchscript(module, torch_args, in_names, out_names):
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(torch_args),
            buf,
            dynamo=False,
            opset_version=OPSET_TORCHSCRIPT,
            input_names=in_names,
            output_names=out_names,
            do_constant_folding=True,
        )
    return onnx.load_from_string(buf.getvalue())


def export_dynamo(module, torch_args, in_names, out_names):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            tuple(torch_args),
            dynamo=True,
            opset_version=OPSET_DYNAMO,
            input_names=in_names,
            output_names=out_names,
            external_data=False,
            optimize=True,
            verbose=False,
        )
    model = program.model_proto
    if len(model.functions) > 0:
        model = onnx.inliner.inline_local_functions(model)
    return model


def strip_nondeterminism(model):
    """Drops exporter metadata (none of it is semantic): the dynamo exporter attaches
    each node's Python stack trace, with absolute paths, as metadata_props, which would
    make the files machine-dependent and twice as large."""
    del model.metadata_props[:]
    model.doc_string = ""

    def strip_graph(graph):
        graph.doc_string = ""
        del graph.metadata_props[:]
        for t in graph.initializer:
            del t.metadata_props[:]
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            del vi.metadata_props[:]
            vi.doc_string = ""
        for node in graph.node:
            node.doc_string = ""
            del node.metadata_props[:]
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    strip_graph(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for g in attr.graphs:
                        strip_graph(g)

    strip_graph(model.graph)
    return model


def iter_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_nodes(g)


def op_counts(model):
    counts = collections.Counter()
    for node in iter_nodes(model.graph):
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        counts[key] += 1
    return counts


def opset_of(model):
    return {(o.domain or "ai.onnx"): o.version for o in model.opset_import}


TENSOR_NP = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
}


def value_info_desc(vi):
    t = vi.type.tensor_type
    dims = []
    for d in t.shape.dim:
        dims.append(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?"))
    return onnx.TensorProto.DataType.Name(t.elem_type).lower(), "[" + ", ".join(dims) + "]"


def run_ort(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def make_case(name, family, exporter):
    """Exports one model and writes its directory. Returns a result dict."""
    module, np_inputs, in_names, out_names, desc = build(family)
    torch_args = [torch.from_numpy(a.copy()) for a in np_inputs]
    with torch.no_grad():
        torch_outputs = [t.detach().numpy() for t in module(*torch_args)]
    result = {
        "name": name,
        "family": family,
        "exporter": exporter,
        "desc": desc,
        "problems": [],
    }
    try:
        with torch.no_grad():
            if exporter == "torchscript":
                model = export_torchscript(module, torch_args, in_names, out_names)
            else:
                model = export_dynamo(module, torch_args, in_names, out_names)
    except Exception as e:  # noqa: BLE001
        result["problems"].append(f"export failed: {type(e).__name__}: {first_line(e)}")
        traceback.print_exc()
        return result
    model = strip_nondeterminism(model)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # noqa: BLE001
        result["problems"].append(f"onnx.checker failed: {type(e).__name__}: {first_line(e)}")

    graph_inputs = [i for i in model.graph.input]
    init_names = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in graph_inputs if i.name not in init_names]
    if [i.name for i in graph_inputs] != in_names:
        # The exporter may drop or reorder inputs; map by name.
        result["problems"].append(
            f"graph inputs {[i.name for i in graph_inputs]} differ from {in_names}"
        )
    by_name = dict(zip(in_names, np_inputs))
    feeds = {}
    for vi in graph_inputs:
        dtype = TENSOR_NP[vi.type.tensor_type.elem_type]
        feeds[vi.name] = by_name[vi.name].astype(dtype)

    try:
        outputs = run_ort(model, feeds)
    except Exception as e:  # noqa: BLE001
        result["problems"].append(f"ONNX Runtime failed: {type(e).__name__}: {first_line(e)}")
        traceback.print_exc()
        return result

    # Sanity: ONNX Runtime agrees with torch.
    max_diff = 0.0
    for o, t in zip(outputs, torch_outputs):
        if o.shape != t.shape:
            result["problems"].append(f"output shape {o.shape} != torch {t.shape}")
            continue
        max_diff = max(max_diff, float(np.max(np.abs(o.astype(np.float64) - t))))
    if max_diff > 1e-4:
        result["problems"].append(f"ONNX Runtime differs from torch by {max_diff:.3g}")

    data = model.SerializeToString()
    if len(data) > MAX_MODEL_BYTES:
        result["problems"].append(f"model is {len(data)} bytes (> {MAX_MODEL_BYTES})")

    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(data)
    for i, vi in enumerate(graph_inputs):
        np.save(os.path.join(d, f"input_{i}.npy"), feeds[vi.name])
    for i, o in enumerate(outputs):
        np.save(os.path.join(d, f"output_{i}.npy"), o)

    result.update(
        {
            "model": model,
            "bytes": len(data),
            "opset": opset_of(model),
            "ops": op_counts(model),
            "inputs": [(vi.name,) + value_info_desc(vi) for vi in graph_inputs],
            "outputs": [(vi.name,) + value_info_desc(vi) for vi in model.graph.output],
            "max_abs": max(float(np.max(np.abs(o))) for o in outputs),
            "torch_diff": max_diff,
            "initializers": len(model.graph.initializer),
        }
    )
    return result


def first_line(e):
    s = str(e).strip().splitlines()
    return s[0][:300] if s else ""


# ---------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------


def versions():
    import importlib.metadata as md

    pkgs = ["torch", "transformers", "onnxscript", "onnx", "onnxruntime", "numpy"]
    out = []
    for p in pkgs:
        try:
            out.append((p, md.version(p)))
        except md.PackageNotFoundError:
            out.append((p, "not installed"))
    out.append(("python", sys.version.split()[0]))
    return out


def format_ops(ops):
    return ", ".join(f"{k} x{v}" for k, v in sorted(ops.items()))


def write_readme(results):
    lines = [
        "# Transformer test models",
        "",
        "Generated by `scripts/gen_transformer_models.py` (do not edit by hand; rerun the",
        "script: `python3 scripts/gen_transformer_models.py`). Tiny Hugging Face models with",
        "random weights (fixed torch seed, no pretrained weights), static shapes, exported",
        f"with the TorchScript exporter at opset {OPSET_TORCHSCRIPT} (`*_opset17`) and the dynamo",
        f"exporter at opset {OPSET_DYNAMO} (`*_dynamo`, local functions inlined).",
        "",
        "Each directory holds `model.onnx`, `input_<i>.npy` (graph inputs in graph order, in",
        "the graph's dtype) and `output_<i>.npy` (ONNX Runtime CPUExecutionProvider outputs,",
        "one thread, graph optimisations disabled, in graph-output order).",
        "",
        "Versions used:",
        "",
    ]
    for p, v in versions():
        lines.append(f"- {p} {v}")
    lines += [
        "",
        "Installed with `pip install -r scripts/requirements-transformers.txt` (plain PyPI;",
        "torch's CPU-only wheel index is not reachable from this workplace).",
        "",
        "Notes:",
        "",
        "- All models use `attn_implementation=\"eager\"`, so attention is plain",
        "  MatMul/Softmax with an additive (or Where-selected) `finfo(float32).min` mask.",
        "- Exporter metadata (the dynamo exporter's per-node stack traces with absolute",
        "  paths, doc strings) is stripped so the files are machine-independent.",
        "- GPT-2 takes `attention_mask` as an input: without it transformers 5 checks",
        "  `position_ids` for packed sequences with `torch.diff`, and the TorchScript",
        "  exporter fails with \"Exporting the operator 'aten::diff' to ONNX opset version",
        "  17 is not supported\".",
        "- Whisper needs `pad_token_id` etc. inside the small vocabulary (the defaults,",
        "  e.g. 50257, fail `nn.Embedding`'s padding_idx check).",
        "- The dynamo exporter's models ran in ONNX Runtime as exported; they contained no",
        "  local functions and only default-domain ops.",
        "",
    ]
    for r in results:
        lines.append(f"## {r['name']}")
        lines.append("")
        lines.append(f"- {r['desc']}")
        exporter = (
            f"TorchScript (`dynamo=False`, opset_version={OPSET_TORCHSCRIPT})"
            if r["exporter"] == "torchscript"
            else f"dynamo (`dynamo=True`, opset_version={OPSET_DYNAMO})"
        )
        lines.append(f"- exporter: {exporter}")
        for p in r["problems"]:
            lines.append(f"- PROBLEM: {p}")
        if "model" not in r:
            lines.append("- not written")
            lines.append("")
            continue
        opset = ", ".join(f"{k} {v}" for k, v in sorted(r["opset"].items()))
        lines.append(f"- opset imports: {opset}")
        lines.append(f"- model.onnx: {r['bytes']} bytes, {r['initializers']} initializers")
        for i, (n, dt, shp) in enumerate(r["inputs"]):
            lines.append(f"- input_{i}: `{n}` {dt} {shp}")
        for i, (n, dt, shp) in enumerate(r["outputs"]):
            lines.append(f"- output_{i}: `{n}` {dt} {shp}")
        lines.append(f"- largest |reference output|: {r['max_abs']:.6g}")
        lines.append(f"- max |ONNX Runtime - torch|: {r['torch_diff']:.3g}")
        total = sum(r["ops"].values())
        lines.append(f"- operators ({total} nodes, {len(r['ops'])} types):")
        lines.append("")
        lines.append("  | op | count |")
        lines.append("  | --- | ---: |")
        for k, v in sorted(r["ops"].items()):
            lines.append(f"  | {k} | {v} |")
        lines.append("")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")


def main(argv):
    families = argv[1:] or list(FAMILIES)
    for f in families:
        if f not in FAMILIES:
            sys.exit(f"unknown family {f!r}; choose from {', '.join(FAMILIES)}")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    full = families == list(FAMILIES)
    if full and os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT, exist_ok=True)

    results = []
    for family in FAMILIES:
        for exporter, suffix in (("torchscript", "opset17"), ("dynamo", "dynamo")):
            name = f"{family}_{suffix}"
            if family not in families:
                continue
            d = os.path.join(OUT, name)
            if os.path.isdir(d):
                shutil.rmtree(d)
            print(f"== {name}", flush=True)
            results.append(make_case(name, family, exporter))

    if full:
        write_readme(results)
    else:
        print("(partial run: README.md not rewritten)")

    print()
    print("Operator summary")
    for r in results:
        print()
        if "model" not in r:
            print(f"{r['name']}: NOT WRITTEN: {'; '.join(r['problems'])}")
            continue
        opset = ", ".join(f"{k} {v}" for k, v in sorted(r["opset"].items()))
        print(f"{r['name']} ({opset}; {r['bytes']} bytes; max|out| {r['max_abs']:.4g}):")
        print(f"  {format_ops(r['ops'])}")
        for p in r["problems"]:
            print(f"  PROBLEM: {p}")
    return 1 if any("model" not in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
