#!/usr/bin/env python3
"""Time nnc against ONNX Runtime on the models scripts/zoo_export.py wrote (for scripts/bench-zoo).

Usage: zoo_bench.py --zoo DIR --nnc NNC --work DIR [--threads T] [--runs N] [--rounds R]
                    [--only REGEX] [--json FILE] [--dynamic]

For each exported model: compile it with nnc (AES-128-CTR weights, a fresh key), run it
once with `nnc run` and compare with ONNX Runtime's output on the same input (largest
absolute difference over all outputs, divided by the largest magnitude of ONNX Runtime's
outputs), then R rounds of: `nnc bench --runs N --json` (its median), then N runs of an
ONNX Runtime session (CPU provider, default graph optimizations, intra-op threads T; one
untimed warm-up per round, as nnc bench does), held for all rounds by a worker process
that idles while nnc runs. Each engine's figure is the median over the rounds of each
round's median, so a slow minute on a shared machine slows both. Ratios are nnc / ONNX
Runtime: below 1 means nnc is faster. A model on which ONNX Runtime crashes with its
default optimizations is timed with its basic ones, marked '*' and left out of the means.

With --dynamic both engines run dynamically quantized models: nnc compiles with
`--quantize dynamic`, ONNX Runtime runs its own `quantize_dynamic` of the model (QInt8
weights, per channel), and each is compared with ONNX Runtime's *float* output by SQNR
(dB over all outputs; higher is closer) instead of the largest difference.
"""

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_export import MODELS  # the model list (importing it does not import torch)

TIMEOUT = 900  # seconds for one nnc command: a hang is reported, not waited on forever


def one_line(text, limit=300):
    return re.sub(r"\s+", " ", text).strip()[:limit]


def nnc_error(proc):
    """nnc's error as one line, from its --json error object or its stderr."""
    try:
        e = json.loads(proc.stdout)
        if e.get("ok") is False:
            causes = "; ".join(e.get("causes") or [])
            return one_line(
                f"exit {e.get('exit_code')} {e.get('kind')}: {e.get('message')}"
                + (f": {causes}" if causes else "")
            )
    except (ValueError, AttributeError):
        pass
    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith(("error", "caused by"))] or lines[-2:]
    return one_line(f"exit {proc.returncode}: " + " ".join(errs))


def nnc(args):
    try:
        return subprocess.run(
            args, check=False, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            args, -1, "", f"error: timed out after {TIMEOUT} s"
        )


# The ONNX Runtime workers' environment: with --peer-max-isa, scripts/peer-cap's library
# preloaded so that ONNX Runtime sees a processor without the instruction sets above it.
PEER_ENV = None


def ort_worker(model, in_dir, ref_dir, threads, level):
    """Child process: one ONNX Runtime session, serving timing requests on stdin.

    A separate process because ONNX Runtime itself can crash on a model (it segfaults
    creating a session for caformer_s18): that is then one model's failure, not the run's.
    """
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if level == "basic":
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feed = {k: np.load(os.path.join(in_dir, f"{k}.npy")) for k in names}
    os.makedirs(ref_dir, exist_ok=True)
    for k, y in enumerate(sess.run(None, feed)):
        np.save(os.path.join(ref_dir, f"output_{k}.npy"), y)
    print(json.dumps({"inputs": names}), flush=True)
    for line in sys.stdin:
        runs = int(line)
        sess.run(None, feed)  # one untimed warm-up per round, as nnc bench does
        t = []
        for _ in range(runs):
            a = time.perf_counter()
            sess.run(None, feed)
            t.append(time.perf_counter() - a)
        print(f"{statistics.median(t) * 1e3:.6f}", flush=True)


