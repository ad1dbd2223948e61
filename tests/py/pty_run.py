"""Runs a command on a pseudo-terminal, as a person at a terminal would, and prints everything
it wrote to the screen (escape sequences included) on stdout.

usage: pty_run.py COLUMNS ROWS COMMAND [ARG...]

The command's stdin, stdout and stderr are the terminal, which is its controlling terminal.
Exits with the command's exit status (128 + N when it died of signal N).
"""

import fcntl
import os
import struct
import subprocess
import sys
import termios


def main():
    cols, rows = int(sys.argv[1]), int(sys.argv[2])
    argv = sys.argv[3:]
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    child = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        preexec_fn=controlling_terminal,
        close_fds=True,
    )
    os.close(slave)
    out = sys.stdout.buffer
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal's other side has closed it
            break
        if not chunk:
            break
        out.write(chunk)
        out.flush()
    code = child.wait()
    os.close(master)
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
