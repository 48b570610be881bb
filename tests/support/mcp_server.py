#!/usr/bin/env python3
"""Fake MCP (Model Context Protocol, revision 2025-06-18) server for the integration tests.

Tests spawn it as a child process and point the MCP client at it:
  python3 tests/support/mcp_server.py [--http PORT_FILE] [--log LOG_FILE] [--tools N] [--name NAME]
                                      [--escape SECONDS]

* stdio (default): newline-delimited JSON-RPC 2.0 on stdin/stdout (stdout carries nothing else);
  exits 0 on stdin EOF. Each tools/call runs in its own thread: a `sleep` blocks nothing, and
  responses may come out of order (match them by id).
* --http PORT_FILE: streamable HTTP at http://127.0.0.1:<port>/mcp; the OS-chosen port is written
  atomically to PORT_FILE. `initialize` and every even-numbered request after it are answered as
  application/json, odd-numbered ones as a chunked text/event-stream whose one event is split
  across two chunks. GET gets 405, DELETE ends the session, bodies over 4 MB get 413.
* --log LOG_FILE: one JSON line per received message {"transport", "message", "headers" (http,
  lower-cased)}; undecodable input under "raw"; GET/DELETE under "http_method". First line:
  {"event": "start", "pid", "transport"}.
* --escape SECONDS: at start, runs `sleep SECONDS` in a session of its own (setsid), as a server
  that leaves helpers behind would; logged as {"event": "escaped", "pid"}.
* Tools: echo env add sleep crash (exit 3, no answer) fail image resource cwd, plus --tools N
  generated tool_0..tool_{N-1}. tools/list pages hold 25 tools.

As strict as a real server: only initialize/ping before initialize, arguments checked against the
input schema (-32602), no batches; HTTP requires Accept, Content-Type, the session id and (if sent)
MCP-Protocol-Version 2025-06-18. notifications/cancelled stops a `sleep` and drops its response.
Standard library only.
"""
import argparse, base64, json, os, secrets, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

PROTOCOL, PAGE_SIZE, MAX_BODY = "2025-06-18", 25, 4 * 1024 * 1024
PNG_1X1 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
           "rkJggg==")
ARGS = None
TOOLS, HANDLERS, SCHEMAS = [], {}, {}
LOG_LOCK, OUT_LOCK, PENDING_LOCK, SESSIONS_LOCK = (threading.Lock() for _ in range(4))
PENDING = {}   # (scope, json-encoded request id) -> Event, set by notifications/cancelled
SESSIONS = {}  # Mcp-Session-Id -> {"initialized": True, "requests": count after initialize}

def diag(*parts):
    print("fake-mcp:", *parts, file=sys.stderr, flush=True)

