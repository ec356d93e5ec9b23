"""A stand-in for an engine worker: prints what infera-exec handed it."""

import os
import resource
import sys


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    rows = [
        ("argv", " ".join(sys.argv[1:]) or "(none)"),
        ("module", __file__),
        ("python", sys.version.split()[0] + " " + sys.executable),
        ("pid", str(os.getpid())),
        ("uid", str(os.getuid())),
        ("cwd", os.getcwd()),
        ("nofile", "soft %d, hard %d" % (soft, hard)),
        ("ready timeout", os.environ.get("INFERA_ENGINE_READY_TIMEOUT", "(unset)")),
    ]
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "PATH"):
        rows.append((name, os.environ.get(name, "(unset)")))
    print("infera-demo worker is running; this is what it received:")
    for k, v in rows:
        print("  %-15s %s" % (k, v))


if __name__ == "__main__":
    main()
