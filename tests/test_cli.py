#!/usr/bin/env python3
"""Runs the kvcompress binary: help, version, usage errors (exit 2), a quick
CPU bench with JSON output parsed and checked, verify on the golden data.
usage: test_cli.py PATH_TO_KVCOMPRESS"""
import json
import os
import subprocess
import sys
import tempfile

exe = sys.argv[1]
failures = 0


def run(*args, timeout=600):
    try:
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", f"(still running after {timeout} s: killed)"
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures += 1


rc, out, err = run("--help")
check(rc == 0 and "bench" in out and "verify" in out, "--help lists the commands")
for cmd in ("bench", "verify", "info"):
    rc, out, _ = run(cmd, "--help")
    check(rc == 0 and out.startswith("usage: kvcompress " + cmd), f"{cmd} --help")
rc, out, _ = run("--version")
check(rc == 0 and out.startswith("kvcompress "), "--version")
for args, frag in [((), "usage"), (("frobnicate",), "unknown command"),
                   (("bench", "--layout", "diagonal"), "--layout diagonal"),
                   (("bench", "--repeat"), "needs a value"),
                   (("bench", "--cases", "tokens=abc,C=4"), "expected an integer"),
                   (("bench", "--wat"), "unknown option"),
                   (("verify", "--random", "-3"), "--random"),
                   # every number parsed the same way: whole, in range, one line naming the option
                   (("bench", "--threads", "abc"), "--threads abc"),
                   (("bench", "--threads", "1025"), "--threads 1025"),
                   (("bench", "--threads", "-1"), "--threads -1"),
                   (("bench", "--repeat", "abc"), "--repeat abc"),
                   (("bench", "--repeat", "3x"), "--repeat 3x"),
                   (("bench", "--seed", "-5"), "--seed -5"),
                   (("bench", "--seed", "99999999999999999999"), "--seed"),
                   (("verify", "--threads", "2.5"), "--threads 2.5"),
                   (("verify", "--random", "1e3"), "--random 1e3")]:
    rc, out, err = run(*args)
    check(rc == 2 and frag in err and len(err.strip().splitlines()) == 1 or (args == () and rc == 2),
          f"usage error {args!r} -> exit 2 with one line naming it (got {rc}: {err.strip()[:80]})")
rc, out, _ = run("info")
check(rc == 0 and "cpu" in out and "usable" in out, "info")

with tempfile.TemporaryDirectory() as d:
    js = os.path.join(d, "b.json")
    rc, out, err = run("bench", "--backend", "cpu", "--cases", "quick", "--layout", "both", "--repeat", "2",
                       "--json", js)
    check(rc == 0, f"quick bench exits 0 ({err.strip()[:200]})")
    data = json.load(open(js))
    cases = data["cases"]
    check(data["backend"] == "cpu" and data["read_bw_gbs"] > 0, "json header: backend and read bandwidth")
    check(len(cases) == 6, f"6 quick cases (contig + shuffle), got {len(cases)}")
    check(all(c["check"] == "ok" for c in cases), "every case checked ok against the CPU bytes")
    for c in cases:
        want_bytes = c["outputs"] * c["C"] * 4096 + c["outputs"] * 584
        check(abs(c["bytes"] - want_bytes) < 1 and c["median_us"] > 0 and
              abs(c["gbs"] - c["bytes"] / c["median_us"] / 1e3) < 1e-3 * c["gbs"] + 1e-6,
              f"{c['name']} {c['layout']}: bytes, time and GB/s consistent")
    check(sum(1 for l in out.splitlines() if l.startswith("r")) == 6, "one table row per case")

rc, out, err = run("bench", "--backend", "cpu", "--cases", "decode", "--layout", "contig", "--repeat", "1",
                   "--no-floor")
check(rc == 0 and "dec_r1024_t4096_c4_b4_fp8_ovl" in out and "dec_r256_t32768_c128_b8_fp8_S2" in out and
      "8 cases, 0 failed" in out, "bench --cases decode: 8 decode-shaped cases, checked against the CPU bytes")
