"""A fake NVIDIA driver for tests and the demo, where no GPU exists: the `nvidia-smi` beside
this file runs this, and prints what the real tool prints from a state file the test or demo
edits mid-run (XIDs go to the fake kernel log: see `dmesg` beside it). This is a mock of the
driver only; the agent that reads it is the real one.

The state of node N is $MESHCTL_FAKE_GPU_DIR/N.json (N: $MESHCTL_AGENT_NODE, which the agent
sets); a missing file is a healthy node with $MESHCTL_FAKE_GPUS (default 4) GPUs. Keys:
  gpus: how many GPUs          lost: [index] GPUs that fell off the bus
  ecc: {index: count}          pending: [index] with retired pages pending
  throttle: {index: "0x40"}    nvlink_down: {index: [link]}
  driver_down: true (nvidia-smi cannot reach the driver)
"""

import json
import os
import sys
from pathlib import Path


def state():
    node = os.environ.get("MESHCTL_AGENT_NODE", "node")
    folder = os.environ.get("MESHCTL_FAKE_GPU_DIR")
    path = Path(folder) / f"{node}.json" if folder else None
    found = {}
    if path is not None and path.is_file():
        found = json.loads(path.read_text() or "{}")
    found.setdefault("gpus", int(os.environ.get("MESHCTL_FAKE_GPUS", "4")))
    return node, found


def bus(index):
    return f"00000000:{0x1B + 16 * index:02X}:00.0"


def nvidia_smi(args):
    node, s = state()
    if s.get("driver_down"):
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running."
        )
        return 9
    lost = {int(i) for i in s.get("lost", [])}
    if args[:1] == ["nvlink"]:
        for i in range(s["gpus"]):
            if i in lost:
                continue
            print(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-{node}-{i})")
            down = {int(x) for x in s.get("nvlink_down", {}).get(str(i), [])}
            for link in range(4):
                print(f"\t Link {link}: " + ("<inactive>" if link in down else "26.562 GB/s"))
        return 0
    rc = 0
    for i in range(s["gpus"]):
        if i in lost:
            print(
                f"Unable to determine the device handle for GPU{bus(i)}: GPU is lost.  "
                "Reboot the system to recover this GPU",
                file=sys.stderr,
            )
            rc = 15
            continue
        ecc = s.get("ecc", {}).get(str(i), 0)
        pending = "Yes" if i in s.get("pending", []) else "No"
        throttle = s.get("throttle", {}).get(str(i), "0x0000000000000000")
        print(
            f"{i}, GPU-fake-{node}-{i}, NVIDIA H100 80GB HBM3, {bus(i)}, 81559, 1024, 41, "
            f"{ecc}, {pending}, {throttle}"
        )
    return rc


if __name__ == "__main__":
    sys.exit(nvidia_smi(sys.argv[2:]))
