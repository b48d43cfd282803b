#!/usr/bin/env python3
"""Writes docs/CONFORMANCE.md from the results of run_onnx_node_tests.py.

Usage (scripts/onnx-conformance calls it; it can be rerun on an existing results file):

    python3 scripts/conformance_report.py --results target/conformance/results.tsv \
        --data-root target/conformance/data --nnc target/release/nnc \
        --archive ../shared/conformance/onnx_backend_data_onnx1.17.0_node.tar.gz \
        --allow-list ../shared/conformance/allowlist_nnapi_ops_basic_dtypes.txt \
        --output docs/CONFORMANCE.md

The runner keeps only the last line of a failing command's output. For every test whose
status is `unsupported` or `error` this script runs nnc once more on the test's first data
set to record the first line of its stderr (and, when that line is only the generic
"cannot compile" header, the most specific line under it). Needs python3 with onnx.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import glob
import os
import re
import subprocess
import tempfile

import onnx

STATUSES = ("pass", "fail", "error", "timeout", "unsupported", "missing")
# What nnc prints when `nnc run` binds graph inputs of a source model at compile time,
# and the hint of its unsupported-operation message.
BOUND_NOTE = "at compile time; bound"
BIND_HINT = "needed at compile time; bind"
# The tolerance the runner applies; scripts/onnx-conformance passes no --rtol/--atol.
RTOL, ATOL = 1e-3, 1e-5


def read_results(path: str):
    rows = []
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            parts = line.rstrip("\n").split("\t")
            parts += [""] * (len(header) - len(parts))
            rows.append(dict(zip(header, parts)))
    return rows


def ops_of(data_root: str, suite: str, test: str) -> str:
    """The op a test exercises: its graph's op types, Constant/Identity aside."""
    path = os.path.join(data_root, suite, test, "model.onnx")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # noqa: BLE001
        return "?"
    ops = []
    for node in model.graph.node:
        if node.op_type not in ops:
            ops.append(node.op_type)
    core = [o for o in ops if o not in ("Constant", "Identity")] or ops
    return "+".join(core) if core else "?"