class Ort:
    def __init__(self, model, in_dir, ref_dir, threads, level="default"):
        # stderr to a file: a pipe nobody reads could fill and block the worker.
        self.log = ref_dir + ".log"
        with open(self.log, "w") as err:
            self.p = subprocess.Popen(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--ort-worker",
                    model,
                    in_dir,
                    ref_dir,
                    str(threads),
                    level,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=PEER_ENV,
            )
        self.inputs = json.loads(self.line())["inputs"]

    def line(self):
        ln = self.p.stdout.readline()
        if not ln:
            self.p.wait()
            with open(self.log) as f:
                err = [x for x in f.read().splitlines() if x.strip()]
            code = self.p.returncode
            why = (
                f"ONNX Runtime crashed ({signal.Signals(-code).name})"
                if code < 0
                else f"exit {code}"
            )
            raise RuntimeError(one_line(f"{why}: {err[-1]}" if err else why))
        return ln

    def time(self, runs):
        self.p.stdin.write(f"{runs}\n")
        self.p.stdin.flush()
        return float(self.line())

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait()


def sqnr_db(refs, out_dir):
    """SQNR in dB of the outputs in out_dir (output_K.npy) against refs, over all of them."""
    signal_, noise = 0.0, 0.0
    for k, y in enumerate(refs):
        z = np.load(os.path.join(out_dir, f"output_{k}.npy")).astype(np.float64)
        y = y.astype(np.float64)
        if z.shape != y.shape:
            return float("nan")
        signal_ += float((y * y).sum())
        noise += float(((z - y) ** 2).sum())
    return 10 * math.log10(signal_ / noise) if noise > 0 else float("inf")


