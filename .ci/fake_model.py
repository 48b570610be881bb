#!/usr/bin/env python3
"""A fake OpenAI-compatible model server for `.ci/quickstart`: answers every
`POST …/chat/completions` with one fixed sentence (as JSON, or as server-sent events when the
request asks for a stream) and appends each request's `model` to a log file.

Usage: fake_model.py PORT LOG — listens on 127.0.0.1:PORT (0 picks a free port, printed on the
first line of stdout as `port N`).
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = "Hello from the quick start's fake model."


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        request = json.loads(body)
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(request.get("model", "") + "\n")
        usage = {"prompt_tokens": len(body) // 4, "completion_tokens": 9,
                 "total_tokens": len(body) // 4 + 9}
        message = {"role": "assistant", "content": ANSWER}
        if request.get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": message, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {"choices": [], "usage": usage},
            ]
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.reply("text/event-stream", data.encode())
        else:
            reply = {"id": "chatcmpl-quickstart", "object": "chat.completion",
                     "model": request.get("model"), "usage": usage,
                     "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
            self.reply("application/json", json.dumps(reply).encode())

    def reply(self, content_type, data):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    LOG = sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()
