"""Acts on each notice of `skewscope-probe --act-notify udp:127.0.0.1:PORT`,
and answers it with the moment it acted, so the audit judges this app's own
actions.

Run: python3 act_reader.py 7000 (0: any free port; the first line says which).
"""
import json
import socket
import sys
import time

sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", int(sys.argv[1])))
print("listening on udp:%s:%d" % sock.getsockname(), flush=True)
while True:
    data, probe = sock.recvfrom(2048)
    notice = json.loads(data)
    acted = time.monotonic_ns()  # the app's action goes here; this is its moment
    after = (acted - notice["done_mono_ns"]) / 1e3  # the datagram's cost
    message = notice["seq"] if notice["seq"] is not None else notice["hash"]
    print(f"act now: message {message}, late {notice['late']}, {after:.0f} us after the timer", flush=True)
    sock.sendto(json.dumps({"notice": notice["notice"], "acted_mono_ns": acted}).encode(), probe)
