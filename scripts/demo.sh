#!/usr/bin/env bash
# `make demo`: the story of meshctl on this machine, end to end, with nothing installed by hand.
#   1. a mesh as files: scaffold, validate, test the policies, explain a plan (no cluster yet);
#   2. run it for real: bring up the embedded mesh (a local Ray cluster with two emulated 4-GPU
#      nodes, and the controller), submit jobs of different kinds and priorities, show where
#      each went and why, wait for them, show their results, bring the mesh down.
set -euo pipefail
MESHCTL=${MESHCTL:-.venv/bin/meshctl}
MESHCTL=$(cd "$(dirname "$MESHCTL")" && pwd)/$(basename "$MESHCTL")
dir=$(mktemp -d)
export MESHCTL_HOME="$dir/home"
started=$(date +%s)
cleanup() {
  "$MESHCTL" down >/dev/null 2>&1 || true  # stops only what this demo's `up` started
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"  # a folder of its own (Ray must not start from a folder holding a `ray` package)

step() { printf '\n\033[1m$ meshctl %s\033[0m\n' "$*"; "$MESHCTL" "$@"; }

echo "== 1. The mesh as files"
step init mesh
# checkpoints of this run stay in this run's folder
sed -i "s#file:///tmp/meshctl/checkpoints#file://$dir/checkpoints#" mesh/mesh.yaml
cd mesh
step validate .
step pools list
step policy test policies
printf 'apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: busy}\nspec:\n  pools: {onprem: {free_gpus: 0, queued_jobs: 40, expected_wait_s: 30m}}\n' > ../busy.yaml
step explain jobs/batch-embed.yaml --mesh ../busy.yaml  # what the plan would be with on-prem full

echo; echo "== 2. Run it: the embedded mesh, real Ray jobs"
step up --interval 0.5
train=$("$MESHCTL" submit jobs/train-resnet.yaml);  echo "train-resnet (critical, 4 GPUs, class production): $train"
serve=$("$MESHCTL" submit jobs/serve-pii.yaml);     echo "serve-pii    (critical inference, pii data stays on-prem): $serve"
embed=$("$MESHCTL" submit jobs/batch-embed.yaml);   echo "batch-embed  (best-effort Ray Tasks, 0.25 GPU): $embed"
gang=$("$MESHCTL" submit jobs/gang-llm.yaml);       echo "gang-llm     (2 nodes x 4 GPUs under one switch): $gang"
quick=$("$MESHCTL" submit --gpus 1 --kind interactive --team research -- python -c "print('hello from a command job')")
echo "a command job (like ray job submit): $quick"
printf '\n\033[1m$ meshctl submit --gpus 16 -- python big.py\033[0m   # can never fit: rejected at once\n'
"$MESHCTL" submit --gpus 16 -- python big.py || echo "(exit $?)"

# until the controller has decided about the gang (it waits for both nodes to be free)
for _ in $(seq 1 40); do
  "$MESHCTL" explain "$gang" -o json | grep -q '"summary"' && break
  sleep 0.25
done
step explain "$gang"
step status
step jobs wait "$train" "$serve" "$embed" "$gang" "$quick" --timeout 300
step jobs list
for job in "$train" "$serve" "$embed" "$gang" "$quick"; do
  printf '\n\033[1m$ meshctl jobs logs %s | tail -2\033[0m\n' "$job"
  "$MESHCTL" jobs logs "$job" | grep -v '^[0-9-]* [0-9:,]*\s*INFO' | tail -2
done
step explain "$gang"
step nodes list
step down
echo; echo "demo finished in $(( $(date +%s) - started )) s"
