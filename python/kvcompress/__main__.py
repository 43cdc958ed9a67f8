"""`kvcompress` on PATH (pip's console script) and `python -m kvcompress`: run
the C command-line tool (`kvcompress bench`, `verify`, `info`, ...).

The wheel ships the tool beside the library in this package; in a source tree
the build folders are searched as for the library; $KVCOMPRESS_CLI overrides."""
import os
import sys


def _find():
    env = os.environ.get("KVCOMPRESS_CLI")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "kvcompress-cli")
    root = os.path.dirname(os.path.dirname(here))
    for build in ("build", "build-cuda", "build-bench"):
        yield os.path.join(root, build, "tools", "kvcompress")


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    for exe in _find():
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            os.execv(exe, [exe, *args])
    sys.stderr.write("kvcompress: the command-line tool is not installed with this package "
                     "(pip install . builds it; or set KVCOMPRESS_CLI to a built tools/kvcompress)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
