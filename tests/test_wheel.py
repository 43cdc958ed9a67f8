"""The wheel (issue 20): `pip wheel .` (CPU-only, to keep it quick) holds one
copy of the library and the command-line tool, and a virtual environment with
it installed has a working `kvcompress` command; it carries the source and
header the torch fast path is compiled from on first use (issue 17).  Exit 77 when pip cannot
build here (no network for the build requirements)."""
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

root = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", root, "-w", d, "-q", "--no-deps",
                        "--config-settings=cmake.define.KVC_CUDA=OFF", "--config-settings=cmake.define.KVC_OPENCL=OFF",
                        f"--config-settings=build-dir={d}/build"], capture_output=True, text=True)
    wheels = glob.glob(os.path.join(d, "kvcompress-*.whl"))
    if r.returncode != 0 or not wheels:
        print("SKIP: pip wheel failed here:", (r.stderr or r.stdout).strip()[-300:])
        sys.exit(77)
    names = zipfile.ZipFile(wheels[0]).namelist()
    libs = [n for n in names if os.path.basename(n).startswith("libkvcompress")]
    failures = 0
    if len(libs) != 1:
        print("FAIL the wheel holds", libs)
        failures += 1
    if "kvcompress/kvcompress-cli" not in names:
        print("FAIL no command-line tool in the wheel:", names)
        failures += 1
    import re
    hdr = open(os.path.join(root, "include", "kvcompress.h")).read()
    version = ".".join(re.search(rf"#define KVC_VERSION_{k} (\d+)", hdr).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    if not os.path.basename(wheels[0]).startswith(f"kvcompress-{version}-"):
        print("FAIL the wheel's version is not the header's", version, os.path.basename(wheels[0]))
        failures += 1
    for src in ("kvcompress/_torch_ext.cpp", "kvcompress/kvcompress.h"):  # the torch fast path builds from these
        if src not in names:
            print("FAIL not in the wheel:", src)
            failures += 1
    venv = os.path.join(d, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "--no-deps", "--no-index", wheels[0]], check=True)
    exe = os.path.join(venv, "bin", "kvcompress")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True) if os.path.exists(exe) else None
    if r is None or r.returncode != 0 or not r.stdout.startswith("kvcompress "):
        print("FAIL `kvcompress --version` from the installed wheel:", r and (r.returncode, r.stderr))
        failures += 1
    print("FAILED" if failures else "passed", f"({len(names)} files in the wheel, libraries {libs})")
    sys.exit(1 if failures else 0)
