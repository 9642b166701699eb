#!/usr/bin/env python3
"""Generate protobuf-messages.json: the Kubernetes protobuf message table that simcluster's
protobuf request decoder (simcluster/src/protobuf.rs) uses to turn
`application/vnd.kubernetes.protobuf` bodies into JSON objects.

Inputs (all local; run once, offline; Python standard library only):
  1. the prost-generated sources of the crate k8s-pb 0.9.0 (one module per API group/version):
     every message with its field tags and wire types;
  2. simcluster/data/builtin-schemas.json (the upstream OpenAPI definitions): the real JSON field
     names (matched on the Rust name without underscores, case-insensitively; a type missing
     there takes the names of the same type in a sibling version) and the required fields;
  Which zero values on the wire to keep is decided by heuristics: "" is dropped unless the field
  is required, 0 and false are kept (gogo-protobuf writes non-pointer fields even when zero).

Run from the repository root:

    python3 simcluster/data/gen-protobuf-messages.py \\
        ~/.cargo/registry/src/index.crates.io-*/k8s-pb-0.9.0/src \\
        > simcluster/data/protobuf-messages.json

Output: {"_generated": ..., "columns": [...],
"groups": {apiVersion: package} (by naming rule, checked against the crate's Resource impls),
"kinds": {"apiVersion/Kind": message} (the crate's Resource impls; other kinds are found as
groups[apiVersion] + "." + Kind, case-insensitively), "wrappers": [message...],
"messages": {message: [[tag, rust_name, json_name, kind, type, flags], ...]}}
  message   fully qualified: package (k8s.io. + module path) + "." + Rust struct name,
            e.g. k8s.io.api.core.v1.Namespace (prost's names: JSON -> Json, AWS -> Aws, ...)
  kind      string | int32 | int64 | bool | bytes | double | message | map | enum
  type      message fields: the message; map fields: the value kind (string, bytes) or message
  flags     r: repeated; i: the Go field is embedded inline (its fields go into the parent
            object); z: keep a zero value found on the wire (pointer / not omitempty);
            q: the field is in the OpenAPI `required` list
"""
import argparse
import glob
import json
import os
import re
import sys

CRATE = "k8s-pb 0.9.0"
GO_REF = "v0.35.7"
SCALARS = {"string", "int32", "int64", "bool", "bytes", "double", "float", "uint32", "uint64",
           "sint32", "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64", "enumeration"}


def strip_comments(text):
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def resolve(typ, module):
    """Resolve a Rust type path (relative to `module`, a list) to a fully qualified message."""
    typ = re.sub(r",(?=>)|,$", "", re.sub(r"\s+", "", typ))
    for wrap in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        while typ.startswith(wrap):
            typ = typ[len(wrap):-1]
    parts = [p for p in typ.split("::") if p]
    base = list(module)
    while parts and parts[0] == "super":
        base.pop()
        parts.pop(0)
    if parts and parts[0] == "crate":
        base = []
        parts.pop(0)
    return "k8s.io." + ".".join(base + parts)


def parse_crate(src):
    messages = {}
    groups = {}
    kinds = {}
    for path in sorted(glob.glob(os.path.join(src, "**", "mod.rs"), recursive=True)):
        module = os.path.relpath(os.path.dirname(path), src).split(os.sep)
        text = strip_comments(open(path, encoding="utf-8").read())
        pkg = "k8s.io." + ".".join(module)
        for m in re.finditer(r"pub struct (\w+) \{([^{}]*)\}", text):
            name, body = m.group(1), m.group(2)
            fields = []
            for f in re.finditer(r"#\[prost\((.*?)\)\]\s*pub (?:r#)?(\w+):\s*(.*?),\s*(?=#\[prost|$)", body, re.S):
                attrs, rust, typ = f.group(1), f.group(2), f.group(3)
                tag = int(re.search(r'tag = "(\d+)"', attrs).group(1))
                head = re.split(r"[ ,=]", attrs.strip())[0]
                repeated = " repeated" in attrs or ", repeated" in attrs
                if head.startswith(("btree_map", "map", "hash_map")):
                    key, val = [x.strip() for x in re.search(r'map = "([^"]*)"', attrs).group(1).split(",")]
                    if key != "string":
                        sys.exit(f"{pkg}.{name}.{rust}: map key {key}")
                    if val == "message":
                        inner = re.sub(r",(?=>)", "", re.sub(r"\s+", "", typ))
                        inner = inner[inner.index(",") + 1:inner.rindex(">")]
                        vtype = resolve(inner, module)
                    else:
                        vtype = val
                    fields.append([tag, rust, "map", vtype, False])
                elif head.startswith("bytes"):
                    fields.append([tag, rust, "bytes", "", repeated])
                elif head == "message":
                    fields.append([tag, rust, "message", resolve(typ, module), repeated])
                elif head == "enumeration":
                    fields.append([tag, rust, "enum", "", repeated])
                elif head in SCALARS:
                    fields.append([tag, rust, head, "", repeated])
                elif head == "oneof":
                    sys.exit(f"{pkg}.{name}.{rust}: oneof is not supported")
                else:
                    sys.exit(f"{pkg}.{name}.{rust}: unknown prost attribute {attrs}")
            messages[f"{pkg}.{name}"] = fields
        for r in re.finditer(r"impl crate::Resource for (\w+) \{([^{}]*)\}", text):
            av = re.search(r'API_VERSION: &\'static str = "([^"]*)"', r.group(2)).group(1)
            kind = re.search(r'KIND: &\'static str = "([^"]*)"', r.group(2)).group(1)
            groups.setdefault(av, pkg)
            kinds[f"{av}/{kind}"] = f"{pkg}.{r.group(1)}"
    return messages, groups, kinds


