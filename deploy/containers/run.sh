#!/usr/bin/env bash
# Run a stock vLLM or SGLang ROCm image with the infera-exec overlay, on
# one machine, with Docker or podman (docs/containers.md explains every
# flag). Two steps, each one container run:
#
#   run.sh install OVERLAY_IMAGE
#       fill the volume $OVERLAY_VOLUME from the overlay image: its own
#       entrypoint, infera-exec --install /overlay, copies the payload into
#       it, checked against its index (a re-run copies nothing)
#
#   run.sh engine ENGINE_IMAGE [RUNTIME_OPTION...] -- COMMAND [ARG...]
#       run the engine image unchanged, with the volume read-only at
#       /overlay and /overlay/bin/infera-exec as the entrypoint, which
#       prepares the container and starts COMMAND (the worker)
#
# RUNTIME_OPTIONs go to `docker run` / `podman run` as they are: --name,
# -d, --rm, -e VAR=VALUE, -p 8000:8000, --read-only, ...
#
# Environment (defaults in brackets):
#   CONTAINER_CLI   the runtime's command, with any global options
#                   ("podman --runtime runc") [podman if installed, else docker]
#   OVERLAY_VOLUME  the payload volume [infera-overlay]
#   INIT            who is PID 1 and handles `stop` [infera]:
#                   infera  = infera-exec --init: stays as PID 1, forwards
#                             signals to the worker, reaps zombies
#                   runtime = the runtime's --init (tini, catatonit);
#                             infera-exec then execs the worker below it
#                   none    = infera-exec execs the worker as PID 1, which
#                             ignores SIGTERM without a handler of its own
#   SHM_SIZE        a private /dev/shm of this size (e.g. 16g), mounted
#                   exec; empty: --ipc=host, the host's /dev/shm []
#   NOFILE          open-file limit, soft and hard [1048576]
#   NPROC           process limit, soft and hard; empty: the runtime's []
#   PIDS_LIMIT      the container's pids cgroup limit (threads count;
#                   podman's own default is 2048) [-1, no limit]
#   NETWORK         --network [host: the RDMA NICs and their addresses]
#   DEVICES         auto: /dev/kfd, /dev/dri, /dev/infiniband, those that
#                   exist; none; or a list of device paths [auto]
#   HOST_LIBIONIC_DIR  host directory holding libionic.so, the RDMA provider
#                   built for this host's ionic driver; mounted read-only
#                   at /host-libionic when it holds one
#                   [/var/lib/infera/host-libionic]
#   MODELS          host directory mounted read-only at /models []
#   DRY_RUN         1: print the commands, run nothing []
#
# Every command is printed to stderr, prefixed "+ ", before it runs.
set -euo pipefail

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 64
}

if [ -n "${CONTAINER_CLI:-}" ]; then
  read -r -a cli <<<"$CONTAINER_CLI"
elif command -v podman >/dev/null 2>&1; then
  cli=(podman)
elif command -v docker >/dev/null 2>&1; then
  cli=(docker)
else
  echo "run.sh: neither podman nor docker is installed; set CONTAINER_CLI" >&2
  exit 69
fi
volume=${OVERLAY_VOLUME:-infera-overlay}

# run prints a command, each word quoted only where a shell needs it, and
# runs it unless DRY_RUN=1.
run() {
  local w line=+
  for w in "$@"; do
    if [[ -n $w && $w != *[!A-Za-z0-9_./:=,@%+-]* ]]; then
      line+=" $w"
    else
      line+=" '${w//\'/\'\\\'\'}'"
    fi
  done
  printf '%s\n' "$line" >&2
  [ "${DRY_RUN:-}" = 1 ] || "$@"
}

# Limits both containers get. Root in a container cannot raise a hard
# limit above the runtime's own (runc fails "error setting rlimits"), so
# both values are explicit.
limits=(--ulimit "nofile=${NOFILE:-1048576}:${NOFILE:-1048576}")
if [ -n "${NPROC:-}" ]; then
  limits+=(--ulimit "nproc=$NPROC:$NPROC")
fi

install_overlay() {
  [ $# -eq 1 ] || usage
  local image=$1
  if [ "${DRY_RUN:-}" = 1 ] || ! "${cli[@]}" volume inspect "$volume" >/dev/null 2>&1; then
    run "${cli[@]}" volume create "$volume" >/dev/null
  fi
  # The image's entrypoint is infera-exec --install and its command the
  # destination, /overlay: no shell, no network.
  run "${cli[@]}" run --rm --network none "${limits[@]}" -v "$volume:/overlay" "$image"
}

# devices appends to flags the device, group and capability options for
# the GPUs and RDMA devices present (or listed in DEVICES).
devices() {
  local list=() d gid
  case "${DEVICES:-auto}" in
    none) return ;;
    auto)
      for d in /dev/kfd /dev/dri /dev/infiniband; do
        [ -e "$d" ] && list+=("$d")
      done
      ;;
    *) read -r -a list <<<"$DEVICES" ;;
  esac
  local gids=() rdma=
  for d in "${list[@]}"; do
    flags+=(--device "$d")
    case "$d" in
      /dev/infiniband*) rdma=1 ;;
      /dev/kfd|/dev/dri*)
        # Access to the GPU nodes is by group (render, video): the host's
        # group ids, which need not have a name in the image.
        for n in "$d" "$d"/renderD* "$d"/card*; do
          [ -c "$n" ] || continue
          gid=$(stat -c %g "$n")
          [ "$gid" = 0 ] || [[ " ${gids[*]} " == *" $gid "* ]] || gids+=("$gid")
        done
        ;;
    esac
  done
  for gid in "${gids[@]}"; do
    flags+=(--group-add "$gid")
  done
  if [ -n "$rdma" ]; then
    # RDMA registers (pins) the KV cache's memory with the NIC.
    flags+=(--cap-add IPC_LOCK --ulimit memlock=-1:-1)
  fi
}

run_engine() {
  [ $# -ge 1 ] || usage
  local image=$1
  shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    opts+=("$1")
    shift
  done
  [ $# -ge 2 ] || usage # "--" and a command
  shift

  flags=(--entrypoint /overlay/bin/infera-exec -v "$volume:/overlay:ro" "${limits[@]}")
  flags+=(--pids-limit "${PIDS_LIMIT:--1}" --network "${NETWORK:-host}")
  if [ -n "${SHM_SIZE:-}" ]; then
    # Not --shm-size: that /dev/shm is noexec, and libraries that map
    # code from /dev/shm fail to load (infera-exec's shm check says so).
    flags+=(--tmpfs "/dev/shm:rw,nosuid,nodev,exec,size=$SHM_SIZE")
  else
    flags+=(--ipc host)
  fi
  devices
  local lib=${HOST_LIBIONIC_DIR:-/var/lib/infera/host-libionic}
  if [ -f "$lib/libionic.so" ]; then
    flags+=(-v "$lib:/host-libionic:ro")
  fi
  if [ -n "${MODELS:-}" ]; then
    flags+=(-v "$MODELS:/models:ro")
  fi

  local shim=()
  case "${INIT:-infera}" in
    infera) shim=(--init) ;;
    runtime) flags+=(--init) ;;
    none) ;;
    *) echo "run.sh: INIT=$INIT: want infera, runtime or none" >&2; exit 64 ;;
  esac
  run "${cli[@]}" run "${flags[@]}" "${opts[@]}" "$image" "${shim[@]}" "$@"
}

[ $# -ge 1 ] || usage
case "$1" in
  install) shift; install_overlay "$@" ;;
  engine) shift; run_engine "$@" ;;
  *) usage ;;
esac
