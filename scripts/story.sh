# What `make demo` (scripts/demo.sh) and `make tour` (scripts/tour.sh) share; sourced by both.
# A story runs in a temporary folder of its own (Ray must not start from a folder holding a
# `ray` package) with its own MESHCTL_HOME, and on exit stops only what it started: the mesh its
# `up` started (`meshctl down --force`), the processes it put in the background (moto_server, an
# API server, a submission), and removes its folder.
set -euo pipefail
MESHCTL=${MESHCTL:-.venv/bin/meshctl}
MESHCTL=$(cd "$(dirname "$MESHCTL")" && pwd)/$(basename "$MESHCTL")
bin=$(dirname "$MESHCTL")
py="$bin/python"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$(mktemp -d)
export MESHCTL_HOME="$dir/home"
started=$(date +%s)
pids=()  # what this story started in the background
cleanup() {
  "$MESHCTL" down --force >/dev/null 2>&1 || true  # stops only what this story's `up` started
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"

forget() {  # a background process that has exited: not ours to signal any more
  local kept=() pid
  for pid in "${pids[@]}"; do [ "$pid" = "$1" ] || kept+=("$pid"); done
  pids=("${kept[@]}")
}
step() { printf '\n\033[1m$ meshctl %s\033[0m\n' "$*"; "$MESHCTL" "$@"; }
note() { printf '\n\033[1m# %s\033[0m\n' "$*"; }
# waits on the mesh's store, saying what they wait for (scripts/story_wait.py)
wait_for() { "$py" "$repo/scripts/story_wait.py" "$@"; }
field() {  # field JOB KEY [INDEX]: one field of `meshctl jobs show JOB -o json`
  "$MESHCTL" jobs show "$1" -o json | "$py" -c '
import json, sys
value = json.load(sys.stdin)[sys.argv[1]]
print(value[int(sys.argv[2])] if len(sys.argv) > 2 else value)' "${@:2}"
}

# AWS for the run: moto_server on a free loopback port, fake credentials. Started first, in the
# background: it is ready by the time the mesh needs it.
start_moto() {
  port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$bin/moto_server" -H 127.0.0.1 -p "$port" >"$dir/moto.log" 2>&1 &
  pids+=($!)
  export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_DEFAULT_REGION=us-east-1
}

# The scaffold's mesh, set for a run of minutes on this machine (in the folder `meshctl init`
# made): checkpoints in the story's folder; aws-burst on moto_server, idle after 6 s instead of
# 10 min; best-effort work bursts when its expected wait is over 5 s instead of ten minutes (the
# shipped policies, tested in part 1, say ten minutes); a job on a node found unhealthy has 8 s
# to checkpoint instead of 30 (the example loop looks for the request every 2 s); the agents
# probe every 5 s instead of 2 (a probe runs the fake driver's nvidia-smi and dmesg, Python
# scripts: about 0.5 s of CPU a probe here, where a real nvidia-smi costs little).
# $1: `dataset`: the gang job's dataset, 32 MiB on S3 (moto), not the 2 TiB of the real corpus;
# `no-head`: aws-burst without a head of its own (the scaffold's m7i.large), its first instance
# its head: one instance to boot, not two.
mesh_for_the_run() {
  "$py" - "$port" "$dir" "${1:-}" <<'PY'
import socket, sys, time
port, where, dataset = sys.argv[1], sys.argv[2], sys.argv[3] == "dataset"
own_head = sys.argv[3] != "no-head"
endpoint = f"http://127.0.0.1:{port}"
PROBES = "agents: {interval_s: 5s}"  # the fake driver is Python: a probe costs 0.5 s of CPU here
text = open("mesh.yaml").read()
# checkpoints of this run stay in this run's folder
text = text.replace("file:///tmp/meshctl/checkpoints", f"file://{where}/checkpoints")
aws, end = text.index("- name: aws-burst"), text.index("- name: gcp-burst")
block = text[aws:end].replace(
    "idle_minutes: 10", f"idle_minutes: 0.1\n      endpoint_url: {endpoint}\n      {PROBES}")
if own_head is False:  # the pool's first instance is its head: one instance to boot, not two
    block = "".join(l for l in block.splitlines(True) if "head_node_type:" not in l)
text = text[:aws] + block + text[end:]
storage = text.index("checkpoint_storage:")  # the first: onprem's
text = text[:storage] + f"graces: {{unhealthy_s: 8s}}\n      {PROBES}\n      " + text[storage:]
open("mesh.yaml", "w").write(text)
burst = open("policies/burst.yaml").read().replace("> 600.0", "> 5.0", 1)  # best-effort only
open("policies/burst.yaml", "w").write(burst)
for _ in range(300):  # until moto_server answers
    try:
        socket.create_connection(("127.0.0.1", int(port)), 0.5).close()
        break
    except OSError:
        time.sleep(0.1)
if dataset:
    import boto3
    gang = open("jobs/gang-llm.yaml").read().replace("size_gib: 2TiB", "size_gib: 32MiB")
    gang = gang.replace("location: s3://corpus/web-v3", f"location: s3://corpus/web-v3\n      endpoint_url: {endpoint}")
    open("jobs/gang-llm.yaml", "w").write(gang)
    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket="corpus")
    for i in range(2):
        s3.put_object(Bucket="corpus", Key=f"web-v3/shard-{i}.bin", Body=bytes([i + 1]) * (16 << 20))
PY
}

# Each node's agent probes its GPUs through a fake nvidia-smi and dmesg (scripts/fake-gpu: a
# mock of the NVIDIA driver, which this machine lacks); a story puts a GPU fault in one.
fake_gpus() {
  mkdir -p "$dir/gpus"
  export PATH="$repo/scripts/fake-gpu:$PATH" MESHCTL_FAKE_GPU_DIR="$dir/gpus" MESHCTL_FAKE_GPUS=4
}

# The example Ray Train loop (examples/train/model.py) as a job file: one worker with one A100
# GPU (the fake driver is NVIDIA's: the agents find faults on the A100 nodes), a checkpoint
# every 10 steps, 0.1 s a step. $1: its name; $2: its steps; $3: more of the job's spec.
train_job() {
  cat > "jobs/$1.yaml" <<EOF
apiVersion: meshctl/v1
kind: Job
metadata: {name: $1}
spec:
  kind: train
  working_dir: $repo/examples/train
  resources: {gpus: 1, cpus: 0.5, memory_gib: 512MiB, accelerator: {any_of: [A100]}}
  train:
    loop: model:train_loop
    config: {steps: $2, checkpoint_every_steps: 10, step_delay_s: 0.1}
${3:-}
EOF
}

finished() { echo; echo "$1 finished in $(( $(date +%s) - started )) s"; }