def ort_dynamic(onnx_path, in_dir, ref_dir, work, name, threads):
    """ONNX Runtime on its quantize_dynamic of the model (float references written to
    ref_dir first); returns the timing worker and the dynamic model's SQNR."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    Ort(onnx_path, in_dir, ref_dir, threads).close()
    dq = os.path.join(work, f"{name}.ort-dynamic.onnx")
    quantize_dynamic(onnx_path, dq, weight_type=QuantType.QInt8, per_channel=True)
    dq_dir = ref_dir + ".dynamic"
    peer = Ort(dq, in_dir, dq_dir, threads)
    refs = [np.load(os.path.join(ref_dir, f"output_{k}.npy")) for k in range(len(os.listdir(ref_dir)))]
    return peer, sqnr_db(refs, dq_dir)


def bench_model(name, source, a, key, kernels):
    zoo, work = a.zoo, a.work
    meta_path = os.path.join(zoo, f"{name}.meta.json")
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
    r = {
        "model": name,
        "source": source,
        "note": meta.get("note", ""),
        "status": "ok",
        "nnc_ms": None,
        "ort_ms": None,
        "ratio": None,
        "max_diff": None,
        "error": None,
    }
    onnx_path = os.path.join(zoo, f"{name}.onnx")
    ref_dir = os.path.join(work, f"{name}.ref")
    in_dir = os.path.join(zoo, f"{name}.in")
    if os.path.isdir(ref_dir):
        for f in os.listdir(ref_dir):
            os.remove(os.path.join(ref_dir, f))
    if a.dynamic:
        try:
            peer, r["ort_sqnr_db"] = ort_dynamic(onnx_path, in_dir, ref_dir, work, name, a.threads)
        except Exception as e:  # noqa: BLE001 - reported per model
            r.update(status="ort-failed", error=one_line(str(e)))
            return r
    else:
        try:
            peer = Ort(onnx_path, in_dir, ref_dir, a.threads)
        except Exception as e:  # noqa: BLE001 - reported per model
            # ONNX Runtime 1.32 segfaults in an extended-level fusion on some models
            # (caformer_s18): time it with its basic optimizations, flagged and kept out
            # of the means.
            try:
                peer = Ort(onnx_path, in_dir, ref_dir, a.threads, "basic")
                r["ort_note"] = (
                    f"{one_line(str(e), 80)} with default optimizations; timed with ORT_ENABLE_BASIC"
                )
            except Exception:  # noqa: BLE001
                r.update(status="ort-failed", error=one_line(str(e)))
                return r
    try:
        return bench_nnc(r, name, a, key, kernels, peer, onnx_path, in_dir, ref_dir)
    except RuntimeError as e:
        r.update(status="ort-failed", error=one_line(str(e)))
        return r
    finally:
        peer.close()


def bench_nnc(r, name, a, key, kernels, peer, onnx_path, in_dir, ref_dir):
    work = a.work
    names = peer.inputs
    files = {k: os.path.join(in_dir, f"{k}.npy") for k in names}
    ref = [
        np.load(os.path.join(ref_dir, f"output_{k}.npy"))
        for k in range(len(os.listdir(ref_dir)))
    ]
    inputs = [x for k in names for x in ("--input", f"{k}={files[k]}")]
    compiled = os.path.join(work, f"{name}.nnc")
    quantize = ["--quantize", "dynamic"] if a.dynamic else []
    p = nnc([a.nnc, "compile", onnx_path, "-o", compiled, "--key-file", key, "--json", *quantize])
    if p.returncode != 0:
        r.update(status="nnc-compile-failed", error=nnc_error(p))
        return r
    out_dir = os.path.join(work, f"{name}.out")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    p = nnc(
        [
            a.nnc,
            "run",
            compiled,
            "--key-file",
            key,
            *inputs,
            "--threads",
            str(a.threads),
            "--output-dir",
            out_dir,
            "--json",
        ]
    )
    if p.returncode != 0:
        r.update(status="nnc-run-failed", error=nnc_error(p))
        return r
    scale, diff = 0.0, 0.0
    for k, y in enumerate(ref):
        f = os.path.join(out_dir, f"output_{k}.npy")
        if not os.path.exists(f):
            r.update(status="wrong-output", error=f"nnc wrote no output_{k}.npy")
            return r
        z = np.load(f)
        if z.shape != y.shape:
            r.update(
                status="wrong-output",
                error=f"output {k}: shape {list(z.shape)}, ONNX Runtime {list(y.shape)}",
            )
            return r
        y64, z64 = y.astype(np.float64), z.astype(np.float64)
        if y.size:
            scale = max(scale, float(np.abs(y64).max()))
            diff = max(diff, float(np.abs(z64 - y64).max()))
    r["max_diff"] = diff / scale if scale > 0 else diff
    r["max_abs_diff"] = diff
    if a.dynamic:
        r["nnc_sqnr_db"] = sqnr_db(ref, out_dir)
    nnc_t, ort_t = [], []
    for _ in range(a.rounds):
        p = nnc(
            [
                a.nnc,
                "bench",
                compiled,
                "--key-file",
                key,
                *inputs,
                "--threads",
                str(a.threads),
                "--runs",
                str(a.runs),
                "--json",
            ]
        )
        if p.returncode != 0:
            r.update(status="nnc-bench-failed", error=nnc_error(p))
            return r
        b = json.loads(p.stdout)
        nnc_t.append(b["median_ms"])
        kernels.setdefault("kernels", b.get("kernels"))
        ort_t.append(peer.time(a.runs))
    r["nnc_ms"], r["ort_ms"] = statistics.median(nnc_t), statistics.median(ort_t)
    r["nnc_rounds_ms"], r["ort_rounds_ms"] = nnc_t, ort_t
    r["ratio"] = r["nnc_ms"] / r["ort_ms"]
    return r


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "--ort-worker":
        ort_worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
        return
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("--zoo", required=True)
    p.add_argument("--nnc", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", default="")
    p.add_argument("--json")
    p.add_argument("--dynamic", action="store_true")
    p.add_argument("--peer-max-isa", default="none")
    p.add_argument("--peer-preload")
    a = p.parse_args()
    if a.peer_max_isa != "none":
        global PEER_ENV
        PEER_ENV = dict(os.environ, LD_PRELOAD=a.peer_preload, PEER_MAX_ISA=a.peer_max_isa)
    os.makedirs(a.work, exist_ok=True)
    key = os.path.join(a.work, "key")
    subprocess.run(
        [a.nnc, "keygen", "--algorithm", "aes128", "-o", key, "--force"],
        check=True,
        capture_output=True,
    )
    only = re.compile(a.only)
    results, kernels = [], {}
    for name, source, _ in MODELS:
        if not only.search(name):
            continue
        base = os.path.join(a.zoo, name)
        if not os.path.exists(base + ".onnx"):
            why = "not exported"
            if os.path.exists(base + ".failed"):
                with open(base + ".failed") as f:
                    why = f.read().strip()
            results.append(
                {
                    "model": name,
                    "source": source,
                    "status": "export-failed",
                    "error": why,
                    "nnc_ms": None,
                    "ort_ms": None,
                    "ratio": None,
                    "max_diff": None,
                }
            )
            continue
        t0 = time.perf_counter()
        r = bench_model(name, source, a, key, kernels)
        results.append(r)
        shown = (
            f"ratio {r['ratio']:.2f}" if r["ratio"] else f"{r['status']}: {r['error']}"
        )
        print(
            f"  {name}: {shown} ({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    timed = sorted((r for r in results if r["ratio"]), key=lambda r: r["ratio"])
    counted = [r for r in timed if not r.get("ort_note")]
    k = kernels.get("kernels") or {}
    print(f"\nkernels nnc bench reported: float {k.get('float')}, int8 {k.get('int8')}")
    if a.dynamic:
        accuracy = "nnc dB / ort dB = SQNR of each dynamically quantized model against ONNX Runtime's float output"
        head = f"{'nnc dB':>7} | {'ort dB':>7}"
    else:
        accuracy = "max diff = max|nnc - ort| / max|ort|"
        head = f"{'max diff':>8}"
    print(
        f"{a.threads} thread(s); median of {a.rounds} rounds of {a.runs} runs; ratio = nnc / onnxruntime "
        f"(below 1: nnc faster); {accuracy}\n"
    )
    print(f"{'model':26} | {'source':12} | {'nnc ms':>9} | {'ort ms':>9} | {'ratio':>6} | {head}")
    print("-" * 95)
    for r in timed:
        if a.dynamic:
            tail = f"{r['nnc_sqnr_db']:7.1f} | {r['ort_sqnr_db']:7.1f}"
        else:
            tail = f"{r['max_diff']:8.1e}"
        print(
            f"{r['model']:26} | {r['source']:12} | {r['nnc_ms']:9.3f} | {r['ort_ms']:9.3f} | "
            f"{r['ratio']:6.2f} | {tail}{' *' if r.get('ort_note') else ''}"
        )
    for r in timed:
        if r.get("ort_note"):
            print(f"* {r['model']}: {r['ort_note']} (not in the means)")
    ratios = [r["ratio"] for r in counted]
    summary = {
        "timed": len(timed),
        "counted": len(ratios),
        "threads": a.threads,
        "runs": a.runs,
        "rounds": a.rounds,
        "kernels": kernels.get("kernels"),
        "nnc_max_isa": os.environ.get("NNC_MAX_ISA"),
        "dynamic": a.dynamic,
    }
    if ratios:
        summary["geomean_ratio"] = math.exp(
            sum(math.log(x) for x in ratios) / len(ratios)
        )
        summary["median_ratio"] = statistics.median(ratios)
        slow = [r["model"] for r in counted if r["ratio"] > 1.5]
        summary["above_1_5"] = slow
        print(
            f"\ngeometric mean ratio {summary['geomean_ratio']:.3f}, median {summary['median_ratio']:.3f}, "
            f"{len(slow)} of {len(ratios)} above 1.5x{': ' + ', '.join(slow) if slow else ''}"
        )
    for status, title in (
        ("nnc-compile-failed", "nnc cannot compile"),
        ("nnc-run-failed", "nnc cannot run"),
        ("nnc-bench-failed", "nnc bench failed"),
        ("wrong-output", "nnc output unusable"),
        ("ort-failed", "ONNX Runtime cannot run"),
        ("export-failed", "not exported"),
    ):
        bad = [r for r in results if r["status"] == status]
        summary[status] = [r["model"] for r in bad]
        if bad:
            print(f"\n{title} ({len(bad)}): {', '.join(r['model'] for r in bad)}")
            for r in bad:
                print(f"  {r['model']}: {r['error']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {"schema": "nnc.bench-zoo/1", "models": results, "summary": summary},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
