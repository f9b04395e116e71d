"""peer.py: the two ends of tests/rdmavm's failure checks.

  peer.py streamer listen|connect ADDR PORT
      Sends a pattern without pause and reads one-byte commands:
        K  SIGKILL itself (mid-transfer)
        X  stop sending and exit(3) with the connection open (a server
           that exits)
        C  the peer is about to cut the wire: keep sending, and print how
           long after C the first error came ("result=ERRNO after=S")
  peer.py watcher listen|connect ADDR PORT CMD [BOUND] [CUT-COMMAND]
      Reads 1 MiB, sends CMD, then reads until end of file or an error,
      printing "result=EOF|ECONNRESET|...|TIMEOUT after=S" (S: seconds after
      CMD was sent). Gives up after BOUND seconds (default 60). With
      CUT-COMMAND, runs it (a shell command) right after sending CMD.

"listen" accepts one connection on ADDR:PORT (printing "listening"); the
exit status is 0 when a result was printed."""
import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def connection(how, addr, port):
    if how == "listen":
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, int(port)))
        ls.listen(8)
        print("listening", flush=True)
        c, _ = ls.accept()
        return c
    deadline = time.time() + 60
    while True:
        try:
            return socket.create_connection((addr, int(port)), timeout=60)
        except ConnectionRefusedError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def outcome(e):
    if isinstance(e, OSError) and e.errno:
        return errno.errorcode.get(e.errno, str(e.errno))
    return type(e).__name__


def streamer(c):
    c.settimeout(None)
    cut = []
    done = threading.Event()

    def send():
        chunk = bytes(range(256)) * 256
        try:
            while not done.is_set():
                c.sendall(chunk)
        except OSError as e:
            if cut:
                print(f"result={outcome(e)} after={time.monotonic() - cut[0]:.3f}", flush=True)
            done.set()

    t = threading.Thread(target=send, daemon=True)
    t.start()
    while not done.is_set():
        try:
            b = c.recv(1)
        except OSError as e:
            if cut:
                print(f"result={outcome(e)} after={time.monotonic() - cut[0]:.3f}", flush=True)
            break
        if b == b"K":
            os.kill(os.getpid(), signal.SIGKILL)
        elif b == b"X":
            # stop sending, then exit(3) with the connection open (atexit
            # handlers run, as when a C program returns from main)
            done.set()
            t.join(30)
            ctypes.CDLL(None).exit(0)
        elif b == b"C":
            cut.append(time.monotonic())
        elif not b:
            break
    done.set()
    t.join(120)
    return 0 if cut else 1


def watcher(c, cmd, bound, cutcmd):
    c.settimeout(bound)
    got = 0
    while got < 1 << 20:
        b = c.recv(65536)
        if not b:
            print("result=early-EOF after=0", flush=True)
            return 1
        got += len(b)
    c.sendall(cmd.encode())
    t0 = time.monotonic()
    if cutcmd:
        subprocess.run(cutcmd, shell=True, check=False)
    res = "TIMEOUT"
    while time.monotonic() - t0 < bound:
        try:
            if not c.recv(1 << 16):
                res = "EOF"
                break
        except socket.timeout:
            break
        except OSError as e:
            res = outcome(e)
            break
    print(f"result={res} after={time.monotonic() - t0:.3f} read={got}", flush=True)
    return 0


def main():
    role, how, addr, port = sys.argv[1:5]
    c = connection(how, addr, port)
    if role == "streamer":
        return streamer(c)
    bound = float(sys.argv[6]) if len(sys.argv) > 6 else 60.0
    cutcmd = sys.argv[7] if len(sys.argv) > 7 else ""
    return watcher(c, sys.argv[5], bound, cutcmd)


if __name__ == "__main__":
    sys.exit(main())
