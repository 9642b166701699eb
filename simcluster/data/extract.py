#!/usr/bin/env python3
"""Extract the built-in resource table of a real kube-apiserver v1.36.2 from the recorded
aggregated-discovery exchanges of the conformance suite (recorded/02-discovery-aggregated.json),
into builtin-discovery.json. Run from the repository root:

    python3 simcluster/data/extract.py simcluster/conformance/recorded/02-discovery-aggregated.json

The output is data about the real server (which resources exist, their kinds, scopes, verbs,
short names, categories and subresources), not an expectation of any case.
"""
import json
import sys

src = sys.argv[1]
rec = json.load(open(src))
out = {}
for ex in rec["exchanges"]:
    if ex["step"] == "api-v2":
        out["core"] = ex["body"]
    if ex["step"] == "apis-v2":
        out["groups"] = ex["body"]
json.dump(out, open("simcluster/data/builtin-discovery.json", "w"), indent=1, sort_keys=True)
print("wrote simcluster/data/builtin-discovery.json")
