#!/usr/bin/env python3
"""An HTTP trigger for an MQTT broker, for bench/sweep: `skewscope sweep`
asks for each broadcast with an HTTP request, and a broker has no HTTP.

    trigger.py BROKER_TCP_PORT TOPIC

Prints its own port, then on 127.0.0.1: GET /publish publishes one
450-byte message to TOPIC (QoS 0) through one MQTT 3.1.1 connection to the
broker on 127.0.0.1 kept open for the whole run (packets written here by
hand, MQTT 3.1.1 sections 3.1, 3.3 and 3.12), and answers 200 once the
broker has it in its socket.
"""

import http.server
import socket
import sys
import threading

PAYLOAD = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 8)[:450].encode()


def packet(first, body):
    out = bytearray([first])
    n = len(body)
    while True:
        b, n = n % 128, n // 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out) + body


def string(s):
    b = s.encode()
    return len(b).to_bytes(2, "big") + b


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    # CONNECT: protocol MQTT level 4, clean session, keep-alive 0 (none).
    s.sendall(packet(0x10, string("MQTT") + bytes([4, 0x02, 0, 0]) + string("skewscope-sweep-trigger")))
    connack = s.recv(4)
    if len(connack) != 4 or connack[0] != 0x20 or connack[3] != 0:
        sys.exit(f"the broker refused the trigger's CONNECT: {connack!r}")
    return s


def main():
    broker, topic = int(sys.argv[1]), sys.argv[2]
    conn = connect(broker)
    lock = threading.Lock()
    publish = packet(0x30, string(topic) + PAYLOAD)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/publish":
                self.send_error(404)
                return
            with lock:
                conn.sendall(publish)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
