#!/usr/bin/env bash
# `make demo`: the story of meshctl on this machine, end to end, with nothing installed by hand.
#   1. a mesh as files: scaffold, validate, test the policies, explain a plan (no cluster yet);
#   2. run it for real: bring up the embedded mesh (a local Ray cluster with two emulated 4-GPU
#      nodes, and the controller), submit jobs of different kinds and priorities, show where
#      each went and why, wait for them, show their results; the gang job reads its dataset
#      (on S3: moto_server) through its nodes' caches, S3 read once for both nodes;
#   3. burst: with on-prem full, a best-effort job bursts to an AWS pool (EC2 emulated by
#      moto_server; each instance joins by running its own startup script, its cluster token
#      from Secrets Manager on moto), a critical job waits for on-prem, the idle cloud pool is
#      torn down, the spend is shown;
#   4. fault-tolerant training: a Ray Train job (examples/train) meets a GPU fault that its
#      node's agent finds (XID 79 in the kernel log of a fake NVIDIA driver: no GPU here): the
#      node is taken out of service, the job checkpoints on request, is evicted and resumes on
#      the other node; the first node is back once healthy; then the node the job is on dies,
#      and the job resumes again from its latest checkpoint and finishes; `jobs show` gives
#      the steps lost and the times to detect and resume; then the mesh comes down;
#   5. an inference surge (a mesh of its own): a Ray Serve service at one replica beside an
#      elastic Ray Train job on the other GPUs; traffic from a load generator rises eightfold,
#      the training job lends a node (checkpoint, resume on one worker), the service scales
#      out; traffic falls, the replica goes, the loan closes, the training job grows back.
set -euo pipefail
MESHCTL=${MESHCTL:-.venv/bin/meshctl}
MESHCTL=$(cd "$(dirname "$MESHCTL")" && pwd)/$(basename "$MESHCTL")
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
export MESHCTL_HOME="$dir/home"
started=$(date +%s)
moto_pid=""
cleanup() {
  "$MESHCTL" down --force >/dev/null 2>&1 || true  # stops only what this demo's `up` started
  [ -n "$moto_pid" ] && kill "$moto_pid" 2>/dev/null
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
echo "(for this run: AWS is moto_server on 127.0.0.1; best-effort work bursts at an expected wait over 5 s, not 10 min)"
# For the run: AWS is moto_server on a free port (fake credentials); the burst pool idles out
# after 12 s, and best-effort work bursts when its expected wait is over 5 s instead of ten minutes (the
# shipped policies, tested above, say ten minutes)
port=$("$(dirname "$MESHCTL")/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$(dirname "$MESHCTL")/moto_server" -H 127.0.0.1 -p "$port" >"$dir/moto.log" 2>&1 &
moto_pid=$!
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_DEFAULT_REGION=us-east-1
"$(dirname "$MESHCTL")/python" - "$port" <<'PY'
import sys
text = open("mesh.yaml").read()
aws = text.index("- name: aws-burst")
end = text.index("- name: gcp-burst")
block = text[aws:end].replace("idle_minutes: 10", "idle_minutes: 0.2\n      endpoint_url: http://127.0.0.1:" + sys.argv[1])
open("mesh.yaml", "w").write(text[:aws] + block + text[end:])
burst = open("policies/burst.yaml").read().replace("> 600.0", "> 5.0", 1)  # best-effort only
open("policies/burst.yaml", "w").write(burst)
# the gang job's dataset: 32 MiB on S3 (moto), not the 2 TiB of the real corpus
gang = open("jobs/gang-llm.yaml").read().replace("size_gib: 2TiB", "size_gib: 32MiB")
gang = gang.replace("location: s3://corpus/web-v3", "location: s3://corpus/web-v3\n      endpoint_url: http://127.0.0.1:" + sys.argv[1])
open("jobs/gang-llm.yaml", "w").write(gang)
import socket, time, boto3
for _ in range(300):  # until moto_server answers
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.5).close()
        break
    except OSError:
        time.sleep(0.1)
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:" + sys.argv[1])
s3.create_bucket(Bucket="corpus")
for i in range(2):
    s3.put_object(Bucket="corpus", Key=f"web-v3/shard-{i}.bin", Body=bytes([i + 1]) * (16 << 20))
PY
# Each node's agent probes its GPUs through a fake nvidia-smi and dmesg (scripts/fake-gpu: a
# mock of the NVIDIA driver, which this machine lacks); part 4 puts a GPU fault in one.
mkdir -p "$dir/gpus"
export PATH="$repo/scripts/fake-gpu:$PATH" MESHCTL_FAKE_GPU_DIR="$dir/gpus" MESHCTL_FAKE_GPUS=4
step up --interval 0.5
train=$("$MESHCTL" submit jobs/train-resnet.yaml);  echo "train-resnet (critical, 4 GPUs, class production): $train"
serve=$("$MESHCTL" submit jobs/serve-pii.yaml);     echo "serve-pii    (critical inference, pii data stays on-prem): $serve"
embed=$("$MESHCTL" submit jobs/batch-embed.yaml);   echo "batch-embed  (best-effort Ray Tasks, 0.25 GPU): $embed"
gang=$("$MESHCTL" submit jobs/gang-llm.yaml);       echo "gang-llm     (2 nodes x 4 GPUs under one switch): $gang"
quick=$("$MESHCTL" submit --gpus 1 --kind interactive --team vision -- python -c "print('hello from a command job')")
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
# the gang's dataset came through its nodes' caches: S3 read once, the second node from the first
gang_node=$("$MESHCTL" jobs show "$gang" -o json | "$(dirname "$MESHCTL")/python" -c 'import json,sys; print(json.load(sys.stdin)["nodes"][-1])')
printf '\n\033[1m$ meshctl jobs logs %s | grep web-corpus\033[0m\n' "$gang"
"$MESHCTL" jobs logs "$gang" | grep "web-corpus" || true
step nodes show "onprem/$gang_node"

echo; echo "== 3. Burst: on-prem full, best-effort work to the cloud, critical work waits"
blocker=$("$MESHCTL" submit --gpus 4 --nodes 2 --criticality critical --name fill-onprem -- python -c "import time; time.sleep(600)")
echo "fill-onprem (critical, both on-prem A100 nodes): $blocker"
blocker_amd=$("$MESHCTL" submit --gpus 8 --criticality critical --name fill-amd -- python -c "import time; time.sleep(600)")
echo "fill-amd (critical, the on-prem MI300X node): $blocker_amd"
for job in "$blocker" "$blocker_amd"; do
  for _ in $(seq 1 120); do  # until it holds its nodes
    "$MESHCTL" jobs show "$job" -o json | grep -q '"state": "running"' && break
    sleep 0.25
  done
done
embed2=$("$MESHCTL" submit jobs/batch-embed.yaml); echo "batch-embed (best-effort): $embed2"
serve2=$("$MESHCTL" submit jobs/serve-pii.yaml);   echo "serve-pii   (critical, pii stays on-prem): $serve2"
step jobs wait "$embed2" --timeout 300
step explain "$embed2"
# The cloud instance joined by its own startup script: EC2 user data, read back from moto; on
# this machine the emulator runs that very script as a local process (docs/CLOUD.md).
node=$("$MESHCTL" jobs show "$embed2" -o json | "$(dirname "$MESHCTL")/python" -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0])')
boot_log="$MESHCTL_HOME/run/logs/aws-burst-$node.log"
if [ -f "$boot_log" ]; then
printf '\n\033[1m# the startup script of %s (EC2 user data): no token in it\033[0m\n' "$node"
"$(dirname "$MESHCTL")/python" - "$node" "$port" <<'PY'
import base64, sys, boto3
ec2 = boto3.client("ec2", endpoint_url=f"http://127.0.0.1:{sys.argv[2]}")
data = ec2.describe_instance_attribute(InstanceId=sys.argv[1], Attribute="userData")
lines = base64.b64decode(data["UserData"]["Value"]).decode().splitlines()
print("\n".join(lines[:4] + ["..."] + [l for l in lines if "meshctl.boot.join" in l or "--role" in l]))
PY
printf '\n\033[1m# what it said as it booted, and what the pool'"'"'s own head (m7i.large, on demand) said\033[0m\n'
grep -h "^meshctl boot" "$boot_log" | cut -c1-160 || true
grep -h "as its head" "$MESHCTL_HOME"/run/logs/aws-burst-i-*.log | head -1 | cut -c1-160 || true
else
  echo "(batch-embed ran on $node, on-prem: nothing burst this time)"
