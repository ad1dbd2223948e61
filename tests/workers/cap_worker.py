#!/usr/bin/env python3
"""A sweepd test worker that holds each trial to its memory cap, as a framework's allocator does.

It speaks the protocol by hand (no helper) and "allocates" in the fake NVML's state file, as
gpu_sim_worker.py does (one ``proc <dev> <pid> <bytes>`` line per change, appended whole).

At start it holds CAP_CONTEXT bytes (default 256M, its "CUDA context") and says so in `ready`'s
``memory``. A trial allocates ``params["mem"]`` MiB on top in CAP_STEPS steps (default 4),
sending a ``memory`` message after each, then holds it for ``params["hold"]`` seconds (default
CAP_HOLD_S, 0.3) and frees it; ``params["delay"]`` seconds pass before its first allocation. A step that would take the allocator past the trial's cap
(``memory_cap`` of the `trial` message; ``SWEEPD_MEMORY_CAP`` in oneshot mode) fails the trial
with PyTorch's out-of-memory text and ``memory.cap`` and ``memory.requested``, as the helper
reports it; one that the device cannot give (the fake's free memory) fails the same way within
its cap. CAP_RECORD=PATH appends ``{"number", "mem", "cap", "outcome", "env"}`` per trial
(``env``: its SWEEPD_MEMORY_CAP and XLA_PYTHON_CLIENT_* variables).
"""

import json
import os
import socket
import sys
import time

MIB, GIB = 1 << 20, 1 << 30
UNITS = {"K": 1 << 10, "M": MIB, "G": GIB, "T": 1 << 40}

SOCK = socket.socket(fileno=int(os.environ["SWEEPD_FD"]))
READER = SOCK.makefile("rb")
ONESHOT = os.environ.get("SWEEPD_MODE") == "oneshot"
STATE = os.environ.get("FAKE_NVML_STATE")
DEVICE = int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0)
PID = os.getpid()


def size(text):
    text = str(text).strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(float(text))


CONTEXT = size(os.environ.get("CAP_CONTEXT", "256M"))
STEPS = int(os.environ.get("CAP_STEPS", "4"))
HOLD_S = float(os.environ.get("CAP_HOLD_S", "0.3"))


def send(msg):
    SOCK.sendall(json.dumps(msg).encode() + b"\n")


def hold(total):
    """The process holds `total` bytes on its device from now on."""
    if not STATE:
        return
    fd = os.open(STATE, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, ("proc %d %d %d\n" % (DEVICE, PID, total)).encode())
    finally:
        os.close(fd)


def device_free():
    """The device's free bytes as the fake NVML counts them (its total less every proc)."""
    total, procs = None, {}
    with open(STATE) as f:
        for line in f:
            w = line.split()
            if len(w) >= 3 and w[0] == "gpu" and int(w[1]) == DEVICE:
                total = size(w[2])
            elif len(w) == 4 and w[0] == "proc" and int(w[1]) == DEVICE:
                procs[int(w[2])] = int(w[3]) if w[3].isdigit() else size(w[3])
    return max(0, (total or 0) - sum(procs.values())), total or 0


def oom_text(tried, reserved, free, total):
    g = float(GIB)
    return (
        "CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of %.2f GiB "
        "of which %.2f GiB is free. Including non-PyTorch memory, this process has %.2f GiB "
        "memory in use. Of the allocated memory %.2f GiB is allocated by PyTorch, and 0.00 GiB "
        "is reserved by PyTorch but unallocated."
        % (tried / g, total / g, free / g, (reserved + CONTEXT) / g, reserved / g)
    )


def record(number, mem, cap, outcome):
    path = os.environ.get("CAP_RECORD")
    if not path:
        return
    env = {k: v for k, v in os.environ.items()
           if k == "SWEEPD_MEMORY_CAP" or k.startswith("XLA_PYTHON_CLIENT_")}
    line = json.dumps({"number": number, "mem": mem, "cap": cap, "outcome": outcome,
                       "env": env})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def run_trial(trial_id, number, params, cap):
    mem = int(params["mem"]) * MIB
    step = -(-mem // STEPS)
    reserved = 0
    time.sleep(float(params.get("delay", 0.0)))
    for _ in range(STEPS):
        want = min(step, mem - reserved)
        free, total = device_free() if STATE else (1 << 50, 1 << 50)
        if (cap is not None and reserved + want > cap) or want > free:
            memory = {"peak_reserved": reserved, "reserved": reserved, "requested": want}
            if cap is not None:
                memory["cap"] = cap
            send({"type": "error", "trial_id": trial_id, "exc_type": "torch.OutOfMemoryError",
                  "message": oom_text(want, reserved, free, total), "traceback": "",
                  "memory": memory})
            hold(CONTEXT)
            record(number, params["mem"], cap, "cap" if want <= free else "oom")
            return
        reserved += want
        hold(CONTEXT + reserved)
        send({"type": "memory", "trial_id": trial_id, "reserved": reserved,
              "peak_reserved": reserved, "context": CONTEXT})
        time.sleep(0.05)
    time.sleep(float(params.get("hold", HOLD_S)))
    hold(CONTEXT)
    record(number, params["mem"], cap, "complete")
    value = float(params.get("x", 0.0))
    if ONESHOT:
        with open(os.environ["SWEEPD_RESULT_FILE"], "w") as f:
            f.write(repr(value))
    send({"type": "result", "trial_id": trial_id, "value": value,
          "memory": {"peak_reserved": reserved, "reserved": 0}})


def main():
    hold(CONTEXT)
    if ONESHOT:
        cap = os.environ.get("SWEEPD_MEMORY_CAP")
        run_trial(int(os.environ["SWEEPD_TRIAL_ID"]), int(os.environ["SWEEPD_TRIAL_NUMBER"]),
                  json.loads(os.environ["SWEEPD_PARAMS"]), int(cap) if cap else None)
        return
    send({"type": "ready", "pid": PID, "protocol": 2,
          "memory": {"framework": "sim", "context": CONTEXT}})
    while True:
        line = READER.readline()
        if not line:
            return
        msg = json.loads(line)
        if msg.get("type") == "shutdown":
            return
        if msg.get("type") == "trial":
            run_trial(msg["trial_id"], msg["number"], msg["params"], msg.get("memory_cap"))


if __name__ == "__main__":
    try:
        main()
    finally:
        hold(0)
    sys.exit(0)
