#!/usr/bin/env python3
"""Extract the structure of the built-in Kubernetes v1.36 types (properties, list types and map
keys, patch strategies and merge keys, required fields, formats) from the upstream OpenAPI
definitions that the PyPI package kubernetes-validate ships, into builtin-schemas.json.
Descriptions are dropped. Run from the repository root:

    python3 -m pip download --no-deps -d /tmp/kv kubernetes-validate==1.37.0
    python3 simcluster/data/extract-schemas.py /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl
"""
import json
import sys
import zipfile

KEEP = {"type", "properties", "items", "$ref", "additionalProperties", "required", "enum", "format",
        "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
        "x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy", "x-kubernetes-group-version-kind",
        "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-unions", "oneOf"}

def strip(v):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k == "properties":
                out[k] = {pk: strip(pv) for pk, pv in x.items()}
            elif k in KEEP:
                out[k] = strip(x)
        if isinstance(out.get("$ref"), str):
            out["$ref"] = out["$ref"].split("/")[-1]
        return out
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v

z = zipfile.ZipFile(sys.argv[1])
raw = json.loads(z.read("kubernetes_validate/kubernetes-json-schema/v1.36.0-local/_definitions.json"))
defs = {k: strip(v) for k, v in raw["$defs"].items()}
json.dump(defs, open("simcluster/data/builtin-schemas.json", "w"), separators=(",", ":"), sort_keys=True)
print("wrote simcluster/data/builtin-schemas.json with", len(defs), "definitions")