fi
step explain "$serve2"
printf '\n\033[1m$ meshctl jobs logs %s | tail -1\033[0m\n' "$embed2"
"$MESHCTL" jobs logs "$embed2" | tail -1
step jobs cancel "$blocker" "$blocker_amd"
step jobs wait "$serve2" --timeout 300
for _ in $(seq 1 120); do  # the cloud pool goes once idle for its idle_minutes (12 s here)
  "$MESHCTL" status -o json | grep -q '"kind": "pool.teardown"' && break
  sleep 0.5
done
step pools list

echo; echo "== 4. Fault-tolerant training: a GPU fault found by the node's agent, then a node dies"
trainjob=$("$MESHCTL" train model:train_loop --name mlp --working-dir "$repo/examples/train" \
  --workers 1 --gpus-per-worker 1 --cpus-per-worker 0.5 --memory-per-worker 512MiB \
  --config steps=900 --config checkpoint_every_steps=20 --config step_delay_s=0.1 --no-follow \
  --export onnx)
echo "train (examples/train/model.py, Ray Train, a checkpoint every 20 steps; its model leaves as ONNX): $trainjob"
py="$(dirname "$MESHCTL")/python"
until_step() {  # until the job's attempt $1 has passed step $2; the demo stops if the job ends
  local said
  for _ in $(seq 1 600); do
    said=$("$MESHCTL" jobs show "$trainjob" -o json | "$py" -c '
import json, sys
shown = json.load(sys.stdin)
attempts = (shown.get("training") or {}).get("attempts") or []
mine = [a for a in attempts if a.get("attempt") == int(sys.argv[1])]
if mine and (mine[0].get("last_step") or 0) >= int(sys.argv[2]):
    print("reached")
elif shown["state"] in ("succeeded", "failed", "cancelled"):
    last = (shown.get("events") or [{}])[-1]
    print(shown["state"], last.get("kind", ""), last.get("message", ""), sep=": ")
' "$1" "$2")
    case "$said" in
      reached) return ;;
      "") sleep 0.5 ;;
      *) echo "demo: the training job $trainjob ended before attempt $1 passed step $2: $said" >&2
         echo "demo: its log: meshctl jobs logs $trainjob" >&2
         "$MESHCTL" jobs logs "$trainjob" 2>&1 | tail -20 >&2 || true
         exit 1 ;;
    esac
  done
  echo "demo: attempt $1 of the training job $trainjob did not pass step $2 in 5 minutes" >&2
  "$MESHCTL" jobs show "$trainjob" >&2 || true
  exit 1
}
node_state() {  # the state of node $1, as meshctl nodes list gives it
  "$MESHCTL" nodes list -o json | "$py" -c '
import json, sys
print({n["node"]: n["state"] for n in json.load(sys.stdin)}["onprem/" + sys.argv[1]])' "$1"
}
until_step 1 60
node=$("$MESHCTL" jobs show "$trainjob" -o json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["nodes"][0])')
echo "a GPU fault on $node: XID 79 (fallen off the bus) in its kernel log (the fake driver's)"
echo "[ 4242.000000] NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, GPU has fallen off the bus." >> "$dir/gpus/$node.kmsg"
for _ in $(seq 1 120); do [ "$(node_state "$node")" = unhealthy ] && break; sleep 0.25; done
step nodes list  # its agent said so: the node is out of service, the job asked to checkpoint
until_step 2 1  # evicted after its checkpoint, and resumed on the other node
echo "$node rebooted: its kernel log starts afresh, its agent says healthy, it is back in service"
rm -f "$dir/gpus/$node.kmsg"
for _ in $(seq 1 120); do [ "$(node_state "$node")" = ready ] && break; sleep 0.25; done
until_step 2 400
node=$("$MESHCTL" jobs show "$trainjob" -o json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["nodes"][0])')
echo "a node failure: every Ray process of $node (the node the run is on now) is killed"
"$py" - "$node" <<'PY'
import os, sys
from pathlib import Path
from meshctl.pools import local
run = Path(os.environ["MESHCTL_HOME"]) / "run"
local.remove_node(local.LocalCluster.load(local.run_file(run, "onprem")), sys.argv[1], run)
PY
step jobs wait "$trainjob" --timeout 300
step jobs show "$trainjob"
printf '\n\033[1m$ meshctl jobs logs %s | grep -E "resumed|RESULT|exported"\033[0m\n' "$trainjob"
"$MESHCTL" jobs logs "$trainjob" | grep -E "resumed from|RESULT|exported" | sort -u | tail -3
step down

echo; echo "== 5. An inference surge: a service borrows a GPU from elastic training and gives it back"
echo "(a mesh of its own: three emulated 1-GPU nodes; an elastic Ray Train job on two, a Ray Serve"
echo " service on one; its traffic rises eightfold, then falls: benchmarks/surge.py plays it)"
"$py" "$repo/benchmarks/surge.py" --show
echo; echo "demo finished in $(( $(date +%s) - started )) s"
