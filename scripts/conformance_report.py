#!/usr/bin/env python3
"""Writes docs/CONFORMANCE.md from the results of run_onnx_node_tests.py.

Usage (scripts/onnx-conformance calls it; it can be rerun on existing results):

    python3 scripts/conformance_report.py \
        --run 1.17.0=target/conformance/1.17.0 --run 1.23.2=target/conformance/1.23.2 \
        --nnc target/conformance/nnc --shared ../shared/conformance \
        --output docs/CONFORMANCE.md

Each --run names an ONNX version and the directory scripts/onnx-conformance made for its
archive: the unpacked suites (<dir>/node, <dir>/simple, ...), the runner's results
(<dir>/results.tsv), nnc's stderr of every invocation (<dir>/stderr/<suite>/<test>.<data
set>) and the run's settings (<dir>/run.info). The report never runs nnc again: the
reason a test does not pass is read from the stderr that nnc printed during the run.
Needs python3 with onnx.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import os
import re
import subprocess

import onnx

STATUSES = ("pass", "fail", "error", "timeout", "unsupported")
# What nnc prints when `nnc run` binds graph inputs of a source model at compile time.
BOUND_NOTE = "at compile time; bound"
# The tolerance the runner applies; scripts/onnx-conformance passes no --rtol/--atol.
RTOL, ATOL = 1e-3, 1e-5
# ONNX Runtime 1.31.1 through the same runner (../shared/conformance/README.md); read from
# the README when it states them, these otherwise.
ORT_DEFAULT = {"1.17.0": (1159, 1288), "1.23.2": (1507, 2036)}
ARCHIVE_TEXT = {
    "1.17.0": "the `node/` tests as the onnx 1.17.0 package ships them (opsets up to 22)",
    "1.23.2": "`node/` regenerated with the onnx 1.23.2 generators (each op stamped with"
              " its newest opset, up to 28), plus `simple/`, `pytorch-converted/`,"
              " `pytorch-operator/` and `light/` (whole small networks)",
}
# Ops that only carry a value: a test whose graph holds one other op exercises that op.
TRIVIAL_OPS = ("Constant", "Identity")
# Test-name spellings that are not the op's name in snake case.
NAME_ALIASES = {
    "lessequal": "LessOrEqual",
    "greaterequal": "GreaterOrEqual",
    "mvn": "MeanVarianceNormalization",
    "sce": "SoftmaxCrossEntropyLoss",
    "nllloss": "NegativeLogLikelihoodLoss",
    "qlinearconv": "QLinearConv",
    "qlinearmatmul": "QLinearMatMul",
}
# nnc's exit codes (docs/CLI.md).
EXIT_NAMES = {1: "failure", 4: "resource limit", 65: "malformed input", 66: "missing input",
              69: "unsupported", 70: "internal error", 73: "cannot write the output",
              101: "panic", 124: "timeout", 134: "abort"}


# ----------------------------------------------------------------------------- inputs
def read_results(path: str):
    rows = []
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            parts = line.rstrip("\n").split("\t")
            parts += [""] * (len(header) - len(parts))
            rows.append(dict(zip(header, parts)))
    return rows


def read_info(path: str) -> dict:
    info = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    info[k] = v
    except OSError:
        pass
    return info


def ort_figures(shared: str) -> dict:
    figs = dict(ORT_DEFAULT)
    try:
        text = open(os.path.join(shared, "README.md"), encoding="utf-8").read()
    except OSError:
        return figs
    text = re.sub(r"\s+", " ", text)
    m = re.search(r"passes ([\d,]+) of the ([\d,]+) tests in the 1\.23\.2 archive", text)
    if m:
        figs["1.23.2"] = (int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")))
    m = re.search(r"([\d,]+) of the ([\d,]+) in the 1\.17\.0 archive", text)
    if m:
        figs["1.17.0"] = (int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")))
    return figs


def count_tests(data_root: str, suites) -> int:
    n = 0
    for s in suites:
        d = os.path.join(data_root, s)
        if os.path.isdir(d):
            n += sum(1 for t in os.listdir(d) if os.path.isfile(os.path.join(d, t, "model.onnx")))
    return n


def stderr_of(run_dir: str, suite: str, test: str, last: bool) -> str | None:
    """nnc's stderr of the test's first data set, or of the last one run (the one that
    decided a non-passing status: the runner stops at the first data set that does not
    pass)."""
    d = os.path.join(run_dir, "stderr", suite)
    prefix = f"{test}.test_data_set_"
    try:
        names = [n for n in os.listdir(d) if n.startswith(prefix) and n[len(prefix):].isdigit()]
    except OSError:
        return None
    if not names:
        return None
    names.sort(key=lambda n: int(n[len(prefix):]))
    with open(os.path.join(d, names[-1] if last else names[0]), encoding="utf-8",
              errors="replace") as f:
        text = f.read()
    # Machine-independent: the runner's private copy of the model is "model.onnx".
    return re.sub(r"/\S*/onnxconf_[^/\s]*/model/model\.onnx", "model.onnx", text)


# ----------------------------------------------------------------------------- ops
class OpNamer:
    """The operator a test exercises.

    1. The graph's distinct top-level op types, Constant and Identity aside: when that is
       one op, the test exercises it, unless the test is a function-expanded
       `*_expanded` one (its graph is the function body of the op the test names).
    2. Otherwise (`*_expanded` tests, tests built of several nodes) the op the test name
       starts with: the longest ONNX operator name that, lower-cased and
       without underscores, is a prefix of the test name after `test_` (lower-cased,
       underscores removed), with a few spellings (NAME_ALIASES) added.
    3. Otherwise the graph's op types joined with `+`.
    """

    def __init__(self):
        names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
        self.keys = {n.lower(): n for n in names}
        self.keys.update(NAME_ALIASES)
        self.rule = collections.Counter()

    def graph_ops(self, data_root: str, suite: str, test: str) -> list[str] | None:
        path = os.path.join(data_root, suite, test, "model.onnx")
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception:  # noqa: BLE001
            return None
        ops = []
        for node in model.graph.node:
            name = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            if name not in ops:
                ops.append(name)
        return ops

    def by_name(self, test: str) -> str | None:
        body = test[len("test_"):] if test.startswith("test_") else test
        body = body.lower().replace("_", "")
        best = None
        for key, op in self.keys.items():
            if body.startswith(key) and (best is None or len(key) > len(best[0])):
                best = (key, op)
        return best[1] if best else None

    def op_of(self, ops: list[str] | None, test: str) -> str:
        if ops is None:
            return "?"
        core = [o for o in ops if o not in TRIVIAL_OPS] or ops
        expanded = "_expanded" in test
        if len(core) == 1 and not expanded:
            self.rule["graph"] += 1
            return core[0].split("::")[-1]
        named = self.by_name(test)
        if named:
            self.rule["name"] += 1
            return named
        self.rule["joined"] += 1
        return "+".join(core) if core else "?"


# ----------------------------------------------------------------------------- reasons
def type_name(t: str) -> str:
    """One spelling for element types: nnc's (float64) and ONNX's (DOUBLE) alike."""
    t = t.strip().strip("'")
    if t.isdigit():
        try:
            t = onnx.TensorProto.DataType.Name(int(t))
        except ValueError:
            return f"type code {t}"
    u = t.upper()
    return {"FLOAT": "float32", "DOUBLE": "float64"}.get(u, t.lower())


def classify_item(head: str, reason: str) -> tuple[str, str]:
    """(kind, blocker) for one `- HEAD xN:` item of nnc's unsupported-operation list."""
    reason = re.sub(r": '.*$", "", reason.strip())  # the nodes and values it names
    m = re.match(r"default-domain opset (\d+) is outside the supported range (\S+)", reason)
    if m:
        return "opset", f"default-domain opset {m.group(1)} (supported: {m.group(2)})"
    if head == "input":
        m = re.match(r"(\w+) inputs are not supported", reason)
        if m:
            return "element type", f"graph input of element type {type_name(m.group(1))}"
        if reason.startswith("only tensor-typed inputs"):
            return "input", "sequence, optional or map graph input (only tensors are supported)"
        if "empty tensors are not supported" in reason or "zero-sized" in reason:
            return "input", "empty (zero-sized) graph input"
        return "input", f"graph input: {reason}"
    if head == "output":
        if "empty" in reason or "zero-sized" in reason:
            return "output", "empty (zero-sized) graph output"
        return "output", f"graph output: {reason}"
    m = re.match(r"operator domain '([^']*)' is not supported", reason)
    if m:
        return "domain", f"operator domain {m.group(1)}"
    if reason.startswith("no lowering to the NN operation set"):
        return "operator", f"{head}: no lowering"
    m = re.match(r"Cast to type code (\d+) is not supported", reason)
    if m:
        return "element type", f"Cast to {type_name(m.group(1))}"
    m = re.match(r"Cast to (\w+) is not supported", reason)
    if m:
        return "element type", f"Cast to {type_name(m.group(1))}"
    # Geometry of one test ("for [2, 4] -> [1, 3]") and attribute values stay; shapes go.
    reason = re.sub(r" for \[[^\]]*\] -> \[[^\]]*\]$", "", reason)
    reason = re.sub(r"dimension \d+ has size 0", "a dimension has size 0", reason)
    return "operator", f"{head}: {reason}"


