#!/usr/bin/env python3
"""Quantize the models of quantize_models.py with ONNX Runtime and with nnc; compare with float.

Usage: quantize_eval.py DATA_DIR OUT_DIR --nnc NNC [--models LIST] [--calib N] [--heldout N]
           [--runs N] [--rounds R] [--ort-methods LIST] [--ort-uint8 LIST] [--entropy-bins N]
           [--ort-chunk N] [--nnc-methods LIST] [--no-nnc]

For each model in DATA_DIR (see quantize_models.py):
  reference   ONNX Runtime, float, model_static.onnx, on the held-out inputs
  ORT QDQ     onnxruntime.quantization.quantize_static: QDQ, per-channel, QInt8 activations
              and weights, calibrated by MinMax, Entropy and Percentile with ORT's defaults
              on the first N calibration inputs, after quant_pre_process (shape inference
              and graph optimization; the table says if it failed). Notes:
              - ORT's Entropy default (128 bins, 128 quantized bins) leaves the full range
                as the only candidate threshold: it is MinMax (up to chunk merging).
                --entropy-bins 2048 adds a real KL search (slow, and worse here).
              - on x86 ORT fuses int8-activation QDQ graphs only in part (ResNet18: 9 of 20
                Convs become QLinearConv; all 20 with uint8 activations, 18 ms vs 7 ms), so
                MinMax also runs with QUInt8 activations (--ort-uint8), ORT's x86 advice.
              - models below opset 13 (PaddleOCR's are 12) are upgraded with
                onnx.version_converter first (per-channel DequantizeLinear needs its axis),
                checked to reproduce the reference.
              - the calibrator keeps every intermediate tensor of what it collected (~210 MB
                a recognizer sample): samples go to it --ort-chunk at a time
                (CalibStridedMinMax, which works for every method; histograms merge).
  nnc float   `nnc compile --encrypt none`, run by one `nnc run --stream` over the stacked
              held-out inputs
  nnc int8    `nnc compile --quantize int8 --calibration DIR --calibration-method M
              --quant-report R` for M in minmax, percentile, entropy, mse; same inputs
Metrics against the reference: SQNR = 10 log10(sum ref^2 / sum (ref - q)^2) with every
held-out output concatenated, the median of the per-sample SQNRs, and per kind: top-1
agreement (classifiers); argmax agreement over all output positions, over the positions
whose float argmax is not the CTC blank, and exact agreement of the CTC-collapsed
sequences (recognizer); IoU of the probability maps thresholded at 0.3, DB's threshold
(detector). Latency: one thread, median over R interleaved rounds of each round's median
of N runs: ORT sessions timed in this process, nnc by `nnc bench --json`.
An nnc failure marks its row (the error's first lines) and the rest goes on.

Writes OUT_DIR/results.json and OUT_DIR/results.md (rewritten after each model) and
prints the tables; work files go to OUT_DIR/work/MODEL.
"""
import argparse
import contextlib
import datetime
import glob
import importlib
import io
import json
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

ORT_METHODS = ("MinMax", "Entropy", "Percentile")
NNC_METHODS = ("auto", "minmax", "percentile", "entropy", "mse")
SQNR_DEF = ("SQNR = 10*log10(sum(ref^2) / sum((ref - q)^2)) over all held-out outputs "
            "concatenated; ref = ONNX Runtime float on the same inputs")


# ---------------------------------------------------------------- ONNX Runtime
def session(path, threads=1):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    o.log_severity_level = 3
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def run_all(sess, name, xs):
    return [[np.asarray(y) for y in sess.run(None, {name: x})] for x in xs]


def ort_median_ms(sess, name, x, runs):
    feed = {name: x}
    sess.run(None, feed)
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        sess.run(None, feed)
        t.append(time.perf_counter() - a)
    return float(np.median(t) * 1e3)


