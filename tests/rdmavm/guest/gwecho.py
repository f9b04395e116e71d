"""gwecho.py: the two ends of tests/rdmavm's gateway check.

  gwecho.py server ADDR PORT
      Accepts one connection, echoes every byte until the client's FIN,
      then closes (prints "listening", then "echoed N").
  gwecho.py client ADDR PORT FILE
      Connects (prints "connected"), waits for a line on standard input
      (osfstat looks meanwhile), sends FILE from a thread while reading the
      echo, shuts down writing and prints "echo N SHA256-SENT SHA256-GOT"."""
import hashlib
import socket
import sys
import threading


def drain(s, each):
    """drain calls each with every block s delivers until its end; the count."""
    n = 0
    while True:
        b = s.recv(65536)
        if not b:
            return n
        each(b)
        n += len(b)


def server(addr, port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    print("listening", flush=True)
    c, _ = ls.accept()
    n = drain(c, c.sendall)
    c.close()
    print("echoed", n, flush=True)


def client(addr, port, path):
    data = open(path, "rb").read()
    s = socket.create_connection((addr, port), timeout=300)
    print("connected", flush=True)
    sys.stdin.readline()

    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=send)
    t.start()
    got = hashlib.sha256()
    n = drain(s, got.update)
    t.join()
    print("echo", n, hashlib.sha256(data).hexdigest(), got.hexdigest(), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]))
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4])