def nnc_reason(nnc: str, data_root: str, suite: str, test: str) -> str:
    """First line of nnc's stderr on the test's first data set."""
    tdir = os.path.join(data_root, suite, test)
    sets = sorted(glob.glob(os.path.join(tdir, "test_data_set_*")))
    if not sets:
        return "no data set"
    with tempfile.TemporaryDirectory(prefix="nnc_conf_") as tmp:
        # The data set directory also holds the expected outputs, which nnc never reads:
        # it reads input_0.pb .. input_{k-1}.pb only.
        try:
            cp = subprocess.run(
                [nnc, "run", os.path.join(tdir, "model.onnx"), "--input-dir", sets[0],
                 "--output-dir", tmp, "--output-format", "pb"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
                stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "timeout while collecting the reason"
    text = cp.stderr.decode("utf-8", "replace")
    # Machine-independent: the model path as the test's own.
    text = text.replace(os.path.join(tdir, "model.onnx"), f"{test}/model.onnx")
    # Notes (inputs bound at compile time) and the --bind-input hint are not reasons.
    lines = [l.strip() for l in text.splitlines()
             if l.strip() and not l.startswith("note: ") and BIND_HINT not in l]
    if not lines:
        return f"exit {cp.returncode}, no message"
    first = lines[0]
    if first.startswith("error: ") and len(lines) > 1:
        # The first line is the generic header ("cannot compile ...", "execution
        # failed"); the last one names the operator and the reason.
        detail = lines[-1]
        for prefix in ("- ", "caused by: "):
            if detail.startswith(prefix):
                detail = detail[len(prefix):]
        return f"{first} — {detail}"
    return first


def bound_inputs(nnc: str, data_root: str, suite: str, test: str) -> str | None:
    """The note nnc prints when it bound inputs of the test's model at compile time, or
    None (the test passed without binding)."""
    tdir = os.path.join(data_root, suite, test)
    sets = sorted(glob.glob(os.path.join(tdir, "test_data_set_*")))
    if not sets:
        return None
    with tempfile.TemporaryDirectory(prefix="nnc_conf_") as tmp:
        try:
            cp = subprocess.run(
                [nnc, "run", os.path.join(tdir, "model.onnx"), "--input-dir", sets[0],
                 "--output-dir", tmp, "--output-format", "pb"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
                stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None
    for line in cp.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("note: ") and BOUND_NOTE in line:
            m = re.search(r"needs inputs? (.*) at compile time", line)
            return m.group(1) if m else "?"
    return None


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--nnc", required=True)
    ap.add_argument("--archive", required=True)
    ap.add_argument("--allow-list", required=True)
    ap.add_argument("--output", required=True)
    a = ap.parse_args()

    rows = read_results(a.results)
    counts = collections.Counter(r["status"] for r in rows)
    present = [r for r in rows if r["status"] != "missing"]
    n_present = len(present)
    n_pass = counts.get("pass", 0)
    n_unsupported = counts.get("unsupported", 0)
    attempted = n_present - n_unsupported
    rate = (100.0 * n_pass / attempted) if attempted else 0.0

    try:
        version = subprocess.run([a.nnc, "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=30).stdout.decode().strip()
    except Exception:  # noqa: BLE001
        version = "unknown"

    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    op_of = {}
    for r in present:
        op = ops_of(a.data_root, r["suite"], r["test"])
        op_of[r["test"]] = op
        per_op[op][r["status"]] += 1

    # Passes that needed inputs bound at compile time, counted apart.
    bound = {}
    for r in present:
        if r["status"] == "pass":
            note = bound_inputs(a.nnc, a.data_root, r["suite"], r["test"])
            if note is not None:
                bound[r["test"]] = note

    reasons = {}
    for r in present:
        if r["status"] in ("unsupported", "error"):
            reasons[r["test"]] = nnc_reason(a.nnc, a.data_root, r["suite"], r["test"])
        elif r["status"] != "pass":
            reasons[r["test"]] = r.get("detail", "")

    out = []
    w = out.append
    w("# ONNX backend conformance")
    w("")
    w("Generated by `scripts/onnx-conformance` (do not edit by hand; rerun the script).")
    w("")
    w(f"- Date: {datetime.date.today().isoformat()}")
    w(f"- nnc: `{version}` (`nnc run MODEL --input-dir DIR --output-dir OUT --output-format pb`:"
      " the ONNX model is compiled in memory and executed on the CPU kernels)")
    w(f"- Archive: `{os.path.basename(a.archive)}` (suite `node`)")
    w(f"- Allow-list: `{os.path.basename(a.allow_list)}` ({len(rows)} entries, "
      f"{n_present} of them in the archive)")
    w(f"- Tolerance: the runner's default, `numpy.allclose` with rtol {RTOL:g} and atol {ATOL:g}"
      " for float outputs; integer and bool outputs must match exactly; shapes and dtypes"
      " must match exactly. This is the tolerance other engines are measured with through"
      " the same runner (ONNX Runtime's figures in ../shared/conformance/README.md), so"
      " the numbers compare directly. The kernels themselves are tested against float64"
      " references to the stricter NNAPI float32 tolerance (atol 1e-5, rtol 5 * 2^-23)"
      " in runtime/tests.")
    w("- Compile-time inputs: where the NN set needs a value at compile time that the test"
      " model declares as a graph input (Resize's scales or sizes, TopK's k, Pad's pads,"
      " Dropout's training_mode, QLinear* scales and zero points), `nnc run` compiles the"
      " source model with exactly those inputs bound to the supplied input files, as"
      " `nnc compile --bind-input NAME=FILE` would, and prints a note on stderr naming"
      " them. Such passes are counted below and listed at the end.")
    w("")
    w("## Totals")
    w("")
    w("| status | tests |")
    w("|---|---|")
    for s in STATUSES:
        w(f"| {s} | {counts.get(s, 0)} |")
    w("")
    w("`missing` entries name tests that the 1.17.0 archive does not contain (the allow-list"
      " also covers newer archives); they are not counted below.")
    w("")
    w("## Acceptance")
    w("")
    w(f"- Passing allow-listed tests: **{n_pass} of {n_present}**.")
    w(f"- Passing among the tests nnc does not reject as unsupported (exit 69): "
      f"**{n_pass} of {attempted} = {rate:.1f}%**.")
    w(f"- Of the passing tests, **{len(bound)}** pass only with graph inputs bound at"
      f" compile time ({n_pass - len(bound)} without).")
    w("")
    w("## Per operator")
    w("")
    w("| op | tests | pass | fail | error | timeout | unsupported |")
    w("|---|---|---|---|---|---|---|")
    for op in sorted(per_op):
        c = per_op[op]
        total = sum(c.values())
        w(f"| {md_escape(op)} | {total} | {c.get('pass', 0)} | {c.get('fail', 0)} | "
          f"{c.get('error', 0)} | {c.get('timeout', 0)} | {c.get('unsupported', 0)} |")
    w("")
    w("## Non-passing tests by reason")
    w("")
    w("| tests | status | reason |")
    w("|---|---|---|")
    groups: collections.Counter = collections.Counter()
    for r in present:
        if r["status"] == "pass":
            continue
        reason = reasons.get(r["test"], "")
        key = reason.split(" — ", 1)[-1]
        key = re.sub(r": '[^']*'$", "", key)
        key = re.sub(r"test_data_set_\d+: ", "", key)
        groups[(r["status"], key)] += 1
    for (status, key), count in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        w(f"| {count} | {status} | {md_escape(key)} |")
    w("")
    w("## Every test that does not pass")
    w("")
    w("Reason: for `fail`, the mismatch the runner reports; for `unsupported` and `error`,"
      " the first line of nnc's stderr, followed after a dash by its last line (the operator"
      " and the specific reason) when the first line is only the generic header.")
    w("")
    w("| test | op | status | reason |")
    w("|---|---|---|---|")
    for r in present:
        if r["status"] == "pass":
            continue
        w(f"| {r['test']} | {md_escape(op_of.get(r['test'], '?'))} | {r['status']} | "
          f"{md_escape(reasons.get(r['test'], ''))} |")
    if bound:
        w("")
        w("## Tests passing with inputs bound at compile time")
        w("")
        w("| test | op | bound inputs |")
        w("|---|---|---|")
        for test in sorted(bound):
            w(f"| {test} | {md_escape(op_of.get(test, '?'))} | {md_escape(bound[test])} |")
    missing = [r["test"] for r in rows if r["status"] == "missing"]
    if missing:
        w("")
        w("## Allow-list entries absent from the archive")
        w("")
        w(", ".join(f"`{m}`" for m in missing))
    w("")
    with open(a.output, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    print(f"{a.output}: {n_pass} of {n_present} pass; {n_pass} of {attempted} attempted "
          f"= {rate:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
