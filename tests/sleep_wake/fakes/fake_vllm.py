"""A fake vLLM HTTP server with vLLM 0.26.0's sleep-mode semantics, for CPU tests of the suite.

It models what the suite observes (vllm/v1/engine/core.py sleep/wake_up/is_sleeping,
vllm/v1/executor/abstract.py, AsyncLLM.wake_up's gauge write, the sleep router's int(level)):
  * sleep(level): pause scheduling (abort in-flight requests in mode=abort); level >= 1 puts both tags
    to sleep (a second sleep is a no-op) and clears the prefix cache; level 2 invalidates weights.
  * wake_up(tags): "scheduling" is dropped from tags; an unknown or already-awake tag is a no-op;
    scheduling resumes only once no tag is asleep. The gauge reads awake after any wake_up.
  * completions wait while scheduling is paused; garbage tokens after level 2 without reload.
Not a model of memory or timing beyond a byte count per resident tag.

`bugs` re-creates known defects so unit tests can show the suite catches them:
  "resume_on_partial_wake"  scheduling resumes after any wake (vLLM <= 0.23 behaviour, #44395)
  "gauge_tracks_tags"       the gauge keeps the sleep level until every tag is awake (the divergence
                            pinned in thresholds.KNOWN_DIVERGENCES fixed)
"""

import hashlib
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.sleep_wake.lib import metrics

GiB = 1 << 30
CONTEXT_BYTES, WEIGHT_BYTES, KV_BYTES = 1 * GiB, GiB // 2, 2 * GiB
MAX_HOLD_S = 120.0  # a held request gives up after this, so a broken test cannot hang the fake


def _tokens(prompt: str, n: int, choice: int = 0, seed=None) -> list[int]:
    digest = hashlib.sha256(f"{prompt}|{choice}|{seed}".encode()).digest()
    return [(digest[i % len(digest)] * 7 + i) % 1000 + 10 for i in range(n)]


class FakeVllm:
    def __init__(self, token_delay_s: float = 0.0, bugs=()):
        self.token_delay_s = token_delay_s
        self.bugs = set(bugs)
        self.cond = threading.Condition()
        self.paused = False
        self.sleeping_tags: set[str] = set()
        self.weights_valid = True
        self.gauge = dict(metrics.GAUGE_AWAKE)
        self.load = 0
        self.abort_epoch = 0
        self.generated_tokens = 0  # vllm:generation_tokens_total
        self.prefix_cache: set[str] = set()
        self.requests: list[dict] = []   # every request seen: method, path, query, body
        self.hang_paths: set[str] = set()  # paths that never answer (until stop), for timeout tests
        self._stopping = threading.Event()
        self._httpd = None

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "FakeVllm":
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._stopping.set()
        with self.cond:
            self.cond.notify_all()
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- state (under self.cond) -------------------------------------------------------------
    @property
    def executor_sleeping(self) -> bool:
        return bool(self.sleeping_tags)

    def is_sleeping(self) -> bool:
        with self.cond:
            return self.paused or self.executor_sleeping

    def gpu_bytes(self) -> int:
        with self.cond:
            return (CONTEXT_BYTES + (0 if "weights" in self.sleeping_tags else WEIGHT_BYTES)
                    + (0 if "kv_cache" in self.sleeping_tags else KV_BYTES))

    def sleep(self, level: int, mode: str) -> None:
        with self.cond:
            if mode == "abort":
                self.abort_epoch += 1
            self.paused = True
            if level >= 1:
                self.prefix_cache.clear()
                if not self.executor_sleeping:
                    self.sleeping_tags = {"weights", "kv_cache"}
                    if level >= 2:
                        self.weights_valid = False
            self.gauge = metrics.gauge(0, level == 1, level == 2)
            self.cond.notify_all()

    def wake_up(self, tags) -> None:
        with self.cond:
            if tags is not None:
                tags = [t for t in tags if t != "scheduling"]
            if (tags is None or tags) and self.executor_sleeping:
                if tags is None:
                    self.sleeping_tags.clear()
                elif all(t in self.sleeping_tags for t in tags):
                    self.sleeping_tags -= set(tags)
            if not self.executor_sleeping or "resume_on_partial_wake" in self.bugs:
                self.paused = False
            if not self.executor_sleeping or "gauge_tracks_tags" not in self.bugs:
                self.gauge = dict(metrics.GAUGE_AWAKE)
            self.cond.notify_all()

    def metrics_text(self) -> str:
        with self.cond:
            lines = ["# HELP vllm:engine_sleep_state Engine sleep state",
                     "# TYPE vllm:engine_sleep_state gauge"]
            for k in metrics.SLEEP_STATE_LABELS:
                lines.append(f'vllm:engine_sleep_state{{engine="0",model_name="fake",sleep_state="{k}"}} '
                             f"{self.gauge[k]:.1f}")
            lines += ["# TYPE vllm:generation_tokens_total counter",
                      f'vllm:generation_tokens_total{{engine="0",model_name="fake"}} '
                      f"{float(self.generated_tokens)}",
                      "# TYPE vllm:num_requests_running gauge",
                      f'vllm:num_requests_running{{engine="0",model_name="fake"}} {float(self.load)}']
            return "\n".join(lines) + "\n"

    def wait_scheduled(self):
        """Block while scheduling is paused; the abort epoch the request runs in, None if aborted."""
        deadline = time.monotonic() + MAX_HOLD_S
        with self.cond:
            epoch = self.abort_epoch
            while self.paused and not self._stopping.is_set() and time.monotonic() < deadline:
                if self.abort_epoch != epoch:
                    return None
                self.cond.wait(0.05)
            return epoch if self.abort_epoch == epoch and not self.paused else None

    def emit(self, n: int, epoch: int) -> bool:
        """Count n generated tokens; False (nothing counted) if a sleep aborted the request's epoch."""
        with self.cond:
            if self.abort_epoch != epoch:
                return False
            self.generated_tokens += n
            return True

    def generate(self, prompt: str, max_tokens: int, choice: int, seed) -> list[int]:
        with self.cond:
            valid = self.weights_valid
        return _tokens(prompt, max_tokens, choice, seed) if valid else [0] * max_tokens


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeVllm

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, status: int, body=None, content_type="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str):
        self._send(status, {"error": {"message": message, "type": "BadRequestError", "code": status}})

    def _route(self, method: str):
        fake = self.server_fake
        parsed = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)  # as Starlette does
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        fake.requests.append({"method": method, "path": parsed.path, "query": query, "body": body})
        if parsed.path in fake.hang_paths:
            fake._stopping.wait(MAX_HOLD_S)
            return
        handler = ROUTES.get((method, parsed.path))
        if handler is None:
            return self._send(404, {"detail": "Not Found"})
        handler(self, fake, query, body)

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")


