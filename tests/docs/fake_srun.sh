#!/usr/bin/env bash
# A stand-in for Slurm's srun on a machine without Slurm (tests/docs/run_guide_commands.py puts
# it on PATH as `srun`): `srun [-N NODES] [-n TASKS] COMMAND...` starts TASKS copies of COMMAND
# on this host (NODES when -n is not given) with the environment Slurm gives each task
# (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST, SLURMD_NODENAME, MASTER_PORT), waits for all
# and fails if any failed. Only what the guides use.
set -uo pipefail
nodes=1 tasks=""
while [ $# -gt 0 ]; do
  case "$1" in
    -N|--nodes) nodes="$2"; shift 2 ;;
    -n|--ntasks) tasks="$2"; shift 2 ;;
    --nodes=*) nodes="${1#*=}"; shift ;;
    --ntasks=*) tasks="${1#*=}"; shift ;;
    -*) echo "fake srun: option $1 is not supported" >&2; exit 2 ;;
    *) break ;;
  esac
done
tasks="${tasks:-$nodes}"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pids=()
for ((i = 0; i < tasks; i++)); do
  SLURM_PROCID=$i SLURM_NTASKS=$tasks SLURM_STEP_NODELIST=localhost SLURMD_NODENAME=localhost \
    LOCKSTEP_MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