class Reader(CalibrationDataReader):
    """The calibration inputs, one .npy file per sample."""

    def __init__(self, name, files):
        self.name = name
        self.all = list(files)
        self.files = list(files)

    def get_next(self):
        if not self.files:
            return None
        return {self.name: np.load(self.files.pop(0))}

    # quantize_static's CalibStridedMinMax feeds the calibrator chunk by chunk through these.
    def __len__(self):
        return len(self.all)

    def set_range(self, start_index, end_index):
        self.files = self.all[start_index:end_index]


@contextlib.contextmanager
def histogram_bins(num_bins):
    """quantize_static passes no bin count to its calibrator: set one for the duration.

    ORT's Entropy default (128 bins, 128 quantized bins) leaves a single candidate threshold,
    the full range, so it equals MinMax; 2048 bins make the KL search real (TensorRT's way).
    """
    # The package's `quantize` attribute is a function: take the module itself.
    ortq = importlib.import_module("onnxruntime.quantization.quantize")
    original = ortq.create_calibrator

    def create(*args, **kw):
        kw["extra_options"] = dict(kw.get("extra_options") or {}, num_bins=num_bins)
        return original(*args, **kw)

    ortq.create_calibrator = create
    try:
        yield
    finally:
        ortq.create_calibrator = original


def ort_quantize(src, dst, input_name, calib_files, method, activations, chunk, bins=None):
    # Calibration keeps every intermediate tensor of the samples it has collected (the
    # recognizer: about 210 MB a sample): feed it chunk samples at a time.
    # (CalibStridedMinMax works for every method despite its name; MinMax ranges merge
    # exactly, histograms are merged by ORT's collector, close to one pass but not equal.)
    extra = {"CalibStridedMinMax": chunk} if chunk < len(calib_files) else {}
    # The calibrators print their progress: keep it out of the report.
    with contextlib.redirect_stdout(io.StringIO()), (histogram_bins(bins) if bins else contextlib.nullcontext()):
        quantize_static(src, dst, Reader(input_name, calib_files), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=activations, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method), extra_options=extra)


def ort_opset13(src, dst, inp, xs, ref):
    """src upgraded to opset 13 when older: per-channel QDQ needs DequantizeLinear's axis.

    Returns the model to quantize and a note; the upgraded graph must reproduce the reference.
    """
    import onnx
    from onnx import version_converter

    m = onnx.load(src)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset >= 13:
        return src, ""
    onnx.save(version_converter.convert_version(m, 13), dst)
    got = run_all(session(dst), inp, xs[:4])
    gap = max(float(np.max(np.abs(g[0] - r[0]))) for g, r in zip(got, ref))
    if gap > 1e-4:
        raise SystemExit(f"quantize_eval: {src} converted to opset 13 differs from it by {gap:.2e}")
    return dst, f"opset {opset} -> 13 by onnx.version_converter (max |diff| {gap:.1e}); "


def ort_pre_process(src, dst):
    """quant_pre_process, or the reason it could not run (then src is quantized as it is)."""
    try:
        quant_pre_process(src, dst)
        session(dst)
        return dst, "yes"
    except Exception as e:  # noqa: BLE001 - reported in the table
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        try:
            quant_pre_process(src, dst, skip_symbolic_shape=True)
            session(dst)
            return dst, f"yes, without symbolic shape inference ({first[:120]})"
        except Exception as e2:  # noqa: BLE001
            return src, f"no: {type(e2).__name__}: {str(e2).strip()[:160]}"


# ---------------------------------------------------------------- nnc
class NncError(Exception):
    pass


def nnc_call(cmd, timeout=1800):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise NncError(f"timed out after {timeout} s: {' '.join(cmd[:3])}") from e
    if r.returncode != 0:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        msg = " / ".join(lines[:4]) or f"exit {r.returncode}"
        raise NncError(f"exit {r.returncode}: {msg}")
    return r.stdout


def nnc_compile(nnc, src, dst, input_shape, extra=()):
    cmd = [nnc, "compile", src, "-o", dst, "--encrypt", "none"]
    if input_shape:
        cmd += ["--input-shape", input_shape]
    cmd += list(extra)
    a = time.perf_counter()
    nnc_call(cmd)
    return time.perf_counter() - a