def blockers_of(text: str | None, status: str, detail: str) -> tuple[list[tuple[str, str]], str]:
    """The blockers nnc's stderr names, as (kind, blocker) pairs, and a one-line reason."""
    if status == "timeout":
        return [("timeout", "timeout")], detail
    code = exit_code(status, detail)
    if text is None:
        return [("other", f"exit {code}, no stderr kept")], f"exit {code}"
    lines = [l.rstrip() for l in text.splitlines()
             if l.strip() and not l.startswith("note: ")]
    if code is not None and (code < 0 or code in (70, 101, 134)):
        first = next((l for l in lines if "panicked" in l), lines[0] if lines else "")
        kind = f"signal {-code}" if code < 0 else f"exit {code} ({EXIT_NAMES.get(code, '?')})"
        return [("crash", f"crash: {kind}")], f"{kind}: {first.strip()}"
    if not lines:
        return [("other", f"exit {code}, no message")], f"exit {code}, no message"
    found: list[tuple[str, str]] = []
    head = None
    for l in lines:
        m = re.match(r"^  - (.+) x\d+:$", l)
        if m:
            head = m.group(1)
            head = re.sub(r"^opset \d+$", "opset", head)
            continue
        if head is not None and l.startswith("      "):
            found.append(classify_item(head, l))
            head = None
    if not found:
        cause = next((l.strip()[len("caused by: "):] for l in lines
                      if l.strip().startswith("caused by: ")), lines[-1].strip())
        found.append(classify_cause(cause))
    # One line: nnc's most specific lines, the generic header and item heads aside.
    detail_lines = [l.strip() for l in lines
                    if not l.startswith("error: ") and not re.match(r"^  - .+ x\d+:$", l)
                    and "that nnc cannot lower" not in l]
    reason = "; ".join(re.sub(r"^caused by: ", "", d) for d in detail_lines) or lines[0]
    seen, uniq = set(), []
    for b in found:
        if b not in seen:
            seen.add(b)
            uniq.append(b)
    return uniq, reason


