#!/usr/bin/env bash
# `make tour`: the longer stories, after `make demo`'s main one (several minutes here; each wait
# says what it waits for):
#   1. data next to the GPUs: on the embedded mesh (as `make demo` brings it up), a gang job (2
#      nodes x 4 A100s under one switch) reads its dataset (on S3: moto_server) through its
#      nodes' caches, S3 read once for both nodes; beside it, best-effort Ray Tasks on a quarter
#      of a GPU and a critical inference job whose pii data stays on-prem;
#   2. a node lost under training: every Ray process of the node a Ray Train job runs on is
#      killed; Ray Train restarts its worker on another node inside the attempt, from its latest
#      checkpoint, and the job finishes; its model leaves as ONNX, checked with onnxruntime;
#   3. the shared server: `meshctl server` over the mesh's store, a user and her token (`meshctl
#      admin users add`), `meshctl login` from her own home, a job submitted through the server,
#      charged to her team and owned by her; then the mesh comes down;
#   4. an inference surge, on a mesh of its own: a Ray Serve service at one replica beside an
#      elastic Ray Train job on the other GPUs; traffic from a load generator rises eightfold,
#      the training job lends a node (checkpoint, resume on one worker), the service scales
#      out; traffic falls, the replica goes, the loan closes, the training job grows back
#      (benchmarks/surge.py).
# A step that does not do what the story says stops the tour: exit 1, the reason on stderr.
source "$(dirname "$0")/story.sh"

echo "== The embedded mesh, as in make demo (AWS and S3 on moto_server)"
start_moto
step init mesh
cd mesh
mesh_for_the_run dataset
fake_gpus
step up --interval 0.5

echo; echo "== 1. Data next to the GPUs: a gang job reads its dataset through its nodes' caches"
gang=$("$MESHCTL" submit jobs/gang-llm.yaml);     echo "gang-llm    (2 nodes x 4 GPUs under one switch; 32 MiB on S3): $gang"
embed=$("$MESHCTL" submit jobs/batch-embed.yaml); echo "batch-embed (best-effort Ray Tasks, 0.25 GPU): $embed"
serve=$("$MESHCTL" submit jobs/serve-pii.yaml);   echo "serve-pii   (critical inference, pii data stays on-prem): $serve"
wait_for job "$gang" "$embed" "$serve" --follow "$gang" --timeout-s 300 --what "the three jobs to finish"
step explain "$gang"
printf '\n\033[1m$ meshctl jobs logs %s | grep web-corpus\033[0m\n' "$gang"
read_lines=$("$MESHCTL" jobs logs "$gang" | grep "web-corpus" || true)
echo "$read_lines"
if [ "$(grep -c "read 16.0 MiB of web-corpus" <<<"$read_lines")" != 2 ]; then
  echo "tour: the gang's two ranks did not each read the dataset's 16 MiB from its node's cache" >&2
  exit 1
fi
step nodes show "onprem/$(field "$gang" nodes 1)"  # its cache: from S3 once, or from its peer

echo; echo "== 2. A node lost under training: Ray Train resumes inside the attempt"
train_job train-mlp 300 "    export: onnx"
trainjob=$("$MESHCTL" train jobs/train-mlp.yaml --no-follow)
echo "train-mlp (examples/train/model.py: 300 steps, a checkpoint every 10; its model leaves as ONNX): $trainjob"
wait_for step "$trainjob" 1 60 --timeout-s 240 \
  --what "the training job's first 60 steps (Ray Train starting its worker: PyTorch, the model)"
node=$(field "$trainjob" nodes 0)
echo "a node failure: every Ray process of $node (the node the run is on) is killed"
"$py" - "$node" <<'PY'
import os, sys
from pathlib import Path
from meshctl.pools import local
run = Path(os.environ["MESHCTL_HOME"]) / "run"
local.remove_node(local.LocalCluster.load(local.run_file(run, "onprem")), sys.argv[1], run)
PY
wait_for job "$trainjob" --follow "$trainjob" --timeout-s 300 \
  --what "the job to resume on another node from its checkpoint, and finish"