def nnc_run(nnc, model, input_name, stack, out_dir, n):
    """Every held-out input in one `nnc run --stream`; per-sample lists of outputs."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    nnc_call([nnc, "run", model, "--stream", f"{input_name}={stack}", "--output-dir", out_dir])
    files = sorted(glob.glob(os.path.join(out_dir, "output_*.npy")),
                   key=lambda f: int(os.path.basename(f)[7:-4]))
    if not files:
        raise NncError("nnc run wrote no outputs")
    outs = [np.load(f) for f in files]
    if any(o.shape[0] != n for o in outs):
        raise NncError(f"nnc run: stacked outputs {[o.shape for o in outs]}, expected {n} steps")
    return [[o[i] for o in outs] for i in range(n)]


def report_summary(path):
    """The scalar fields and the output figures of nnc's --quant-report (its format may grow)."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        return {"unreadable": str(e)[:200]}
    if not isinstance(r, dict):
        return {}
    out = {k: v for k, v in r.items() if not isinstance(v, (list, dict))}
    if isinstance(r.get("outputs"), list):
        out["outputs"] = r["outputs"]
    return out


def nnc_median_ms(nnc, model, input_name, sample, runs):
    out = nnc_call([nnc, "bench", model, "--threads", "1", "--runs", str(runs),
                    "--input", f"{input_name}={sample}", "--json"])
    return float(json.loads(out)["median_ms"])


# ---------------------------------------------------------------- metrics
def flat(outs):
    return np.concatenate([np.asarray(y, np.float64).ravel() for sample in outs for y in sample])