def classify_cause(cause: str) -> tuple[str, str]:
    m = re.search(r"graph input '[^']*': element type (\w+) is not supported", cause)
    if m:
        return "element type", f"graph input of element type {type_name(m.group(1))}"
    if "imports no default-domain" in cause:
        return "opset", "no default-domain (ai.onnx) opset imported"
    m = re.search(r"operation \d+ \((\w+) from node '[^']*'\): operand type (\w+)", cause)
    if m:
        return "runtime", f"prepare: {m.group(1)} on {m.group(2)} has no kernel"
    m = re.search(r"operation \d+ \((\w+) from node '[^']*'\): (.*)$", cause)
    if m:
        what = re.sub(r"dimension \d+", "a dimension", m.group(2))
        return "runtime", f"execution: {m.group(1)}: {what}"
    m = re.search(r"\((\w+)\): evaluating a constant .* beyond the folded limit of ([\d.]+ \w+)",
                  cause)
    if m:
        return "limit", f"{m.group(1)}: constant folded at compile time beyond the" \
                        f" `folded` limit ({m.group(2)})"
    cause = re.sub(r"'[^']*'", "'…'", cause)
    cause = re.sub(r"\b\d+(\.\d+)?\b", "N", cause)
    return "other", cause


def exit_code(status: str, detail: str) -> int | None:
    if status == "unsupported":
        return 69
    m = re.match(r"exit (-?\d+)", detail)
    return int(m.group(1)) if m else None


