package main

import "github.com/infera/infera-exec/config"

// helpText is the usage: the fixed parts below around the environment,
// which config renders from its one list of the variables.
func helpText() string { return helpHead + config.HelpEnvironment() + helpTail }

const helpHead = `Usage: infera-exec [OPTIONS] [--] COMMAND [ARG...]

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
  7. chdir, raise the open-file soft limit to the hard limit, write a report,
     exec COMMAND (with --init: start it and stay as its init)

Options (before COMMAND; the first word that is not an option starts it):
  --explain    run every detection and check, change nothing, print the
               plan: the exact argv and cwd, what the environment gains
               (--verbose or --json: all of it); exit 0 if the worker
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
  --init       do not exec: start COMMAND as a child and stay as its
               minimal init (PID 1, else a child subreaper), forwarding
               every signal but KILL, STOP and CHLD (TSTP, TTIN, TTOU
               stop the init too), reaping zombies, exiting with its
               status (128+signal when a signal killed it); for docker run
  --init-group as --init, forwarding signals to the worker's process group,
               which gets SIGTERM when the worker ends (SIGKILL 5s later)
  --verbose    also log debug lines; with --explain, the full environment
  --version    print version, commit and Go version
  -h, --help   print this help
  --           end of options; use it when COMMAND starts with '-'

`

const helpTail = `
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
  With --init: the worker's exit status, or 128+N when signal N killed it.
`