def sqnr_db(ref, q):
    signal = float(np.sum(ref * ref))
    noise = float(np.sum((ref - q) ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


def ctc_collapse(idx):
    out, prev = [], -1
    for i in idx:
        if i != prev and i != 0:
            out.append(int(i))
        prev = i
    return out


def metrics(kind, ref, got):
    r, q = flat(ref), flat(got)
    if r.shape != q.shape:
        raise NncError(f"output sizes differ: {r.shape} against {q.shape}")
    m = {"sqnr_db": sqnr_db(r, q),
         "median_sample_sqnr_db": float(np.median([sqnr_db(flat([a]), flat([b])) for a, b in zip(ref, got)])),
         "max_abs_diff": float(np.max(np.abs(r - q)))}
    y_ref = [s[0] for s in ref]
    y_got = [s[0] for s in got]
    if kind == "classifier":
        m["top1_agreement"] = float(np.mean([a.argmax() == b.argmax() for a, b in zip(y_ref, y_got)]))
    elif kind == "recognizer":
        a = np.stack([y.reshape(-1, y.shape[-1]).argmax(1) for y in y_ref])
        b = np.stack([y.reshape(-1, y.shape[-1]).argmax(1) for y in y_got])
        m["argmax_agreement"] = float(np.mean(a == b))
        nb = a != 0
        m["nonblank_argmax_agreement"] = float(np.mean(a[nb] == b[nb])) if nb.any() else math.nan
        m["decoded_agreement"] = float(np.mean([ctc_collapse(x) == ctc_collapse(y) for x, y in zip(a, b)]))
    elif kind == "detector":
        a = np.stack([y > 0.3 for y in y_ref])
        b = np.stack([y > 0.3 for y in y_got])
        union = int((a | b).sum())
        m["mask_iou"] = float((a & b).sum() / union) if union else 1.0
    return m


# ---------------------------------------------------------------- one model
def evaluate(name, data, work, a):
    with open(os.path.join(data, "meta.json")) as f:
        meta = json.load(f)
    kind, inp = meta["kind"], meta["input_name"]
    calib_all = sorted(glob.glob(os.path.join(data, "calib", "*.npy")))
    held_all = sorted(glob.glob(os.path.join(data, "heldout", "*.npy")))
    calib = calib_all[: a.calib]
    held = held_all[: a.heldout]
    if not calib or not held:
        raise SystemExit(f"quantize_eval: {data} has no calibration or held-out samples")
    os.makedirs(work, exist_ok=True)
    xs = [np.load(f) for f in held]
    static = os.path.join(data, "model_static.onnx")
    source = os.path.join(data, "model.onnx")
    rows = []
    timers = {}  # row index -> callable giving one round's median latency (ms)

    def add(engine, method, **kw):
        row = {"engine": engine, "method": method, "latency_ms": None, "quantize_s": None, "error": None}
        row.update(kw)
        rows.append(row)
        return len(rows) - 1

    print(f"[{name}] ONNX Runtime float reference over {len(xs)} held-out inputs", flush=True)
    ref_sess = session(static)
    ref = run_all(ref_sess, inp, xs)
    i = add("ORT", "float (reference)", **metrics(kind, ref, ref))
    timers[i] = lambda s=ref_sess: ort_median_ms(s, inp, xs[0], a.runs)

    pre = os.path.join(work, "ort_pre.onnx")
    if a.ort_methods or a.ort_uint8:
        upgraded, note = ort_opset13(static, os.path.join(work, "ort_opset13.onnx"), inp, xs, ref)
        pre_path, pre_status = ort_pre_process(upgraded, pre)
        pre_status = note + pre_status
    else:
        pre_path, pre_status = static, "-"
    print(f"[{name}] quant_pre_process: {pre_status}", flush=True)
    # The largest divisor of the sample count up to --ort-chunk (ORT wants equal chunks).
    chunk = max(c for c in range(1, min(a.ort_chunk, len(calib)) + 1) if len(calib) % c == 0)
    ort_configs = [(m, QuantType.QInt8, None, f"QDQ {m}") for m in a.ort_methods]
    if a.entropy_bins:
        ort_configs.append(("Entropy", QuantType.QInt8, a.entropy_bins, f"QDQ Entropy, {a.entropy_bins} bins"))
    ort_configs += [(m, QuantType.QUInt8, None, f"QDQ {m}, uint8 activations") for m in a.ort_uint8]
    for method, act, bins, label in ort_configs:
        tag = f"{method.lower()}{'_u8' if act == QuantType.QUInt8 else ''}{f'_{bins}' if bins else ''}"
        q = os.path.join(work, f"ort_qdq_{tag}.onnx")
        print(f"[{name}] ORT quantize_static {label}, per-channel", flush=True)
        try:
            t0 = time.perf_counter()
            ort_quantize(pre_path, q, inp, calib, method, act, chunk, bins)
            took = time.perf_counter() - t0
            s = session(q)
            i = add("ORT", label, quantize_s=took, **metrics(kind, ref, run_all(s, inp, xs)))
            timers[i] = lambda s=s: ort_median_ms(s, inp, xs[0], a.runs)
        except Exception as e:  # noqa: BLE001 - reported in the row
            add("ORT", label, error=f"{type(e).__name__}: {str(e)[:300]}")

    if a.nnc:
        stack = os.path.join(work, "heldout_stack.npy")
        np.save(stack, np.stack(xs))
        calib_dir = os.path.join(data, "calib")
        if len(calib) < len(calib_all):
            # nnc takes every *.npy of the directory: give it the same subset ORT gets.
            calib_dir = os.path.join(work, f"calib-{len(calib)}")
            shutil.rmtree(calib_dir, ignore_errors=True)
            os.makedirs(calib_dir)
            for f in calib:
                shutil.copyfile(f, os.path.join(calib_dir, os.path.basename(f)))
        configs = [("float", [])] + [
            (f"int8 {m}", ["--quantize", "int8", "--calibration", calib_dir, "--calibration-method", m,
                           "--quant-report", os.path.join(work, f"nnc_report_{m}.json")])
            for m in a.nnc_methods]
        for label, extra in configs:
            out = os.path.join(work, f"nnc_{label.replace(' ', '_')}.nnc")
            print(f"[{name}] nnc {label}", flush=True)
            try:
                took = nnc_compile(a.nnc, source, out, meta.get("nnc_input_shape"), extra)
                got = nnc_run(a.nnc, out, inp, stack, os.path.join(work, "nnc_out"), len(xs))
                i = add("nnc", label, quantize_s=took if extra else None, **metrics(kind, ref, got))
                report = os.path.join(work, f"nnc_report_{label.split()[-1]}.json")
                if extra and os.path.exists(report):
                    rows[i]["quant_report"] = report
                    rows[i]["nnc_report"] = report_summary(report)
                timers[i] = lambda out=out: nnc_median_ms(a.nnc, out, inp, held[0], a.runs)
            except NncError as e:
                print(f"[{name}] nnc {label} failed: {e}", file=sys.stderr, flush=True)
                add("nnc", label, error=str(e)[:400])

    # Latency: rounds interleave every configuration so a busy minute slows them all.
    print(f"[{name}] latency: {a.rounds} rounds x {a.runs} runs, 1 thread", flush=True)
    per = {i: [] for i in timers}
    for _ in range(a.rounds):
        for i, fn in timers.items():
            try:
                per[i].append(fn())
            except NncError as e:
                rows[i]["error"] = f"bench: {e}"[:400]
    for i, v in per.items():
        if v:
            rows[i]["latency_ms"] = float(np.median(v))
    return {"meta": meta, "calib": len(calib), "heldout": len(xs), "ort_pre_process": pre_status,
            "ort_calibration_chunk": chunk if a.ort_methods or a.ort_uint8 else None, "rows": rows}


# ---------------------------------------------------------------- report
def fmt(v, spec="{:.1f}"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return spec.format(v)


def pct(v):
    return fmt(None if v is None else 100.0 * v, "{:.1f}%")


def table(name, res):
    meta, kind = res["meta"], res["meta"]["kind"]
    task = {"classifier": [("top-1 agree", "top1_agreement")],
            "recognizer": [("argmax agree", "argmax_agreement"),
                           ("non-blank argmax agree", "nonblank_argmax_agreement"),
                           ("decoded text agree", "decoded_agreement")],
            "detector": [("mask IoU@0.3", "mask_iou")]}[kind]
    float_ms = {r["engine"]: r["latency_ms"] for r in res["rows"] if r["method"].startswith("float")}
    head = ["engine", "method", "SQNR dB", "median sample SQNR dB"] + [t for t, _ in task] + \
        ["latency ms", "vs float", "quantize s", "int8 ops"]
    shape = "x".join(str(v) for v in meta["input_shape"])
    out = [f"### {name} ({kind}, input {meta['input_name']} {shape}; "
           f"{res['calib']} calibration / {res['heldout']} held-out samples; "
           f"ORT quant_pre_process: {res['ort_pre_process']}"
           + (f"; ORT calibration in chunks of {res['ort_calibration_chunk']}"
              if res.get("ort_calibration_chunk") and res["ort_calibration_chunk"] < res["calib"] else "")
           + ")", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["rows"]:
        if r.get("sqnr_db") is None:
            cells = [r["engine"], r["method"], "FAILED: " + (r["error"] or "").replace("|", "/")[:160]] + \
                [""] * (len(head) - 3)
        else:
            base = float_ms.get(r["engine"])
            ratio = r["latency_ms"] / base if r["latency_ms"] and base else None
            rep = r.get("nnc_report") or {}
            ops = f"{rep['operations_quantized']}/{rep['operations_total']}" \
                if "operations_quantized" in rep and "operations_total" in rep else "-"
            cells = [r["engine"], r["method"], fmt(r["sqnr_db"]), fmt(r["median_sample_sqnr_db"])] + \
                [pct(r.get(k)) for _, k in task] + \
                [fmt(r["latency_ms"], "{:.2f}"), fmt(ratio, "{:.2f}"), fmt(r["quantize_s"]), ops]
            if r["error"]:
                cells[-4] = "FAILED: " + r["error"].replace("|", "/")[:120]
        out.append("| " + " | ".join(cells) + " |")
    s = meta.get("sanity")
    if s:
        out += ["", f"Float model sanity: `{json.dumps({k: v for k, v in s.items() if k != 'examples'})}`"]
    return "\n".join(out)


def markdown(results):
    e = results["environment"]
    lines = ["# Post-training int8 quantization: nnc against ONNX Runtime", "",
             f"{e['date']}; {e['machine']}; onnxruntime {e['onnxruntime']}; {e['nnc_version']}", "",
             SQNR_DEF + ". Median sample SQNR: the same per held-out input, then the median. "
             "Agreement columns compare with the float reference. Latency: 1 thread, median of "
             f"{e['rounds']} interleaved rounds of {e['runs']} runs; 'vs float' is int8 / float "
             "of the same engine. ORT QDQ: quantize_static, per-channel, QInt8 activations and "
             "weights (on x86 ORT fuses only part of such a graph into integer kernels: the "
             "'uint8 activations' row is ORT's recommended x86 configuration, the fair latency "
             "peer). nnc float: nnc's own float32 run against the ORT reference, for scale. "
             "'quantize s': quantize_static's or `nnc compile --quantize`'s wall time; 'int8 ops': "
             "operations nnc quantized / all, from its --quant-report.", ""]
    for name, res in results["models"].items():
        lines += [table(name, res), ""]
    return "\n".join(lines)


def json_safe(v):
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return str(v)
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_1,ppocr_det,ppocr_rec")
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--heldout", type=int, default=64)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ort-methods", default=",".join(ORT_METHODS))
    ap.add_argument("--entropy-bins", type=int, default=0,
                    help="also run Entropy with this many histogram bins (0: no; 2048 took "
                         "164 s on the recognizer and gave 1.2 dB)")
    ap.add_argument("--ort-chunk", type=int, default=16,
                    help="calibration samples ORT's calibrator holds at once (memory)")
    ap.add_argument("--ort-uint8", default="MinMax",
                    help="methods also run with uint8 activations (ORT's advice for x86, where its "
                         "int8-activation QDQ graphs keep some float convolutions); empty for none")
    ap.add_argument("--nnc-methods", default=",".join(NNC_METHODS))
    ap.add_argument("--no-nnc", dest="nnc_on", action="store_false")
    a = ap.parse_args()
    a.ort_methods = [m for m in a.ort_methods.split(",") if m]
    a.ort_uint8 = [m for m in a.ort_uint8.split(",") if m]
    a.nnc_methods = [m for m in a.nnc_methods.split(",") if m]
    bad = [m for m in a.ort_methods + a.ort_uint8 if m not in ORT_METHODS] + \
        [m for m in a.nnc_methods if m not in NNC_METHODS]
    if bad:
        sys.exit(f"quantize_eval: unknown methods {bad}")
    nnc = a.nnc
    a.nnc = os.path.abspath(nnc) if a.nnc_on else None
    # quantize_static warns on every call about pre-processing and prints calibration chatter.
    logging.getLogger().setLevel(logging.ERROR)
    os.makedirs(a.out, exist_ok=True)
    try:
        version = subprocess.run([nnc, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
        # The binary is rebuilt often: say which one ran.
        built = datetime.datetime.fromtimestamp(os.path.getmtime(nnc)).strftime("%Y-%m-%d %H:%M")
        version = f"{version} (binary of {built})"
    except OSError:
        version = "nnc (not found)"
    results = {"environment": {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "onnxruntime": ort.__version__, "nnc_version": version, "nnc": nnc,
        "runs": a.runs, "rounds": a.rounds, "sqnr": SQNR_DEF}, "models": {}}
    for name in [m for m in a.models.split(",") if m]:
        data = os.path.join(a.data, name)
        if not os.path.exists(os.path.join(data, "meta.json")):
            sys.exit(f"quantize_eval: {data}/meta.json missing (run quantize_models.py)")
        t0 = time.perf_counter()
        res = evaluate(name, data, os.path.join(a.out, "work", name), a)
        res["seconds"] = time.perf_counter() - t0
        results["models"][name] = res
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(json_safe(results), f, indent=1)
        with open(os.path.join(a.out, "results.md"), "w") as f:
            f.write(markdown(results))
        print(table(name, res) + "\n", flush=True)
    print(f"wrote {os.path.join(a.out, 'results.md')} and results.json")


if __name__ == "__main__":
    main()
