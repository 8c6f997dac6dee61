"""A tiny model server the serving tests deploy as a custom image.

It serves on $PORT and answers every call with JSON naming its deployment ($NAME), its
pid and what it received. MODE changes its behaviour: `exit` exits at once, `silent` never
listens, `sick` answers /health with 500. POST /admin/unready makes /ready answer 503 (and
/admin/ready undoes it); /crash exits the process (/crash-if/NAME only in deployment NAME); /stats counts the other calls; /close… answers, then closes the connection;
/status/NNN answers with status NNN. BURN=1 keeps one core busy from the start.
"""
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("MODE", "")
NAME = os.environ.get("NAME", "")
state = {"ready": True, "calls": 0}

if MODE == "exit":
    print("exiting as asked", flush=True)
    sys.exit(3)
if MODE == "silent":
    print("never listening", flush=True)
    time.sleep(3600)
if os.environ.get("BURN"):
    def burn():
        while True:
            pass
    threading.Thread(target=burn, daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        if self.path.startswith("/close"):
            # Ends the kept-alive connection after this answer.
            self.close_connection = True
            self.send_header("Connection", "close")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        digest, left = hashlib.sha256(), length
        while left:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
        path = self.path
        if path == "/health":
            return self.reply(500 if MODE == "sick" else 200, {"ok": MODE != "sick"})
        if path == "/ready":
            return self.reply(200 if state["ready"] else 503, {"ready": state["ready"]})
        if path == "/admin/unready":
            state["ready"] = False
            return self.reply(200, {})
        if path == "/admin/ready":
            state["ready"] = True
            return self.reply(200, {})
        if path == "/crash" or path == "/crash-if/" + NAME:
            os._exit(1)
        if path.startswith("/status/"):
            return self.reply(int(path[len("/status/"):]), {"status": path})
        if path == "/stats":
            return self.reply(200, {"calls": state["calls"]})
        state["calls"] += 1
        if path.startswith("/slow"):
            time.sleep(3)
        self.reply(200, {
            "name": NAME,
            "pid": os.getpid(),
            "method": self.command,
            "path": path,
            "body_len": length,
            "sha256": digest.hexdigest(),
            "authorization": self.headers.get("Authorization"),
        })

    do_GET = do_POST = do_PUT = do_DELETE = handle_any


if os.environ.get("IDLE_TIMEOUT"):
    # A kept-alive connection idle this long is closed, as servers with keep-alive timeouts do.
    Handler.timeout = float(os.environ["IDLE_TIMEOUT"])
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