rc, out, _ = run("bench", "--help")
check("%%" not in out, "bench --help prints no literal %%")
with tempfile.TemporaryDirectory() as d:
    # default repeats: time-based (>= 10 calls and 0.5 s), every sample and the run's metadata in the JSON
    js = os.path.join(d, "t.json")
    rc, out, err = run("bench", "--backend", "cpu", "--cases", "reqs=1,tokens=256,C=128,block=8", "--layout", "contig",
                       "--json", js)
    data = json.load(open(js))
    c = data["cases"][0]
    check(rc == 0 and all(k in data for k in ("library_version", "git_revision", "timestamp", "command", "backend",
                                              "device", "cpu_model", "threads", "warmup", "min_calls", "min_seconds")),
          "json header: version, revision, timestamp, command line, backend, device, cpu, threads, warm-up")
    check(c["calls"] >= 10 and len(c["samples_us"]) == c["calls"] and sum(c["samples_us"]) >= 0.5e6 * 0.99,
          f"time-based default: >= 10 calls and 0.5 s, every sample in the JSON ({c['calls']} calls)")
    check(c["min_us"] <= c["median_us"] <= c["max_us"] and c["floor_us"] > 0 and c["x_floor"] > 0,
          "min <= median <= max; the CPU floor of the case measured in the same run")
    check("min_us" in out and "max_us" in out and "floor_us" in out, "the table shows min, max and the floor")

rc, out, err = run("bench", "--backend", "cpu", "--cases", "reqs=1,tokens=64,C=4,block=4,overlap=1,format=fp8",
                   "--layout", "contig", "--repeat", "1", "--cos-sin", "interleaved")
check(rc == 0 and "ok" in out, "bench on a spec with engine formats")
# --numerics fast checks SPEC 7 / 9 conformance of each slot against the
# reference: head-width-128 slots (132 / 68 bytes) read at their own size
for fmt in ("indexer_fp8", "indexer_mxfp4"):
    rc, out, err = run("bench", "--backend", "cpu", "--numerics", "fast", "--cases",
                       f"reqs=1,tokens=256,C=4,block=4,overlap=1,format={fmt}", "--layout", "contig", "--repeat", "1")
    row = next((l for l in out.splitlines() if l.startswith("r1_")), "")
    check(rc == 0 and row.rstrip().endswith(" ok"), f"bench --numerics fast conforms on {fmt} ({row[-60:].strip()})")

rc, out, err = run("verify", "--backend", "cpu", "--random", "6")
last = out.strip().splitlines()[-1] if out.strip() else ""
import re
m = re.fullmatch(r"(\d+) passed, 0 failed", last)
check(rc == 0 and m and int(m.group(1)) >= 51 and sum(l.startswith("ok   random") for l in out.splitlines()) == 6,
      f"verify: 45 golden + 6 random + the GPU-path shapes pass ({last})")
check(out.startswith("kvcompress ") and "verify: backend cpu" in out.splitlines()[0] and "golden data: " in out,
      "verify names its backend, device and golden data")
rc, out, err = run("verify", "--backend", "cpu", "--random", "2", "--golden", "/nonexistent/golden")
check(rc == 1 and "--golden /nonexistent/golden" in err, f"verify --golden of missing data exits 1 ({rc})")
with tempfile.TemporaryDirectory() as d:
    rc, out, err = run("verify", "--backend", "cpu", "--random", "0", "--golden", d)
    check(rc == 1, f"verify that checks nothing exits 1 ({rc})")
    env = dict(os.environ, KVCOMPRESS_GOLDEN=d)
    r = subprocess.run([exe, "verify", "--backend", "cpu", "--random", "0"], capture_output=True, text=True, env=env)
    check(r.returncode == 1 and "no golden data" in r.stderr,
          f"$KVCOMPRESS_GOLDEN without data: exit 1 saying so ({r.returncode})")
    # random cases alone are not a verify: without golden data it exits 1 (it said ok after 33 checks)
    r = subprocess.run([exe, "verify", "--backend", "cpu", "--random", "2"], capture_output=True, text=True, env=env)
    check(r.returncode == 1 and "no golden data" in r.stderr and "--golden DIR" in r.stderr,
          f"verify without golden data exits 1 and says how to point it at them ({r.returncode})")

# What a user reads: the line that says what x_floor and %read mean, --repeat
# help that says what happens, JSON with the seed, geomeans, spread flags and
# the effective repeat, and --plot's picture (one bar a case, the floor line).
import xml.etree.ElementTree as ET
with tempfile.TemporaryDirectory() as d:
    js, svg = os.path.join(d, "q.json"), os.path.join(d, "q.svg")
    rc, out, err = run("bench", "--backend", "cpu", "--cases", "quick", "--seed", "5", "--json", js, "--plot", svg)
    check(rc == 0 and "x_floor = median time / median time of a plain read" in out and "%read = " in out,
          "bench says what x_floor and %read mean")
    j = json.load(open(js)) if rc == 0 else {}
    check(j.get("seed") == 5 and j.get("repeat") is None and j.get("x_floor_geomean", 0) > 0 and
          j.get("pct_read_geomean", 0) > 0 and all(isinstance(c.get("spread"), bool) and c["calls"] >= 10
                                                   for c in j.get("cases", [])),
          "bench JSON: seed, repeat null (time-based) with each case's calls, both geomeans, a spread flag a case")
    try:
        root = ET.parse(svg).getroot()
        rects = [e for e in root.iter() if e.tag.endswith("rect")]
        texts = "".join(e.text or "" for e in root.iter() if e.tag.endswith("text"))
        ok = len(rects) == 1 + len(j.get("cases", [])) and "r1_t2048_c128_b8 contig" in texts and "x_floor" in texts
    except (OSError, ET.ParseError):
        ok = False
    check(ok, "bench --plot: an SVG with a bar a case, labelled")