def md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


def fmt_secs(s: str) -> str:
    try:
        n = int(s)
    except ValueError:
        return "?"
    return f"{n // 60} min {n % 60} s" if n >= 60 else f"{n} s"


# ----------------------------------------------------------------------------- report
class Run:
    def __init__(self, version: str, run_dir: str, namer: OpNamer):
        self.version = version
        self.dir = run_dir
        self.info = read_info(os.path.join(run_dir, "run.info"))
        self.rows = read_results(os.path.join(run_dir, "results.tsv"))
        self.suites = [s for s in self.info.get("suites", "node").split(",") if s]
        self.n_archive = count_tests(run_dir, self.suites)
        self.present = [r for r in self.rows if r["status"] != "missing"]
        self.missing = [r for r in self.rows if r["status"] == "missing"]
        self.counts = collections.Counter(r["status"] for r in self.present)
        self.ops, self.op, self.blockers, self.reason, self.bound, self.code = {}, {}, {}, {}, {}, {}
        for r in self.present:
            key = (r["suite"], r["test"])
            ops = namer.graph_ops(run_dir, r["suite"], r["test"])
            self.ops[key] = ops
            if r["suite"] == "node":
                self.op[key] = namer.op_of(ops, r["test"])
            else:
                core = [o for o in (ops or []) if o not in TRIVIAL_OPS] or (ops or ["?"])
                self.op[key] = "+".join(core)
            st = r["status"]
            if st == "pass":
                text = stderr_of(run_dir, r["suite"], r["test"], last=False) or ""
                for line in text.splitlines():
                    if line.startswith("note: ") and BOUND_NOTE in line:
                        m = re.search(r"needs inputs? (.*) at compile time", line)
                        self.bound[key] = m.group(1) if m else "?"
            elif st == "fail":
                self.reason[key] = r.get("detail", "")
            else:
                text = stderr_of(run_dir, r["suite"], r["test"], last=True)
                bl, self.reason[key] = blockers_of(text, st, r.get("detail", ""))
                # Name the domains of a model that imports none of the default one.
                domains = sorted({o.split("::")[0] for o in ops or [] if "::" in o})
                self.blockers[key] = [
                    (k, f"{b}: the model's ops are all {', '.join(domains)}")
                    if b.startswith("no default-domain") and domains else (k, b)
                    for k, b in bl]
                code = exit_code(st, r.get("detail", ""))
                if code is not None:
                    self.code[key] = code

    def title(self) -> str:
        return f"onnx {self.version}"


