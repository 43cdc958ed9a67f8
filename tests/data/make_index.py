#!/usr/bin/env python3
"""Writes tests/data/golden/cases.tsv, the C-readable index of the three golden
manifests (main, engine, edge).  Run after updating a manifest; the CTest test
`golden_index_in_sync` fails while the index is stale.

One line per case, tab-separated key=value fields; lists are comma-separated,
list items colon-separated."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")


def lines():
    for sub in ("main", "engine", "edge"):
        with open(os.path.join(GOLDEN, sub, "manifest.json")) as f:
            man = json.load(f)
        for c in man["cases"]:
            cs = c.get("checksums", {})
            has_ref = c.get("ref", True) and os.path.exists(
                os.path.join(GOLDEN, sub, c["name"] + ".ref.bin"))
            fields = {
                "name": c["name"], "dir": sub,
                "format": c.get("nope_format", "int8"),
                "overlap": int(bool(c.get("overlap", False))),
                "cos_sin": c.get("cos_sin_layout", "split"),
                "kv_block_size": c.get("kv_block_size", 64),
                "reqs": c["num_reqs"], "tokens": c["total_tokens"],
                "C": c["compress_ratio"], "block": c["block_size"],
                "layout": c["layout"], "seed": c["seed"],
                "score_shift": c["score_shift"],
                "outputs": c["num_outputs"], "pages": c["kv_pages"],
                "ref": int(bool(has_ref)),
                "cs_state": cs.get("state_cache", "-"),
                "cs_table": cs.get("block_table", "-"),
                "cs_weight": cs.get("rms_norm_weight", "-"),
                "cs_cos_sin": cs.get("cos_sin_cache", "-"),
                "vshift": ",".join("%d:%d:%d" % tuple(v) for v in c.get("value_shift_dims", [])) or "-",
                "poison": ",".join("%d:%d:%d:%s" % tuple(p) for p in c.get("poison", [])) or "-",
                "nonfinite": ",".join(str(o) for o in c.get("nonfinite_outputs", [])) or "-",
            }
            yield "\t".join("%s=%s" % kv for kv in fields.items())


def dsv4_lines():
    """The contract's sections 9 and 10 (golden/dsv4): their own index, read
    by tests/test_dsv4_reference.c and (as directory dsv4) by the kit's
    loader, with the fields those sections add."""
    with open(os.path.join(GOLDEN, "dsv4", "manifest.json")) as f:
        man = json.load(f)
    for c in man["cases"]:
        cs = c.get("checksums", {})
        fields = {
            "name": c["name"], "head_dim": c["head_dim"], "format": c["nope_format"],
            "overlap": int(bool(c["overlap"])), "cos_sin": c["cos_sin_layout"],
            "kv_block_size": c["kv_block_size"], "rotate": int(bool(c["rotate"])),
            "score_bias": int(bool(c["score_bias"])), "state_dtype": c["state_dtype"],
            "reqs": c["num_reqs"], "tokens": c["total_tokens"], "C": c["compress_ratio"],
            "block": c["block_size"], "layout": c["layout"], "seed": c["seed"],
            "score_shift": c["score_shift"], "outputs": c["num_outputs"], "pages": c["kv_pages"],
            "slot_bytes": c["slot_bytes"],
            "cs_state": cs.get("state_cache", "-"), "cs_table": cs.get("block_table", "-"),
            "cs_weight": cs.get("rms_norm_weight", "-"), "cs_cos_sin": cs.get("cos_sin_cache", "-"),
            "vshift": ",".join("%d:%d:%d" % tuple(v) for v in c.get("value_shift_dims") or []) or "-",
            "poison": ",".join("%d:%d:%d:%s" % tuple(p) for p in c.get("poison") or []) or "-",
            "nonfinite": ",".join(str(o) for o in c.get("nonfinite_outputs") or []) or "-",
        }
        yield "\t".join("%s=%s" % kv for kv in fields.items())


def probe_lines():
    """fp8_probe of the engine manifest: value, then the byte the reference's cast gives."""
    with open(os.path.join(GOLDEN, "engine", "manifest.json")) as f:
        probe = json.load(f)["fp8_probe"]
    for v, b in zip(probe["values"], probe["bytes"]):
        yield "%s\t%d" % (float(v).hex(), b)


def main():
    files = {
        os.path.join(GOLDEN, "cases.tsv"): "".join(l + "\n" for l in lines()),
        os.path.join(GOLDEN, "fp8_probe.tsv"): "".join(l + "\n" for l in probe_lines()),
        os.path.join(GOLDEN, "dsv4.tsv"): "".join(l + "\n" for l in dsv4_lines()),
    }
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        for path, text in files.items():
            with open(path) as f:
                if f.read() != text:
                    print(path, "is stale: run tests/data/make_index.py", file=sys.stderr)
                    return 1
        print("index files match the manifests")
        return 0
    for path, text in files.items():
        with open(path, "w") as f:
            f.write(text)
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
