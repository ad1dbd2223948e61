#!/usr/bin/env python3
"""A sweepd test worker that speaks the protocol by hand, to send what the helper never would.

Persistent or oneshot. Every trial sends the lines of SWEEPD_TEST_SEND, then its result (the
value 1.0), then the lines of SWEEPD_TEST_AFTER. All optional:

SWEEPD_TEST_SEND=PATH     protocol messages as raw JSON text, one a line, sent as written (so an
                          integer of any size, or any nesting, travels as it is), with the word
                          TRIAL_ID standing for the trial's id. After a `suggest` or a `report`
                          the worker waits for sweepd's answer.
SWEEPD_TEST_AFTER=PATH    the same, sent just after the trial's result (no answer awaited)
SWEEPD_TEST_RECORD=PATH   every message sweepd sends is appended as {"number": N, "msg": ...}
SWEEPD_TEST_GATE_DIR=DIR  trial N first waits until the file DIR/N exists
SWEEPD_TEST_BIG=WHAT:N,.. in trial N, WHAT is "result": a oneshot result file of 600 MB (sparse:
                          "1.0" and then NUL bytes), or "line": a protocol line of 600 MB (a
                          user_attr whose value never ends), sent before anything else
"""

import json
import os
import socket
import sys
import time

BIG_BYTES = 600 * 1024 * 1024

SOCK = socket.socket(fileno=int(os.environ["SWEEPD_FD"]))
READER = SOCK.makefile("rb")
ONESHOT = os.environ.get("SWEEPD_MODE") == "oneshot"


def lines(var):
    path = os.environ.get(var)
    if not path:
        return []
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def record(number, msg):
    path = os.environ.get("SWEEPD_TEST_RECORD")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps({"number": number, "msg": msg}) + "\n").encode())
    finally:
        os.close(fd)


def send_raw(text):
    SOCK.sendall(text.encode("utf-8") + b"\n")


def receive(number):
    """The next message from sweepd (recorded); None at end of file."""
    line = READER.readline()
    if not line:
        return None
    msg = json.loads(line)
    record(number, msg)
    return msg


def wait_gate(number):
    gates = os.environ.get("SWEEPD_TEST_GATE_DIR")
    while gates and not os.path.exists(os.path.join(gates, str(number))):
        time.sleep(0.02)


def big(number):
    for spec in os.environ.get("SWEEPD_TEST_BIG", "").split(","):
        what, _, at = spec.partition(":")
        if at and int(at) == number:
            return what
    return None


def run_trial(trial_id, number):
    wait_gate(number)
    if big(number) == "line":
        head = '{"type":"user_attr","trial_id":%d,"key":"k","value":"' % trial_id
        chunk = b"x" * (1 << 20)
        try:
            SOCK.sendall(head.encode())
            for _ in range(BIG_BYTES // len(chunk)):
                SOCK.sendall(chunk)
        except OSError:
            pass
        os._exit(0)
    for text in lines("SWEEPD_TEST_SEND"):
        text = text.replace("TRIAL_ID", str(trial_id))
        send_raw(text)
        kind = json.loads(text)["type"]
        answer = {"suggest": "param", "report": "prune"}.get(kind)
        while answer is not None:
            msg = receive(number)
            if msg is None:
                os._exit(0)
            if msg.get("type") == answer:
                break
    if ONESHOT:
        path = os.environ["SWEEPD_RESULT_FILE"]
        with open(path, "w") as f:
            f.write("1.0")
            if big(number) == "result":
                # Read from the file only when no result came over the channel.
                f.truncate(BIG_BYTES)
                return
    send_raw(json.dumps({"type": "result", "trial_id": trial_id, "value": 1.0}))
    for text in lines("SWEEPD_TEST_AFTER"):
        send_raw(text.replace("TRIAL_ID", str(trial_id)))


def main():
    if ONESHOT:
        run_trial(int(os.environ["SWEEPD_TRIAL_ID"]), int(os.environ["SWEEPD_TRIAL_NUMBER"]))
        return
    send_raw(json.dumps({"type": "ready", "pid": os.getpid(), "protocol": 2}))
    number = None
    while True:
        msg = receive(number)
        if msg is None or msg.get("type") == "shutdown":
            return
        if msg.get("type") == "trial":
            number = msg["number"]
            run_trial(msg["trial_id"], number)


if __name__ == "__main__":
    main()
    sys.exit(0)