def blocker_table(runs: list[Run]):
    """(kind, blocker) -> per-run counts of tests stopped, tests it alone stops, exits,
    an example test."""
    table = {}
    for i, run in enumerate(runs):
        for key, bl in run.blockers.items():
            for b in bl:
                e = table.setdefault(b, {"n": [0] * len(runs), "only": [0] * len(runs),
                                         "codes": collections.Counter(), "example": None})
                e["n"][i] += 1
                if len(bl) == 1:
                    e["only"][i] += 1
                code = run.code.get(key)
                if code is not None:
                    e["codes"][code] += 1
                if e["example"] is None:
                    e["example"] = f"{key[0]}/{key[1]}" if key[0] != "node" else key[1]
    return sorted(table.items(), key=lambda kv: (-sum(kv[1]["n"]), kv[0]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, metavar="VERSION=DIR",
                    help="an ONNX version and its run directory (repeatable)")
    ap.add_argument("--nnc", required=True, help="the binary the runs used (for --version)")
    ap.add_argument("--shared", required=True, help="../shared/conformance (README figures)")
    ap.add_argument("--output", required=True)
    a = ap.parse_args()

    namer = OpNamer()
    runs = []
    for spec in a.run:
        version, _, d = spec.partition("=")
        runs.append(Run(version, d, namer))
    ort = ort_figures(a.shared)
    try:
        version = subprocess.run([a.nnc, "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=30).stdout.decode().strip()
    except Exception:  # noqa: BLE001
        version = "unknown"
    versions = {r.info.get("nnc") for r in runs if r.info.get("nnc")}
    if versions:
        version = ", ".join(sorted(versions))

    out = []
    w = out.append
    w("# ONNX backend conformance")
    w("")
    w("Generated by `scripts/onnx-conformance` (do not edit by hand; rerun the script, or"
      " `scripts/conformance_report.py` on the results of a run).")
    w("")
    dates = sorted({r.info.get("date", "") for r in runs} - {""})
    w(f"- Date: {', '.join(dates) or datetime.date.today().isoformat()}")
    w(f"- nnc: `{version}`. Each test runs `nnc run MODEL --input-dir DIR --output-dir OUT"
      " --output-format pb` once per data set: the ONNX model is compiled in memory and"
      " executed on the CPU kernels.")
    for r in runs:
        sel = r.info.get("allow_list")
        sel = f"the tests the allow-list `{sel}` selects" if sel else "every test"
        w(f"- {r.title()}: `{r.info.get('archive', '?')}`, {ARCHIVE_TEXT.get(r.version, '')};"
          f" {sel}; {r.info.get('jobs', '?')} jobs, a {r.info.get('timeout', '?')} s timeout"
          f" per `nnc run`; the run took {fmt_secs(r.info.get('seconds', ''))}.")
    w(f"- Tolerance: the runner's default, `numpy.allclose` with rtol {RTOL:g} and atol {ATOL:g}"
      " for float outputs; integer and bool outputs must match exactly; shapes and dtypes"
      " must match exactly. This is the tolerance other engines are measured with through"
      " the same runner (ONNX Runtime's figures in ../shared/conformance/README.md), so"
      " the numbers compare directly. The kernels themselves are tested against float64"
      " references to the stricter NNAPI float32 tolerance (atol 1e-5, rtol 5 * 2^-23)"
      " in runtime/tests.")
    w("- Compile-time inputs: where the NN set needs a value at compile time that the test"
      " model declares as a graph input (Resize's scales or sizes, TopK's k, Pad's pads,"
      " Dropout's training_mode, QLinear* scales and zero points, Range's bounds,"
      " ConstantOfShape's shape), `nnc run` compiles the source model with exactly those"
      " inputs bound to the supplied input files, as `nnc compile --bind-input NAME=FILE`"
      " would, and prints a note on stderr naming them. Such passes are counted below and"
      " listed at the end.")
    w("- Element types: float16 computes as float32 and is rounded at the model's outputs"
      " and at explicit casts; float64 computes as float32 (nnc prints a warning; a"
      " float64 input beyond float32's range is refused); int16, uint16, uint32 and uint64"
      " compute as int32, range-checked at the inputs and outputs (see ARCHITECTURE.md).")
    w("- Outcomes: `pass` (every data set matches), `fail` (nnc ran but an output differs),"
      " `unsupported` (nnc exits 69: it rejects the model as outside what it supports),"
      " `error` (any other non-zero exit or a signal), `timeout` (killed after the"
      " timeout).")
    w("")

    # ------------------------------------------------------------------ summary
    w("## Totals")
    w("")
    w("| archive | tests | pass | fail | error | timeout | unsupported | pass rate |"
      " pass among not unsupported | ONNX Runtime 1.31.1 pass |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        n = len(r.present)
        c = r.counts
        attempted = n - c.get("unsupported", 0)
        o = ort.get(r.version)
        o_txt = f"{o[0]:,} of {o[1]:,} ({pct(*o)})" if o else "-"
        w(f"| {r.title()} | {n:,} | **{c.get('pass', 0):,}** | {c.get('fail', 0)} |"
          f" {c.get('error', 0)} | {c.get('timeout', 0)} | {c.get('unsupported', 0):,} |"
          f" {pct(c.get('pass', 0), n)} | {c.get('pass', 0):,} of {attempted:,}"
          f" ({pct(c.get('pass', 0), attempted)}) | {o_txt} |")
    w("")
    for r in runs:
        n = len(r.present)
        n_pass = r.counts.get("pass", 0)
        extra = ""
        if r.n_archive != n:
            extra = (f" The run selected {n:,} of the archive's {r.n_archive:,} tests"
                     f" (allow-list entries matching no test of the archive: {len(r.missing)});"
                     " ONNX Runtime's figure is over the whole archive.")
        w(f"- {r.title()}: nnc passes **{n_pass:,} of {n:,}** tests; ONNX Runtime passes"
          f" {ort[r.version][0]:,} of {ort[r.version][1]:,} through the same runner and"
          f" tolerance. **{len(r.bound)}** of nnc's passes need graph inputs bound at"
          f" compile time ({n_pass - len(r.bound):,} without).{extra}"
          if r.version in ort else
          f"- {r.title()}: nnc passes **{n_pass:,} of {n:,}** tests.{extra}")
    w("")
    codes = collections.Counter()
    for r in runs:
        for key, code in r.code.items():
            codes[(r.version, code)] += 1
    if codes:
        w("Exit codes of the tests that stop with one (`unsupported` is exit 69):")
        w("")
        w("| archive | exit | meaning | tests |")
        w("|---|---|---|---|")
        for (v, code), n in sorted(codes.items(), key=lambda kv: (kv[0][0], -kv[1])):
            meaning = (f"signal {-code}" if code is not None and code < 0
                       else EXIT_NAMES.get(code, "?"))
            w(f"| onnx {v} | {code} | {meaning} | {n} |")
        w("")

    # ------------------------------------------------------------------ blockers
    w("## Blockers, ranked by the tests each stops")
    w("")
    w("Every test that is `unsupported`, `error` or `timeout` is attributed to what nnc's"
      " stderr names as the obstacle (the runner keeps it per invocation). When nnc"
      " rejects a model it lists every obstacle of the first stage that fails: the model"
      " checks (opset range, graph input and output types), then every operator type"
      " that has no lowering or whose attributes, types or shapes the NN set cannot"
      " express. A test counts once under each blocker it names; `alone` counts the"
      " tests that blocker alone stops (fixing it would let them compile, or reach the"
      " next stage). Shapes and node names are dropped from the messages so that the"
      " same obstacle groups together. Failures (wrong numbers) are not blockers; they"
      " are listed per archive below.")
    w("")
    table = blocker_table(runs)
    heads = " | ".join(f"{r.title()} | alone" for r in runs)
    w(f"| # | blocker | kind | {heads} | tests | exit | example |")
    w("|---|---|---|" + "---|---|" * len(runs) + "---|---|---|")
    for i, ((kind, b), e) in enumerate(table, 1):
        cells = " | ".join(f"{n} | {o}" for n, o in zip(e["n"], e["only"]))
        codes_txt = ", ".join(str(c) for c, _ in e["codes"].most_common())
        w(f"| {i} | {md(b)} | {kind} | {cells} | **{sum(e['n'])}** | {codes_txt} |"
          f" `{e['example']}` |")
    w("")
    kinds = collections.Counter()
    for (kind, _), e in table:
        kinds[kind] += sum(e["n"])
    w("By kind (tests, summed over the blockers of that kind): "
      + ", ".join(f"{k} {n}" for k, n in kinds.most_common()) + ".")
    w("")

    # ------------------------------------------------------------------ per archive
    w("## Per operator")
    w("")
    w("The operator a `node` test exercises: (1) when the test's graph holds one op type"
      " besides Constant and Identity, that op, unless the test is a function-expanded"
      " `*_expanded` one; (2) otherwise (the `*_expanded` tests, whose graph is the"
      " function body of the op they name, and tests built of several nodes) the op the"
      " test's"
      " name starts with: the longest ONNX operator name that, lower-cased and without"
      " underscores, prefixes the test name after `test_` (with the spellings"
      f" {', '.join(f'`{k}`' for k in sorted(NAME_ALIASES))} mapped to their ops); (3)"
      " otherwise the graph's op types joined with `+`. Over both archives rule 1 named"
      f" {namer.rule['graph']:,} tests, rule 2 {namer.rule['name']:,}, rule 3"
      f" {namer.rule['joined']:,}. The other suites of the 1.23.2 archive are whole models"
      " and listed per test further below. `blocker` is the most frequent blocker among"
      " the op's tests that do not pass.")
    w("")
    ops = sorted({r.op[k] for r in runs for k in r.op if k[0] == "node"}, key=str.lower)
    cols = " | ".join(f"{r.version}: tests | pass | fail | error | timeout | unsupported"
                      for r in runs)
    w(f"| op | {cols} | blocker |")
    w("|---|" + "---|---|---|---|---|---|" * len(runs) + "---|")
    for op in ops:
        cells = []
        bl = collections.Counter()
        for r in runs:
            c = collections.Counter()
            for row in r.present:
                key = (row["suite"], row["test"])
                if key[0] == "node" and r.op[key] == op:
                    c[row["status"]] += 1
                    for b in r.blockers.get(key, []):
                        bl[b[1]] += 1
            total = sum(c.values())
            if total:
                cells.append(f"{total} | {c.get('pass', 0)} | {c.get('fail', 0)} |"
                             f" {c.get('error', 0)} | {c.get('timeout', 0)} |"
                             f" {c.get('unsupported', 0)}")
            else:
                cells.append("- | | | | |")
        top = md(bl.most_common(1)[0][0]) if bl else ""
        w(f"| {md(op)} | {' | '.join(cells)} | {top} |")
    w("")

    for r in runs:
        w(f"## {r.title()}")
        w("")
        w("| suite | tests | pass | fail | error | timeout | unsupported |")
        w("|---|---|---|---|---|---|---|")
        for s in r.suites + ["all"]:
            c = collections.Counter(row["status"] for row in r.present
                                    if s == "all" or row["suite"] == s)
            name = f"**{s}**" if s == "all" else s
            w(f"| {name} | {sum(c.values()):,} | {c.get('pass', 0):,} | {c.get('fail', 0)} |"
              f" {c.get('error', 0)} | {c.get('timeout', 0)} | {c.get('unsupported', 0):,} |")
        w("")
        others = [row for row in r.present if row["suite"] != "node"]
        if others:
            w("Tests outside `node/` (whole models; ops: the graph's op types, Constant and"
              " Identity aside):")
            w("")
            w("| test | ops | status | reason |")
            w("|---|---|---|---|")
            for row in others:
                key = (row["suite"], row["test"])
                w(f"| {row['suite']}/{row['test']} | {md(r.op[key])} | {row['status']} |"
                  f" {md(r.reason.get(key, ''))} |")
            w("")
        non_pass = [row for row in r.present if row["status"] != "pass"]
        fails = [row for row in non_pass if row["status"] in ("fail", "timeout")]
        if fails:
            w("Tests that run but do not match, or time out:")
            w("")
            w("| test | op | status | detail |")
            w("|---|---|---|---|")
            for row in fails:
                key = (row["suite"], row["test"])
                w(f"| {row['suite']}/{row['test']} | {md(r.op[key])} | {row['status']} |"
                  f" {md(r.reason.get(key, ''))} |")
            w("")
        w("<details><summary>Every node test that does not pass, with nnc's message"
          f" ({sum(1 for row in non_pass if row['suite'] == 'node'):,} tests)</summary>")
        w("")
        w("| test | op | status | exit | reason |")
        w("|---|---|---|---|---|")
        for row in non_pass:
            if row["suite"] != "node":
                continue
            key = (row["suite"], row["test"])
            code = r.code.get(key)
            w(f"| {row['test']} | {md(r.op[key])} | {row['status']} |"
              f" {'' if code is None else code} | {md(r.reason.get(key, ''))[:400]} |")
        w("")
        w("</details>")
        w("")
        if r.missing:
            w("Allow-list entries that match no test of this archive: "
              + ", ".join(f"`{m['test']}`" for m in r.missing))
            w("")

    w("## Tests passing with inputs bound at compile time")
    w("")
    w("| archive | test | op | bound inputs |")
    w("|---|---|---|---|")
    for r in runs:
        for key in sorted(r.bound):
            name = key[1] if key[0] == "node" else f"{key[0]}/{key[1]}"
            w(f"| {r.version} | {name} | {md(r.op[key])} | {md(r.bound[key])} |")
    w("")
    with open(a.output, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    for r in runs:
        c = r.counts
        print(f"{a.output}: {r.title()}: {c.get('pass', 0)} of {len(r.present)} pass, "
              + ", ".join(f"{c.get(s, 0)} {s}" for s in STATUSES[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