def parse_go(root, prefix):
    """Go struct fields by (package, lower-case type name, tag): pointer, omitempty, inline, json name;
    and the set of (package, lower-case type name) declared as slices."""
    fields = {}
    slices = set()
    if not root:
        return fields, slices
    for path in glob.glob(os.path.join(root, "**", "*.go"), recursive=True):
        if path.endswith("_test.go") or "generated" in os.path.basename(path):
            continue
        rel = os.path.relpath(os.path.dirname(path), root)
        pkg = prefix + "." + rel.replace(os.sep, ".")
        text = open(path, encoding="utf-8").read()
        for s in re.finditer(r"^type (\w+) \[\]", text, re.M):
            slices.add((pkg, s.group(1).lower()))
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", text, re.S | re.M):
            for line in m.group(2).splitlines():
                line = line.strip()
                if line.startswith("//") or 'protobuf:"' not in line:
                    continue
                f = re.match(r"^(?:(\w+)\s+)?(\S+)\s+`(.*)`$", line)
                if not f:
                    continue
                gotype, tags = f.group(2), f.group(3)
                pb = re.search(r'protobuf:"([^"]*)"', tags).group(1).split(",")
                if len(pb) < 2 or not pb[1].isdigit():
                    continue
                js = re.search(r'json:"([^"]*)"', tags)
                js = js.group(1).split(",") if js else [""]
                fields[(pkg, m.group(1).lower(), int(pb[1]))] = {
                    "ptr": gotype.startswith("*"),
                    "omitempty": "omitempty" in js[1:],
                    "inline": "inline" in js[1:],
                    "json": js[0],
                    "slice": gotype.startswith(("[]", "map[")),
                }
    return fields, slices


SPECIAL_GROUPS = {"core": "", "apps": "apps", "batch": "batch", "autoscaling": "autoscaling",
                  "policy": "policy", "extensions": "extensions",
                  "apiserverinternal": "internal.apiserver.k8s.io",
                  "flowcontrol": "flowcontrol.apiserver.k8s.io",
                  "rbac": "rbac.authorization.k8s.io"}


def api_version_of(pkg):
    """The apiVersion whose objects a package holds (None: not an API group package)."""
    parts = pkg.split(".")
    version = parts[-1]
    if pkg.startswith("k8s.io.api.") and len(parts) == 5:
        g = SPECIAL_GROUPS.get(parts[3], parts[3] + ".k8s.io")
    elif pkg.startswith("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions."):
        g = "apiextensions.k8s.io"
    elif pkg.startswith("k8s.io.kube_aggregator.pkg.apis.apiregistration."):
        g = "apiregistration.k8s.io"
    elif pkg.startswith("k8s.io.metrics.pkg.apis."):
        g = parts[-2].replace("_", ".") + (".metrics.k8s.io" if parts[-2] != "metrics" else ".k8s.io")
        g = g.replace(".metrics.metrics", ".metrics")
    elif pkg == "k8s.io.apimachinery.pkg.apis.meta.v1":
        g = "meta.k8s.io"
    else:
        return None
    return f"{g}/{version}" if g else version


def go_key(msg):
    """(Go package key, lower-case type) for a message name."""
    pkg, _, name = msg.rpartition(".")
    return pkg, name.lower()


# Guesses that camelCase gets wrong (types neither in the OpenAPI definitions nor in the Go input).
CAMEL_OVERRIDES = {"desired_api_version": "desiredAPIVersion"}