def log(entry):
    if ARGS.log:
        with LOG_LOCK, open(ARGS.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
            f.flush()

def dumps(obj):  # raw UTF-8 on the wire; json.dumps never emits a newline without indent
    return json.dumps(obj, ensure_ascii=False)

def loads(data):  # strict: UTF-8 only, no NaN/Infinity
    def reject(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(data.decode("utf-8"), parse_constant=reject)

def error(mid, code, message):
    return {"jsonrpc": "2.0", "id": mid, "error": {"code": code, "message": message}}

def result(mid, res):
    return {"jsonrpc": "2.0", "id": mid, "result": res}

def text(t, **extra):
    return {"content": [{"type": "text", "text": t}], **extra}

def schema(props, required=()):
    s = {"type": "object", "properties": {n: {"type": t, "description": d} for n, t, d in props}}
    return {**s, "required": list(required)} if required else s

def tool(name, description, props, required, handler, **extra):
    SCHEMAS[name], HANDLERS[name] = schema(props, required), handler
    TOOLS.append({"name": name, "description": description, "inputSchema": SCHEMAS[name], **extra})

VERBS = "List Search Fetch Summarize Archive Count Export Inspect".split()
NOUNS = ("open issues|pull requests|calendar events|support tickets|log entries|invoices|build "
         "artifacts|customer records|deployment jobs|wiki pages|chat messages").split("|")
SCOPES = ("in a repository|for the given project|across the workspace|from a shared folder|on "
          "the current account").split("|")
QUALS = ("newest first, with labels and assignees|filtered by status and owner|sorted by the "
         "time of their last update|including metadata and links|grouped by category with "
         "totals").split("|")
POOL = [("query", "string", "Free-text search terms matched against titles and bodies."),
        ("limit", "integer", "Maximum number of results to return, from 1 to 100."),
        ("include_archived", "boolean", "Also include archived items in the results."),
        ("owner", "string", "Account or organisation that owns the items."),
        ("page", "integer", "1-based page number of the results to fetch."),
        ("verbose", "boolean", "Return full details instead of a short summary."),
        ("project", "string", "Identifier of the project to look in.")]

def build_tools(extra):
    tool("echo", "Echo the given text back.", [("text", "string", "what to echo")], ["text"],
         lambda a, ev: text("echo: " + a["text"]))
    tool("env", "Report an environment variable of the server process.",
         [("name", "string", "name of the environment variable")], ["name"],
         lambda a, ev: text(os.environ.get(a["name"], "<unset>")))
    tool("add", "Add two integers.", [("a", "integer", "first addend"),
                                      ("b", "integer", "second addend")], ["a", "b"],
         lambda a, ev: text(str(a["a"] + a["b"]), structuredContent={"sum": a["a"] + a["b"]}),
         outputSchema=schema([("sum", "integer", "a + b")], ["sum"]))
    tool("sleep", "Wait for the given seconds before answering.",
         [("seconds", "number", "how long to wait")], ["seconds"],
         lambda a, ev: None if ev.wait(max(0.0, a["seconds"])) else text("slept"))
    tool("crash", "Exit the server process at once.", [], [], lambda a, ev: os._exit(3))
    tool("fail", "Always fails.", [], [], lambda a, ev: text("it failed on purpose", isError=True))
    tool("image", "Return a small image.", [], [], lambda a, ev: {"content": [
        {"type": "text", "text": "a dot"},
        {"type": "image", "data": PNG_1X1, "mimeType": "image/png"}]})
    tool("resource", "Return an embedded resource.", [], [], lambda a, ev: {"content": [
        {"type": "resource", "resource": {"uri": "file:///notes/a.md", "mimeType": "text/markdown",
                                          "text": "# Note A"}}]})
    tool("cwd", "Report the server's working directory.", [], [], lambda a, ev: text(os.getcwd()))
    for i in range(extra):
        desc = (f"{VERBS[i % 8]} {NOUNS[(i + i // 8) % 11]} {SCOPES[i % 5]}, "
                f"{QUALS[(i // 5 + i // 40) % 5]}.")
        props = [POOL[(i + j) % len(POOL)] for j in range(2 + i % 3)]
        required = next(n for n, t, _ in props if t != "boolean")
        tool(f"tool_{i}", desc, props, [required], lambda a, ev, i=i: text(f"tool_{i} ok"))

CHECKS = {"string": lambda v: isinstance(v, str),
          "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "boolean": lambda v: isinstance(v, bool)}

def validate(sch, args):
    if not isinstance(args, dict):
        return "arguments must be an object"
    missing = [n for n in sch.get("required", []) if n not in args]
    if missing:
        return f"missing required argument '{missing[0]}'"
    for name, value in args.items():
        prop = sch["properties"].get(name)
        if prop and not CHECKS[prop["type"]](value):
            return f"argument '{name}' must be of type {prop['type']}"
    return None

def check_init(p):
    ci = p.get("clientInfo")
    if not isinstance(p.get("protocolVersion"), str) or not isinstance(p.get("capabilities"), dict):
        return "Invalid params: protocolVersion (string) and capabilities (object) are required"
    if not (isinstance(ci, dict) and isinstance(ci.get("name"), str)
            and isinstance(ci.get("version"), str)):
        return "Invalid params: clientInfo with string name and version is required"
    return None

def cursor_offset(cursor):
    try:
        kind, _, n = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        return int(n) if kind == "tools" and 0 < int(n) < len(TOOLS) else None
    except (ValueError, AttributeError, UnicodeError):
        return None

def valid_id(mid):
    return isinstance(mid, str) or (isinstance(mid, int) and not isinstance(mid, bool))

def dispatch(msg, scope, state):
    """Handle one parsed message; return the response object, or None when none is due."""
    if not isinstance(msg, dict):
        return error(None, -32600, "Invalid Request: expected a JSON-RPC object")
    mid, method, is_req = msg.get("id"), msg.get("method"), "id" in msg
    if msg.get("jsonrpc") != "2.0" or (is_req and not valid_id(mid)):
        return error(mid if valid_id(mid) else None, -32600,
                     'Invalid Request: needs jsonrpc "2.0" and a string or integer id')
    if method is None and is_req and ("result" in msg or "error" in msg):
        diag("ignoring a response from the client, id", mid)  # this server sends no requests
        return None
    if not isinstance(method, str):
        return error(mid if is_req else None, -32600, "Invalid Request: method must be a string")
    params = msg.get("params", {})
    if not isinstance(params, dict):
        return error(mid, -32602, "Invalid params: params must be an object") if is_req else None
    if not is_req:  # notifications: initialized, cancelled, anything else is ignored
        if method == "notifications/cancelled":
            with PENDING_LOCK:
                ev = PENDING.get((scope, json.dumps(params.get("requestId"))))
            if ev:
                ev.set()
        return None
    try:
        return request(mid, method, params, scope, state)
    except Exception as exc:  # a bug in the fake must still answer
        diag("internal error:", repr(exc))
        return error(mid, -32603, f"Internal error: {exc}")

def request(mid, method, params, scope, state):
    if method == "initialize":
        problem = check_init(params)
        if problem:
            return error(mid, -32602, problem)
        state["initialized"] = True
        return result(mid, {"protocolVersion": PROTOCOL,
                            "capabilities": {"tools": {"listChanged": False}},
                            "serverInfo": {"name": ARGS.name, "version": "1.0.0"}})
    if method == "ping":
        return result(mid, {})
    if not state.get("initialized"):
        return error(mid, -32600, "Invalid Request: server not initialized")
    if method == "tools/list":
        start = 0 if params.get("cursor") is None else cursor_offset(params["cursor"])
        if start is None:
            return error(mid, -32602, "Invalid params: unknown cursor")
        res = {"tools": TOOLS[start:start + PAGE_SIZE]}
        if start + PAGE_SIZE < len(TOOLS):
            cursor = f"tools:{start + PAGE_SIZE}".encode()  # opaque to the client
            res["nextCursor"] = base64.urlsafe_b64encode(cursor).decode()
        return result(mid, res)
    if method != "tools/call":
        return error(mid, -32601, "Method not found")
    name, args = params.get("name"), params.get("arguments", {})
    if not isinstance(name, str):
        return error(mid, -32602, "Invalid params: name (string) is required")
    if name not in HANDLERS:
        return error(mid, -32602, f"Unknown tool: {name}")
    problem = validate(SCHEMAS[name], args)
    if problem:
        return error(mid, -32602, f"Invalid arguments for tool {name}: {problem}")
    key, ev = (scope, json.dumps(mid)), threading.Event()
    with PENDING_LOCK:
        PENDING[key] = ev
    try:
        res = HANDLERS[name](args, ev)
    finally:
        with PENDING_LOCK:
            PENDING.pop(key, None)
    return None if res is None else result(mid, res)  # None: cancelled, so no response

def write_line(obj):
    data = (dumps(obj) + "\n").encode("utf-8")
    with OUT_LOCK:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

def run_stdio():
    state = {"initialized": False}
    def work(msg):
        resp = dispatch(msg, "stdio", state)
        if resp is not None:
            write_line(resp)
    for raw in sys.stdin.buffer:
        line = raw.strip()
        if not line:
            continue
        try:
            msg = loads(line)
        except ValueError:  # includes UnicodeDecodeError
            log({"transport": "stdio", "raw": line.decode("utf-8", "replace")})
            write_line(error(None, -32700, "Parse error"))
            continue
        log({"transport": "stdio", "message": msg})
        if isinstance(msg, dict) and msg.get("method") == "tools/call" and "id" in msg:
            threading.Thread(target=work, args=(msg,), daemon=True).start()
        else:
            work(msg)
    sys.exit(0)

class Handler(BaseHTTPRequestHandler):
    protocol_version, server_version = "HTTP/1.1", "fake-mcp/1.0"

    def log_message(self, fmt, *args):  # quiet: stderr is for the fake's own diagnostics
        pass

    def reply(self, status, body=b"", ctype=None, headers=()):
        self.send_response(status)
        for k, v in ([("Content-Type", ctype)] if ctype else []) + list(headers):
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def reply_json(self, status, obj, headers=()):
        self.reply(status, dumps(obj).encode("utf-8"), "application/json", headers)

    def reject(self, status, message, code=-32000, close=False):
        self.close_connection = self.close_connection or close
        self.reply_json(status, error(None, code, message))

    def reply_sse(self, obj):
        self.send_response(200)
        for k, v in (("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"),
                     ("Transfer-Encoding", "chunked")):
            self.send_header(k, v)
        self.end_headers()
        event = b"" if obj is None else b"event: message\ndata: " + dumps(obj).encode() + b"\n\n"
        half = len(event) // 2  # two chunks, two TCP writes: the client must reassemble them
        for part in (event[:half], event[half:]):
            if part:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
                time.sleep(0.01)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def headers_dict(self):
        return {k.lower(): v for k, v in self.headers.items()}

    def preamble(self, method):
        if method != "POST":
            log({"transport": "http", "http_method": method, "headers": self.headers_dict()})
        origin = self.headers.get("Origin")
        if urlsplit(self.path).path != "/mcp":
            self.reject(404, "Not Found", close=method == "POST")  # body left unread: close
        elif origin is not None and urlsplit(origin).hostname not in ("127.0.0.1", "localhost", "::1"):
            self.reject(403, "Forbidden: Origin not allowed", close=method == "POST")
        else:
            return True
        return False

    def session(self):
        sid = self.headers.get("Mcp-Session-Id")
        if sid is None:
            self.reject(400, "Bad Request: Mcp-Session-Id header is required")
            return None, None
        with SESSIONS_LOCK:
            state = SESSIONS.get(sid)
        if state is None:
            self.reject(404, "Session not found", code=-32001)
        return sid, state

    def read_body(self):  # an oversized body is drained, so the client does see the 413
        parts, total = [], 0
        def take(n):
            nonlocal total
            total += n
            while n > 0:
                data = self.rfile.read(min(n, 1 << 16))
                if not data:
                    raise ValueError("body cut short")
                n -= len(data)
                if total <= MAX_BODY:
                    parts.append(data)
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                while (size := int(self.rfile.readline().split(b";")[0].strip(), 16)) > 0:
                    take(size)
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
            else:
                take(int(self.headers.get("Content-Length") or 0))
        except ValueError:
            return self.reject(400, "Bad Request: malformed body framing", close=True)
        if total > MAX_BODY:
            return self.reject(413, "Payload Too Large: body over 4 MB", close=True)
        return b"".join(parts)

    def do_GET(self):
        if self.preamble("GET"):
            self.reply(405, headers=[("Allow", "POST, DELETE")])

    def do_DELETE(self):
        if self.preamble("DELETE"):
            sid, state = self.session()
            if state is not None:
                with SESSIONS_LOCK:
                    SESSIONS.pop(sid, None)
                self.reply(200)

    def do_POST(self):
        if not self.preamble("POST") or (body := self.read_body()) is None:
            return
        try:
            msg, bad = loads(body), False
            log({"transport": "http", "message": msg, "headers": self.headers_dict()})
        except ValueError:
            msg, bad = None, True
            log({"transport": "http", "raw": body.decode("utf-8", "replace"),
                 "headers": self.headers_dict()})
        accept = {p.split(";")[0].strip().lower() for p in self.headers.get("Accept", "").split(",")}
        if not {"application/json", "text/event-stream"} <= accept:
            return self.reject(406, "Not Acceptable: Accept must list application/json and "
                                    "text/event-stream")
        if self.headers.get("Content-Type", "").split(";")[0].strip().lower() != "application/json":
            return self.reject(415, "Unsupported Media Type: Content-Type must be application/json")
        if bad:
            return self.reply_json(400, error(None, -32700, "Parse error"))
        if isinstance(msg, list):
            return self.reply_json(400, error(None, -32600, "Invalid Request: batching is not "
                                                            "supported in " + PROTOCOL))
        if isinstance(msg, dict) and msg.get("method") == "initialize" and "id" in msg:
            resp, headers = dispatch(msg, "initialize", {}), []
            if "result" in resp:
                sid = secrets.token_hex(16)
                with SESSIONS_LOCK:
                    SESSIONS[sid] = {"initialized": True, "requests": 0}
                headers = [("Mcp-Session-Id", sid)]
            return self.reply_json(200, resp, headers)
        sid, state = self.session()
        if state is None:
            return
        version = self.headers.get("MCP-Protocol-Version")
        if version is not None and version != PROTOCOL:
            return self.reject(400, f"Bad Request: unsupported MCP-Protocol-Version: {version}")
        if not (isinstance(msg, dict) and "method" in msg and "id" in msg):
            resp = dispatch(msg, sid, state)  # notification or client response: nothing due
            return self.reply_json(400, resp) if resp is not None else self.reply(202)
        with SESSIONS_LOCK:
            state["requests"] += 1
            n = state["requests"]
        resp = dispatch(msg, sid, state)
        if n % 2 == 1 or resp is None:  # a cancelled request ends its stream with no event
            self.reply_sse(resp)
        else:
            self.reply_json(200, resp)

def run_http(port_file):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port, tmp = server.server_address[1], f"{port_file}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, port_file)
    diag(f"listening on http://127.0.0.1:{port}/mcp")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass

def main():
    global ARGS
    p = argparse.ArgumentParser(description="Fake MCP server for integration tests.")
    p.add_argument("--http", metavar="PORT_FILE", help="serve streamable HTTP instead of stdio")
    p.add_argument("--log", metavar="LOG_FILE", help="append every received message as JSON lines")
    p.add_argument("--tools", metavar="N", type=int, default=0, help="add tool_0..tool_{N-1}")
    p.add_argument("--name", default="fake", help="serverInfo.name")
    p.add_argument("--escape", metavar="SECONDS", help="leave `sleep SECONDS` running in its own session")
    ARGS = p.parse_args()
    build_tools(ARGS.tools)
    log({"event": "start", "pid": os.getpid(), "transport": "http" if ARGS.http else "stdio"})
    if ARGS.escape:
        import subprocess
        helper = subprocess.Popen(["sleep", ARGS.escape], start_new_session=True, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log({"event": "escaped", "pid": helper.pid})
    run_http(ARGS.http) if ARGS.http else run_stdio()

if __name__ == "__main__":
    main()
