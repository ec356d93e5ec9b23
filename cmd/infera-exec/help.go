package main

const helpText = `Usage: infera-exec [OPTIONS] [--] COMMAND [ARG...]

Prepare a stock vLLM or SGLang ROCm container from the overlay payload
mounted beside it, then replace this process with COMMAND (execve), so the
worker keeps infera-exec's PID and nothing stays resident.

  infera-exec python3 -m infera.engine.vllm --model /models/X
  infera-exec --explain python3 -m infera.engine.sglang --model-path /m

In one pass, before exec:
  1. detect the ABI family: ROCm major from the SONAME of
     $ROCM_PATH or /opt/rocm lib/libamdhip64.so*, CPython minor of the
     interpreter (from its name, symlink chain or pyvenv.cfg; else asked once)
  2. pick the payload trees: py3XX/ and native/rocmN-py3XX/; refuse when a
     capability the deployment requires is missing
  3. compose the worker's environment (PYTHONPATH, LD_LIBRARY_PATH, PATH,
     INFERA_ENGINE_READY_TIMEOUT)
  4. swap in the host's RDMA provider (when /host-libionic/libionic.so is
     mounted and will load)
  5. run the preflight checks (a misconfiguration that would hang is refused)
  6. apply the engine patches (anchored fixes to the installed vLLM/SGLang
     source, located by one interpreter run)
  7. chdir, raise the open-file soft limit to the hard limit, write a report

Options (before COMMAND; the first word that is not an option starts it):
  --explain    run every detection and check, change nothing, print the
               plan and the exact argv, env and cwd; exit 0 if the worker
               would start, else the code it would refuse with
  --json       with --explain, --doctor or --check: print the result as JSON
  --doctor     run only the preflight checks on the command that follows:
               placeholders, model-dir, advertise, advertise-ip, rdma, shm,
               nofile; exit 0, 1 (warnings) or 78 (errors)
  --install DEST
               copy the payload this binary belongs to into DEST (an
               emptyDir), checked against payload.index.json; no command
  --check ROOT evaluate the engine patches against an unpacked image or a
               site-packages directory, without Python, writing nothing;
               exit 65 if a patch drifted
  --verbose    also log debug lines
  --version    print version, commit and Go version
  -h, --help   print this help
  --           end of options; use it when COMMAND starts with '-'

Environment:
  PAYLOAD_ROOT                 payload directory (default: the parent of the
                               directory holding this binary)
  INFERA_PYTHON                interpreter to detect and probe (default python3)
  INFERA_PYTHON_TIMEOUT        how long it may take to answer (default 10s)
  INFERA_REQUIRE_NATIVE        capabilities the deployment needs: a list such
                               as "mooncake,hipfile"; 1/true/all = the native
                               tree and all it declares; auto = what the
                               worker's arguments imply; 0/false/none/empty = none
  INFERA_ENGINE_READY_TIMEOUT  seconds the worker waits for engine /health:
                               "2400", "90.5", "90m" or "2h" (default 1800);
                               passed to the worker as whole seconds
  INFERA_EXEC_CHDIR            working directory of the worker (default /)
  INFERA_ABI_FAMILY            force the family, e.g. rocm7-py312 (debugging)
  INFERA_HOST_LIBIONIC         host RDMA provider (default /host-libionic/libionic.so)
  INFERA_RDMA_PROVIDER         provider the host build replaces (default ionic)
  SYSFS_PATH                   sysfs root, as libibverbs reads it (default /sys)
  INFERA_SKIP_ENGINE_PATCHES   non-empty: apply no engine patches
  INFERA_REQUIRE_PATCHES       patch ids that must be in force, else exit 65
  INFERA_EXEC_STATE_DIR        cache of the engine location (default
                               /run/infera-exec, else /tmp/infera-exec)
  INFERA_PREFLIGHT             off: skip the preflight checks
  INFERA_PREFLIGHT_SKIP        preflight checks to skip, e.g. rdma,shm
  INFERA_PREFLIGHT_TIMEOUT     how long a filesystem that may not answer (NFS,
                               FUSE, ...) may take (default 5s)
  INFERA_PREFLIGHT_ON_TIMEOUT  warn (default): start the worker anyway; error:
                               refuse (78)
  INFERA_ALLOW_TCP_KV          1: prefill/decode without RDMA only warns
  INFERA_EXEC_LOG              text (default) or json log lines on stderr
  INFERA_EXEC_REPORT           report file (default /run/infera-exec/report.json,
                               else /tmp/infera-exec/report.json); off = none
  ROCM_PATH                    ROCm root searched before /opt/rocm

Exit codes (the worker's own once it runs):
  64   usage: unknown option, no command
  65   a required engine patch is not in force (--check: a patch drifted)
  69   a required capability is unavailable
  70   internal error in infera-exec
  73   --install: the destination cannot be written
  78   payload, interpreter or configuration unusable, or a preflight
       check failed with an error
  126  the command was found but cannot be executed
  127  the command was not found on the composed PATH
`