rc, out, _ = run("bench", "--help")
check("least 10 calls and 0.5 s" in out and "--plot FILE" in out, "bench --help: --repeat's CPU default and --plot")

# Issue 49: the whole command line is checked before any work (no bandwidth
# run, no JSON written), and nothing hangs on absurd sizes.
import time
with tempfile.TemporaryDirectory() as d:
    js = os.path.join(d, "out.json")
    for spec, frag in [("tokens=1099511627776,C=128", "tokens"),          # looped over every token before
                       ("tokens=99999999999999999999,C=128", "range"),    # clamped to INT64_MAX before
                       ("reqs=1,tokens=4096,C=128,block=4611686018427387904", "block"),
                       ("reqs=1,tokens=4096,C=128,kv_block=1152921504606846976", "kv_block_size"),
                       ("reqs=1,tokens=4096,C=128,score_shift=2147483647", "score_shift"),
                       ("reqs=0,tokens=1024,C=128", "num_reqs = 0"), ("reqs=-3,tokens=1024,C=128", "num_reqs = -3"),
                       ("reqs=3,tokens=1024,C=128", "multiple of num_reqs"), ("tokens=1024,C=128,block=0", "block_size = 0"),
                       ("tokens=1024,C=128,kv_block=-1", "kv_block=-1"), ("tokens=1024,C=128,kv_block=0", "kv_block=0"),
                       ("tokens=100,C=128", "no window closes"), ("tokens=1024,C=128,cos_sin=bogus", "cos_sin=bogus"),
                       ("tokens=1024,C=4,overlap=7", "overlap=7")]:
        t0 = time.monotonic()
        rc, out, err = run("bench", "--backend", "cpu", "--cases", spec, "--json", js, timeout=20)
        dt = time.monotonic() - t0
        check(rc == 2 and frag in err and dt < 0.5 and not os.path.exists(js) and "read bandwidth" not in out,
              f"bench --cases {spec}: exit 2 in {dt:.2f} s naming '{frag}', no JSON ({rc}: {err.strip()[:120]})")
rc, out, err = run("bench", "--backend", "cpu", "--cases", "quick", "--layout", "contig", "--repeat", "1",
                   "--no-floor", "--json", "/dev/full", timeout=120)
check(rc == 1 and "/dev/full" in err, f"--json /dev/full: a failed write exits 1 and says so ({rc}: {err.strip()[:100]})")
if os.path.exists("/usr/bin/prlimit"):
    # 1 GiB of state (2 with the floor's buffer) under a 1.5 GiB address-space limit: refused up front
    t0 = time.monotonic()
    try:
        p = subprocess.run(["/usr/bin/prlimit", f"--as={1536 << 20}", exe, "bench", "--backend", "cpu", "--cases",
                            "reqs=1,tokens=262144,C=128", "--layout", "contig"], capture_output=True, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        p = subprocess.CompletedProcess([], None, "", "(killed after 60 s)")
    dt = time.monotonic() - t0
    check(p.returncode == 1 and "needs about" in p.stderr and "available" in p.stderr and dt < 5,
          f"a case larger than the memory left is refused before any work ({p.returncode}, {dt:.1f} s: "
          f"{p.stderr.strip()[:160]})")
# a truncated golden .ref.bin is a failed case, never a read past the buffer
import shutil
src_golden = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "golden")
with tempfile.TemporaryDirectory() as d:
    for f in os.listdir(src_golden):
        if os.path.isfile(os.path.join(src_golden, f)):
            shutil.copy(os.path.join(src_golden, f), d)
    shutil.copytree(os.path.join(src_golden, "edge"), os.path.join(d, "edge"))
    refs = sorted(f for f in os.listdir(os.path.join(d, "edge")) if f.endswith(".ref.bin"))
    victim = os.path.join(d, "edge", refs[0])
    with open(victim, "r+b") as f:
        f.truncate(100)
    rc, out, err = run("verify", "--backend", "cpu", "--random", "0", "--golden", d, timeout=300)
    check(rc == 1 and "100 bytes" in out and refs[0] in out,
          f"verify with a truncated {refs[0]}: that case fails naming the sizes ({rc})")

print("FAILED" if failures else "passed", f"({failures} failures)")
sys.exit(1 if failures else 0)
