#!/usr/bin/env python3
"""Checks a CycloneDX 1.6 JSON document offline: the official 1.6 JSON schema (bundled in
cyclonedx-python-lib, with the SPDX and JSF schemas it references) and what a schema cannot
say: specVersion is "1.6", every bom-ref is unique, every dependency names a known bom-ref.

Usage: validate_sbom.py FILE   (exit 0 valid, 1 invalid with the errors on stderr)
scripts/setup installs the library into target/interop-venv; cli/tests/sbom.rs runs this.
"""
import json
import sys

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator


def refs(node, out):
    if isinstance(node, dict):
        if isinstance(node.get("bom-ref"), str):
            out.append(node["bom-ref"])
        for value in node.values():
            refs(value, out)
    elif isinstance(node, list):
        for value in node:
            refs(value, out)


def main(path):
    text = open(path, encoding="utf-8").read()
    problems = []
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text, all_errors=True)
    for e in errors or []:
        where = "/".join(str(p) for p in getattr(e.data, "absolute_path", []))
        problems.append(f"schema: {where or '(root)'}: {getattr(e.data, 'message', e)}")
    doc = json.loads(text)
    if doc.get("specVersion") != "1.6":
        problems.append(f"specVersion is {doc.get('specVersion')!r}, not '1.6'")
    found = []
    refs(doc, found)
    for ref in sorted({r for r in found if found.count(r) > 1}):
        problems.append(f"bom-ref {ref!r} appears more than once")
    for dep in doc.get("dependencies", []):
        for ref in [dep.get("ref")] + dep.get("dependsOn", []):
            if ref not in found:
                problems.append(f"dependencies name an unknown bom-ref {ref!r}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