def _sleep(h, fake, query, body):
    try:
        level = int(query.get("level", ["1"])[0])
    except ValueError as e:  # the real router does int(level); ValueError maps to 400
        return h._error(400, str(e))
    fake.sleep(level, query.get("mode", ["abort"])[0])
    h._send(200)


def _wake_up(h, fake, query, body):
    fake.wake_up(query.get("tags") or None)
    h._send(200)


def _collective_rpc(h, fake, query, body):
    if not body or "method" not in body:
        return h._send(400, {"detail": "Missing 'method' in request body"})
    if body["method"] == "reload_weights":
        with fake.cond:
            if "weights" in fake.sleeping_tags:
                return h._send(500, {"error": {"message": "weights are asleep", "code": 500}})
            fake.weights_valid = True
    h._send(200, {"results": [None]})


def _reset_prefix_cache(h, fake, query, body):
    with fake.cond:
        fake.prefix_cache.clear()
    h._send(200, {"success": True})


def _completions(h, fake, query, body):
    n, temperature = body.get("n", 1), body.get("temperature")
    if n > 1 and not temperature:
        return h._error(400, "n must be 1 when using greedy sampling.")
    with fake.cond:
        fake.load += 1
    try:
        epoch = fake.wait_scheduled()
        scheduled = epoch is not None
        prompt, max_tokens = body["prompt"], body.get("max_tokens", 16)
        with fake.cond:
            cached = len(prompt.split()) if prompt in fake.prefix_cache else 0
            fake.prefix_cache.add(prompt)
        choices = []
        for i in range(n):
            ids = fake.generate(prompt, max_tokens, i, body.get("seed")) if scheduled else []
            choices.append({"index": i, "ids": ids, "finish": "length" if scheduled else "abort"})
        if body.get("stream"):
            return _stream(h, fake, choices, cached, epoch)
        if scheduled and not fake.emit(sum(len(c["ids"]) for c in choices), epoch):
            choices = [dict(c, ids=[], finish="abort") for c in choices]
        out = []
        for c in choices:
            choice = {"index": c["index"], "text": " ".join(f"w{t}" for t in c["ids"]),
                      "finish_reason": c["finish"],
                      "token_ids": c["ids"] if body.get("return_token_ids") else None}
            if body.get("logprobs") is not None:
                choice["logprobs"] = {"token_logprobs": [-0.01 * (t % 7) for t in c["ids"]]}
            out.append(choice)
        usage = {"prompt_tokens": len(prompt.split()), "prompt_tokens_details": {"cached_tokens": cached}}
        h._send(200, {"id": "cmpl-fake", "object": "text_completion", "choices": out, "usage": usage})
    finally:
        with fake.cond:
            fake.load -= 1


def _stream(h, fake, choices, cached, epoch):
    """One token per chunk (token_delay_s apart); a sleep in abort mode ends every choice with
    finish_reason "abort", as vLLM does for in-flight requests."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.end_headers()

    def send(index, ids, finish):
        chunk = {"choices": [{"index": index, "text": "".join(f"w{t}" for t in ids), "token_ids": ids,
                              "finish_reason": finish}]}
        h.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())

    for c in choices:
        finish = c["finish"]
        for j, t in enumerate(c["ids"]):
            if not fake.emit(1, epoch):
                finish = "abort"
                break
            send(c["index"], [t], finish if j == len(c["ids"]) - 1 else None)
            if fake.token_delay_s:
                time.sleep(fake.token_delay_s)  # simulated decode time
        if finish == "abort" or not c["ids"]:
            send(c["index"], [], finish)
    usage = {"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": cached}}}
    h.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    h.close_connection = True


ROUTES = {
    ("POST", "/sleep"): _sleep,
    ("POST", "/wake_up"): _wake_up,
    ("GET", "/is_sleeping"): lambda h, f, q, b: h._send(200, {"is_sleeping": f.is_sleeping()}),
    ("GET", "/metrics"): lambda h, f, q, b: h._send(200, f.metrics_text().encode(), "text/plain"),
    ("GET", "/load"): lambda h, f, q, b: h._send(200, {"server_load": f.load}),
    ("GET", "/health"): lambda h, f, q, b: h._send(200),
    ("POST", "/collective_rpc"): _collective_rpc,
    ("POST", "/reset_prefix_cache"): _reset_prefix_cache,
    ("POST", "/v1/completions"): _completions,
}