def camel(rust):
    if rust in CAMEL_OVERRIDES:
        return CAMEL_OVERRIDES[rust]
    parts = rust.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("crate_src")
    ap.add_argument("--schemas", default=os.path.join(os.path.dirname(__file__), "builtin-schemas.json"))
    args = ap.parse_args()

    messages, groups, kinds = parse_crate(args.crate_src)
    schemas = json.load(open(args.schemas, encoding="utf-8"))
    go_fields, go_slices = parse_go(None, "k8s.io.api")

    # OpenAPI definitions by lower-cased proto-style name.
    defs = {}
    for dname, d in schemas.items():
        key = ("k8s.io." + dname[len("io.k8s."):]).replace("-", "_").lower()
        defs[key] = d
    # Group versions: by naming rule for every package, checked against the crate's Resource impls.
    for pkg in sorted({m.rsplit(".", 1)[0] for m in messages}):
        av = api_version_of(pkg)
        if av:
            if groups.get(av, pkg) != pkg:
                sys.exit(f"{pkg}: {av} is already {groups[av]}")
            groups[av] = pkg

    # Definitions of the same type in a sibling version (JSON names do not change across versions).
    by_group = {}
    for key, d in sorted(defs.items()):
        pkg, _, name = key.rpartition(".")
        by_group.setdefault((pkg.rpartition(".")[0], name), d)

    def norm(name):
        return re.sub(r"[_$-]", "", name).lower()

    wrappers = []
    out = {}
    stats = {"json_from_openapi": 0, "json_from_go": 0, "json_guessed": 0, "go_info": 0, "inline": 0}
    for msg, fields in sorted(messages.items()):
        pkg, _, name = msg.lower().rpartition(".")
        d = defs.get(msg.lower()) or by_group.get((pkg.rpartition(".")[0], name), {})
        props = {norm(p): p for p in d.get("properties", {})}
        required = set(d.get("required", []))
        gpkg, gname = go_key(msg)
        # A message that only wraps a repeated `items` and has no OpenAPI definition of its own is a
        # Go slice type in JSON (`type ExtraValue []string`).
        wrapper_shape = len(fields) == 1 and fields[0][1] == "items" and fields[0][4] and not d
        if ((gpkg, gname) in go_slices or wrapper_shape) and len(fields) == 1 and fields[0][1] == "items":
            wrappers.append(msg)
        rows = []
        for tag, rust, kind, typ, repeated in fields:
            g = go_fields.get((gpkg, gname, tag))
            jname = props.get(norm(rust))
            if jname:
                stats["json_from_openapi"] += 1
            elif g and g["json"]:
                jname = g["json"]
                stats["json_from_go"] += 1
            else:
                jname = camel(rust)
                stats["json_guessed"] += 1
            flags = ""
            if repeated:
                flags += "r"
            inline = False
            if g is not None:
                stats["go_info"] += 1
                inline = g["inline"]
                if g["ptr"] or g["slice"] or not g["omitempty"]:
                    flags += "z"
            else:
                # Heuristic: an embedded message whose fields all appear in this object.
                if kind == "message" and not props.get(norm(rust)) and props:
                    sub = defs.get(typ.lower(), {}).get("properties", {})
                    if sub and all(p in d["properties"] for p in sub):
                        inline = True
                    # A message with no definition of its own (VolumeSource in Volume): its
                    # fields are all properties of this object.
                    sub_fields = messages.get(typ, [])
                    if not sub and sub_fields and all(norm(f[1]) in props for f in sub_fields):
                        inline = True
                if kind != "string" or jname in required:
                    flags += "z"
            if inline:
                flags += "i"
                stats["inline"] += 1
            if jname in required:
                flags += "q"
            rows.append([tag, rust, jname, kind, typ, flags])
        out[msg] = rows
    unresolved = sorted({r[4] for rows in out.values() for r in rows
                         if r[3] in ("message", "map") and r[4] not in ("string", "bytes") and r[4] not in out})
    if unresolved:
        sys.exit(f"unresolved message types: {unresolved}")
    print(f"{len(out)} messages, {len(kinds)} kinds, {len(groups)} group versions, wrappers {len(wrappers)}, {stats}",
          file=sys.stderr)
    doc = {
        "_generated": f"by simcluster/data/gen-protobuf-messages.py from the crate {CRATE} (prost-generated "
                      f"Kubernetes protobuf messages), simcluster/data/builtin-schemas.json (JSON names) "
                      f"(zero values kept or dropped by heuristics). Do not edit by hand; see the script's docstring.",
        "columns": ["tag", "rust_name", "json_name", "kind", "type", "flags"],
        "groups": dict(sorted(groups.items())),
        "kinds": dict(sorted(kinds.items())),
        "wrappers": sorted(wrappers),
    }
    # One message per line: compact but diff-friendly.
    lines = ["{"]
    for k, v in doc.items():
        lines.append(f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))},")
    lines.append('"messages": {')
    items = list(out.items())
    for i, (k, v) in enumerate(items):
        lines.append(f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}{',' if i + 1 < len(items) else ''}")
    lines.append("}}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
