#!/usr/bin/env bash
# `make demo`: meshctl's main story on this machine, end to end, with nothing installed by hand,
# in about two and a half minutes here (README.md has the measured figure); the longer stories
# (a gang job's data through the node caches, a node lost under training, the shared API
# server, an inference surge) are `make tour` (scripts/tour.sh).
#   1. the mesh as files: scaffold, validate, test the policies, explain a plan (no cluster yet);
#   2. run it: a Ray Train job (examples/train) is queued first, while the embedded mesh comes
#      up (a local Ray cluster with the three emulated GPU nodes `meshctl init` scaffolds, two
#      with 4 A100s and one with 8 MI300X, and the controller), so that its worker starts while
#      the rest goes on; a couple of jobs run, `explain` says where one went and why; a job that
#      can never fit is rejected at once;
#   3. fault-tolerant training: the training job meets a GPU fault that its node's agent finds
#      (XID 79 in the kernel log of a fake NVIDIA driver: no GPU here): the node is taken out of
#      service, the job checkpoints on request, is evicted and placed on the other A100 node to
#      resume from its checkpoint; the node is back once healthy;
#   4. burst, while the training job resumes and runs on: with on-prem full (critical jobs fill
#      it), a best-effort job bursts to an AWS pool (EC2 emulated by moto_server; the instance
#      joins by running its own startup script, its cluster token from Secrets Manager on moto),
#      a critical job waits for on-prem;
#   5. the end: the training job has finished, `jobs show` gives the steps lost and the times
#      to detect and resume; the idle cloud pool is torn down, its spend shown; the mesh comes
#      down.
# Every wait says what it waits for (scripts/story_wait.py); a step that does not do what the
# story says stops the demo: exit 1, the reason on stderr. On exit it stops only what it
# started (scripts/story.sh).
source "$(dirname "$0")/story.sh"

echo "== 1. The mesh as files"
start_moto  # in the background: ready by part 2
step init mesh
cd mesh
step validate .
step policy test policies
printf 'apiVersion: meshctl/v1\nkind: MeshState\nmetadata: {name: busy}\nspec:\n  pools: {onprem: {free_gpus: 0, queued_jobs: 40, expected_wait_s: 30m}}\n' > ../busy.yaml
step explain jobs/batch-embed.yaml --mesh ../busy.yaml  # what the plan would be with on-prem full

echo; echo "== 2. Run it: the embedded mesh, real Ray jobs"
echo "(for this run: AWS is moto_server on 127.0.0.1; best-effort work bursts at an expected wait"
echo " over 5 s, not 10 min; aws-burst's first instance is its head; a job on an unhealthy node"
echo " has 8 s to checkpoint, not 30)"
mesh_for_the_run no-head
fake_gpus
# Ray Train takes tens of seconds here to start a worker (PyTorch, the model): the training job
# is queued first, before the mesh is up, and runs once the controller does
train_job train-mlp 300
note "meshctl train jobs/train-mlp.yaml --no-follow   # queued while the mesh comes up"
"$MESHCTL" train jobs/train-mlp.yaml --no-follow >"$dir/train.out" 2>"$dir/train.err" &
train_pid=$!
pids+=("$train_pid")
step up --interval 0.5
if ! wait "$train_pid"; then
  echo "demo: meshctl train jobs/train-mlp.yaml failed:" >&2
  cat "$dir/train.out" "$dir/train.err" >&2
  exit 1
fi
forget "$train_pid"
trainjob=$(tail -1 "$dir/train.out")
echo "train-mlp (examples/train/model.py on Ray Train: 300 steps, a checkpoint every 10): $trainjob"
resnet=$("$MESHCTL" submit jobs/train-resnet.yaml); echo "train-resnet (critical, 4 A100 GPUs, class production): $resnet"
quick=$("$MESHCTL" submit --gpus 1 --kind interactive --team vision -- python -c "print('hello from a command job')")
echo "a command job (like ray job submit): $quick"
printf '\n\033[1m$ meshctl submit --gpus 16 -- python big.py\033[0m   # can never fit: rejected at once\n'
if "$MESHCTL" submit --gpus 16 -- python big.py; then
  echo "demo: a job of 16 GPUs a node was queued; the largest node has 8" >&2
  exit 1
else
  echo "(exit $?)"
fi
step jobs wait "$resnet" "$quick" --timeout 180
step explain "$resnet"
printf '\n\033[1m$ meshctl jobs logs %s | tail -1\033[0m\n' "$quick"
"$MESHCTL" jobs logs "$quick" | grep -v '^\[meshctl' | tail -1