step jobs show "$trainjob"
printf '\n\033[1m$ meshctl jobs logs %s | grep -E "resumed|RESULT|exported"\033[0m\n' "$trainjob"
"$MESHCTL" jobs logs "$trainjob" | grep -E "resumed from|RESULT|exported" | sort -u | tail -3

echo; echo "== 3. The shared server: a user, her token, a job through the API server"
note "meshctl admin users add ana --team vision   # on the mesh's host: prints her token once"
token=$("$MESHCTL" admin users add ana --team vision)
sport=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
note "meshctl server --port $sport &   # over the mesh's store; log in $dir/server.log"
"$MESHCTL" server --port "$sport" >"$dir/server.log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
echo "waiting for the API server to answer on 127.0.0.1:$sport ..."
"$py" - "$sport" "$dir/server.log" <<'PY'
import sys, time, urllib.request
url, began = f"http://127.0.0.1:{sys.argv[1]}/healthz", time.monotonic()
while time.monotonic() - began < 60:
    try:
        urllib.request.urlopen(url, timeout=2).close()
        print(f"  {time.monotonic() - began:5.1f} s  {url} answers")
        sys.exit(0)
    except OSError:
        time.sleep(0.25)
sys.exit(f"tour: the API server did not answer within 60 s; its log: {sys.argv[2]}")
PY
export ANA_HOME="$dir/ana"  # her own machine, as it were: her home holds her login only
ana() { printf '\n\033[1m[ana]$ meshctl %s\033[0m\n' "$*"; MESHCTL_HOME="$ANA_HOME" "$MESHCTL" "$@"; }
printf '\n\033[1m[ana]$ meshctl login http://127.0.0.1:%s < her-token\033[0m\n' "$sport"
MESHCTL_HOME="$ANA_HOME" "$MESHCTL" login "http://127.0.0.1:$sport" <<<"$token"
printf '\n\033[1m[ana]$ meshctl submit --gpus 1 -- python -c "print(...)"\033[0m\n'
hers=$(MESHCTL_HOME="$ANA_HOME" "$MESHCTL" submit --gpus 1 -- python -c "print('hello from ana, through the API server')")
echo "$hers"
ana jobs wait "$hers" --timeout 120
ana jobs list  # hers only: the jobs of parts 1 and 2 are not hers to see
seen=$(MESHCTL_HOME="$ANA_HOME" "$MESHCTL" jobs list -o json | "$py" -c '
import json, sys; print(" ".join(sorted(j["id"] for j in json.load(sys.stdin))))')
team=$(MESHCTL_HOME="$ANA_HOME" "$MESHCTL" jobs show "$hers" -o json | "$py" -c '
import json, sys; print(json.load(sys.stdin)["team"])')
owner=$("$py" - "$hers" <<'PY'
import os, sys
from pathlib import Path
from meshctl.state import JobRecord, open_store
job = open_store(Path(os.environ["MESHCTL_HOME"])).get(JobRecord, sys.argv[1])
print(job.owner if job else None)
PY
)" $team"
echo "in the mesh's store, $hers is owned by and charged to: $owner"
if [ "$seen" != "$hers" ] || [ "$owner" != "ana vision" ]; then
  echo "tour: ana should see only $hers, hers and charged to vision; she sees: $seen; it is: $owner" >&2
  exit 1
fi
printf '\n\033[1m[ana]$ meshctl jobs logs %s | tail -1\033[0m\n' "$hers"
MESHCTL_HOME="$ANA_HOME" "$MESHCTL" jobs logs "$hers" | grep -v '^\[meshctl' | tail -1
kill "$server_pid" && wait "$server_pid" 2>/dev/null || true
forget "$server_pid"
step down

echo; echo "== 4. An inference surge: a service borrows a GPU from elastic training and gives it back"
echo "(a mesh of its own: three emulated 1-GPU nodes; an elastic Ray Train job on two, a Ray Serve"
echo " service on one; its traffic rises eightfold, then falls: benchmarks/surge.py plays it)"
"$py" "$repo/benchmarks/surge.py" --show
finished tour
