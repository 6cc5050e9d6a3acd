#!/usr/bin/env bash
# Stops the cluster tools/slurm/start.sh started: cancels its jobs, shuts slurmctld and slurmd
# down, stops munged, and checks that none of them (nor a job's process) is left running.
set -uo pipefail

STATE=${TRASHFIRE_SLURM_DIR:-/tmp/trashfire-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by trashfire tools/slurm/start.sh"

if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  echo "tools/slurm/stop.sh: $CONF is not ours; leaving this machine's SLURM alone" >&2
  exit 1
fi
if pgrep -x slurmctld >/dev/null; then
  timeout 10 scancel --full --quiet --user "$(id -un)" 2>/dev/null || true
  timeout 10 scontrol shutdown 2>/dev/null || true
fi
for _ in $(seq 20); do
  pgrep -x 'slurmctld|slurmd|slurmstepd' >/dev/null || break
  sleep 0.5
done
pkill -KILL -x 'slurmctld|slurmd|slurmstepd' 2>/dev/null || true
pkill -x munged 2>/dev/null || true
for _ in $(seq 20); do
  pgrep -x 'munged|slurmctld|slurmd|slurmstepd' >/dev/null || break
  sleep 0.5
done
if pgrep -a -x 'munged|slurmctld|slurmd|slurmstepd'; then
  echo "tools/slurm/stop.sh: still running (above)" >&2
  exit 1
fi
echo "SLURM cluster stopped (logs in $STATE)"