echo; echo "== 3. Fault-tolerant training: a GPU fault found by the node's agent"
wait_for step "$trainjob" 1 10 --timeout-s 240 \
  --what "the training job's first checkpoint, at step 10 (Ray Train starting its worker: PyTorch, the model)"
node=$(field "$trainjob" nodes 0)
echo "a GPU fault on $node: XID 79 (fallen off the bus) in its kernel log (the fake driver's)"
echo "[ 4242.000000] NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, GPU has fallen off the bus." >> "$dir/gpus/$node.kmsg"
wait_for node "onprem/$node" unhealthy --follow "$trainjob" --timeout-s 60 \
  --what "$node's agent to report the fault"
step nodes list  # its agent said so: the node is out of service, the job asked to checkpoint
wait_for attempt "$trainjob" 2 --follow "$trainjob" --timeout-s 120 \
  --what "the job to checkpoint, leave $node and be placed again"
echo "$node rebooted: its kernel log starts afresh, its agent says healthy"
rm -f "$dir/gpus/$node.kmsg"
wait_for node "onprem/$node" ready --timeout-s 60 --what "$node back in service"
echo "(the training job resumes from its checkpoint on the other A100 node while the story goes on)"

echo; echo "== 4. Burst: on-prem full, best-effort work to the cloud, critical work waits"
echo "(the training job runs on: its A100 node has 3 GPUs free, the other A100 node 4, the MI300X node 8;"
echo " a fourth critical job, of the production class, waits for the training job's GPU, so that"
echo " none frees up for batch-embed should the training job end before the burst is done)"
fill() { "$MESHCTL" submit --criticality critical --name "$@" -- python -c "import time; time.sleep(600)"; }
fill8=$(fill fill-mi300x --gpus 8); fill4=$(fill fill-a100 --gpus 4)
fill3=$(fill fill-beside-training --gpus 3); fill1=$(fill fill-after-training --gpus 1 --priority production)
echo "critical jobs that fill on-prem: $fill8 (8 GPUs), $fill4 (4), $fill3 (3), $fill1 (1, waits)"
wait_for job "$fill8" "$fill4" "$fill3" --state dispatched --state running --timeout-s 120 \
  --what "on-prem full: the first three placed"
embed=$("$MESHCTL" submit jobs/batch-embed.yaml); echo "batch-embed (best-effort): $embed"
serve=$("$MESHCTL" submit jobs/serve-pii.yaml);   echo "serve-pii   (critical, pii stays on-prem): $serve"
wait_for job "$embed" --state running --state succeeded --follow "$embed" --timeout-s 240 \
  --what "batch-embed to burst: an instance launched on EC2 (moto), joining by its own startup script"
# The cloud instance joined by its own startup script: EC2 user data, read back from moto; on
# this machine the emulator runs that very script as a local process (docs/CLOUD.md).
node=$(field "$embed" nodes 0)
boot_log="$MESHCTL_HOME/run/logs/aws-burst-$node.log"
if [ ! -f "$boot_log" ]; then
  echo "demo: batch-embed ran on $node, not on a cloud instance: nothing burst" >&2
  exit 1
fi
note "the startup script of $node (EC2 user data): no token in it"
"$py" - "$node" "$port" <<'PY'
import base64, sys, boto3
ec2 = boto3.client("ec2", endpoint_url=f"http://127.0.0.1:{sys.argv[2]}")
data = ec2.describe_instance_attribute(InstanceId=sys.argv[1], Attribute="userData")
lines = base64.b64decode(data["UserData"]["Value"]).decode().splitlines()
print("\n".join(lines[:4] + ["..."] + [l for l in lines if "meshctl.boot.join" in l or "--role" in l]))
PY
note "what it said as it booted: it is the pool's head, and its first worker"
grep -h "^meshctl boot" "$boot_log" | cut -c1-160 || true
step explain "$serve"
step jobs cancel "$fill8" "$fill4" "$fill3" "$fill1"  # serve-pii runs on-prem now
step explain "$embed"

echo; echo "== 5. The end: the training job, the cloud pool, down"
wait_for job "$trainjob" "$serve" "$embed" --follow "$trainjob" --timeout-s 240 \
  --what "the training job to finish its 300 steps, serve-pii on-prem and batch-embed in the cloud"
step jobs show "$trainjob"
printf '\n\033[1m$ meshctl jobs logs %s | grep -E "resumed|RESULT"\033[0m\n' "$trainjob"
"$MESHCTL" jobs logs "$trainjob" | grep -E "resumed from|RESULT" | sort -u | tail -2
wait_for event pool.teardown --timeout-s 120 --what "the idle cloud pool to go (idle 6 s here)"
step pools list
step down
finished demo
