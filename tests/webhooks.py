"""A real webhook receiver on loopback, and the Standard Webhooks check of what it got: drop
`whsec_`, base64-decode the rest as the HMAC key, HMAC-SHA256 over `<id>.<timestamp>.<body>`,
base64, compare in constant time with each `v1,` entry of `webhook-signature` (as the reference
libraries verify one)."""

import base64
import hashlib
import hmac
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A threaded HTTP server on loopback that records every request. `answers` are the status
    codes to give, in order (then 200); `hang` makes it hold every answer until released."""

    def __init__(self, answers: list[int] | None = None, hang: bool = False) -> None:
        self.requests: list[dict] = []
        self.answers = list(answers or [])
        self.release = threading.Event()
        if not hang:
            self.release.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                        "at": time.time(),
                    }
                )
                receiver.release.wait(20)
                code = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "Receiver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def verify(secret: str, headers: dict, body: bytes) -> bool:
    """Standard Webhooks verification, as the reference libraries do it."""
    msg_id, stamp = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(stamp)) > 300:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(
        hmac.new(key, msg_id.encode() + b"." + stamp.encode() + b"." + body, hashlib.sha256).digest()
    ).decode()
    for entry in headers["webhook-signature"].split(" "):
        version, _, sig = entry.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return True
    return False
