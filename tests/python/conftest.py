import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# use the source tree's package unless an installed one is asked for
if os.environ.get("KVC_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")


def golden_cases(dirs=("main", "edge", "engine", "dsv4"), max_tokens=None):
    """(dir, fields) of the golden index (cases.tsv, and dsv4.tsv as directory
    dsv4: SPEC 9 and 10), as dicts of strings."""
    out = []
    for index, default_dir in (("cases.tsv", None), ("dsv4.tsv", "dsv4")):
        with open(os.path.join(GOLDEN, index)) as f:
            for line in f:
                d = dict(kv.split("=", 1) for kv in line.rstrip("\n").split("\t"))
                d.setdefault("dir", default_dir)
                if d["dir"] in dirs and (max_tokens is None or int(d["tokens"]) <= max_tokens):
                    out.append(d)
    return out


def case_kwargs(d):
    kw = dict(reqs=int(d["reqs"]), tokens=int(d["tokens"]), C=int(d["C"]), block=int(d["block"]),
              shuffle=d["layout"] == "shuffle", seed=int(d["seed"]), score_shift=int(d["score_shift"]),
              kv_block_size=int(d["kv_block_size"]), kv_format=d["format"], overlap=d["overlap"] == "1",
              cos_sin_layout=d["cos_sin"], rotate=d.get("rotate") == "1", score_bias=d.get("score_bias") == "1",
              state_dtype="bfloat16" if d.get("state_dtype") == "bf16" else "float32")
    if d["vshift"] != "-":
        kw["value_shifts"] = [tuple(map(int, v.split(":"))) for v in d["vshift"].split(",")]
    if d["poison"] != "-":
        kw["poison"] = [(int(a), int(b), int(c), v) for a, b, c, v in (p.split(":") for p in d["poison"].split(","))]
    return kw


def canon_rows(d):
    import numpy as np
    sb = int(d.get("slot_bytes", 584))
    return np.fromfile(os.path.join(GOLDEN, d["dir"], d["name"] + ".canon.bin"), np.uint8).reshape(-1, sb)


def call_kwargs(d):
    """The call's keyword arguments, but score_bias (the case's: GeneratedCase.options())."""
    return dict(nope_format=d["format"], overlap=d["overlap"] == "1", cos_sin_layout=d["cos_sin"],
                kv_block_size=int(d["kv_block_size"]), rotate=d.get("rotate") == "1")
