"""A small HTTP client for a vLLM server's sleep-mode and completions endpoints.

Every call carries a bounded timeout: a hung server fails the test instead of hanging it (#45326).
A session per call (nothing shared) so the client is safe to use from threads; the environment's proxies
never apply (raw).

The client reads behaviour, not one release's response shapes (0.24.0, 0.25.0 and 0.26.0 are
supported; tests/sleep_wake/fakes/unit/release_responses.py has each one's bodies): a 2xx answer with an
empty body where a release reports nothing is accepted, keys a release adds are ignored, and an
absent usage field reads None, never 0. What the suite needs stays an error whatever the release: a
non-2xx status (the oracle api.status), success=false, a non-bool is_sleeping, a missing sleep gauge or
token_ids.

No answer is never an oracle's verdict on its own: a call taken and not answered raises
liveness.NoAnswer, a non-2xx answer of a server whose /health is then not 200 liveness.EngineDead
(liveness.py); only a live server's answer fails api.status.
"""

import contextlib
import dataclasses
import json
import time

import requests
import urllib3

from tests.core import liveness, metrics, oracle, thresholds
from tests.core.prompts import GOLDEN_MAX_TOKENS
from tools.launcher.gpu_lease import ALLOCATE, EXCLUSIVE, FREE, RELEASE
from tools.launcher.phase_plugin.sleepwake_memory_phase import CALLS as SERVER_BRACKETED_CALLS


class ServerResponseError(RuntimeError):
    """A non-2xx answer (or a malformed body) from the server."""

    def __init__(self, message: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status = status
        self.body = body


@dataclasses.dataclass
class Completion:
    token_ids: list  # per choice: list[int]
    logprobs: list | None  # per choice: list[float] (sampled token's logprob), None if not asked
    finish_reasons: list  # per choice
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens
    text: list  # per choice
    raw: dict


@dataclasses.dataclass
class StreamResult:
    finish_reasons: list  # per choice index; None where the stream ended without one
    token_ids: list  # per choice: list[int] received so far
    num_tokens: int  # tokens received over all choices
    error: str | None  # error event, HTTP status, or transport failure; None if clean
    timed_out: bool = False  # the server stopped sending within the timeout (a hang)
    status: int | None = None
    seconds: float = 0.0
    transport: bool = False  # the connection failed or broke off: no answer of the server at all
    cut: bool = False  # the server closed the stream without [DONE]
    # time.perf_counter() when each event carrying tokens was read: whether tokens still came after a
    # moment, such as the /sleep a request raced against was sent (background.race_outcome)
    arrivals: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class EngineState:
    """Both sleep flags read back to back: /is_sleeping and the vllm:engine_sleep_state gauge."""

    is_sleeping: bool
    gauge: dict


def _tags_params(tags):
    return [("tags", t) for t in tags] if tags else []


class SleepWakeClient:
    def __init__(
        self,
        url: str,
        timeout_s: float = 60.0,
        memory_phase=None,
        phases_in_server: bool = False,
        start_step_beside=None,
    ):
        """memory_phase(kind, what) -> context manager: the server's VllmServer.memory_phase, which
        orders this server's memory phases against its GPU neighbours' (tools/launcher/gpu_lease.py;
        what names the call in the GPU's phase trace); None when the server has its GPU to itself.
        phases_in_server: the server's worker takes the phase around its own sleeps, wakes and reloads
        (VllmServer.brackets_calls), so such a call holds none here and a FREE sleep_window is not needed;
        an exclusive window is still taken here, and covers the worker's calls inside it, and so is the
        phase of memory the worker's bracket does not see (allocation, release, pushes).
        start_step_beside() -> bool: whether a GPU neighbour is in a start step now (the server's
        neighbour_in_start_step); None when the server has no neighbours."""
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._memory_phase = memory_phase or (lambda kind, what: contextlib.nullcontext())
        self.phases_in_server = phases_in_server
        self._holding: str | None = None  # the kind of the window held, if any
        self._version: str | None = None
        # Seconds of the last sleep or wake_up call's HTTP round trip alone, inside its memory phase: what
        # vLLM took, without the wait for the phase behind GPU neighbours (the latency oracles read it).
        self.last_call_s: float | None = None
        # Whether a GPU neighbour was in a start step when that call began or ended: the latency oracles
        # judge such samples against bounds of their own (oracle.bounded_median). A start step lasts
        # several times longer than a call, so one seldom begins and ends unseen inside a call
        # (docs/design.md).
        self._start_step_beside = start_step_beside or (lambda: False)
        self.last_call_beside_start: bool | None = None

    @contextlib.contextmanager
    def sleep_window(self, exclusive: bool = False):
        """Holds a memory phase for the whole block, so a sleep sent inside it lands at once instead of
        queueing behind a neighbour's start: for tests that race /sleep against requests already
        decoding (the requests would finish while the sleep waited). A FREE phase by default, which
        only neighbours' allocations wait for; exclusive=True for a block that also wakes or reads
        device-wide memory, which nothing on the GPU may overlap. A FREE window is nothing when the
        server brackets its calls: the sleep's pause lands at once, and only the executor's own sleep
        waits for the phase, inside the server."""
        if self.phases_in_server and not exclusive and not self._holding:
            yield
            return
        if self._holding:
            if exclusive and self._holding != EXCLUSIVE:
                raise RuntimeError("an exclusive sleep_window inside a FREE one: open the exclusive one first")
            yield
            return
        kind = EXCLUSIVE if exclusive else FREE
        with self._memory_phase(kind, "window"):
            self._holding = kind
            try:
                yield
            finally:
                self._holding = None

    def _phase(self, kind: str, what: str, in_server: bool = True):
        """The memory phase around a call that moves device memory. in_server: the server's worker brackets
        the call itself where phases_in_server (its sleeps, wakes and reloads: phase_plugin CALLS); memory
        nothing inside the server brackets (an RL trainer's tensors, a push into the weights) is phased here."""
        if self._holding == EXCLUSIVE or self._holding == kind:
            return contextlib.nullcontext()
        if in_server and self.phases_in_server and not self._holding:
            return contextlib.nullcontext()
        if self._holding and kind != RELEASE:  # freeing overlaps a FREE window
            # A wake allocates: inside a FREE window it could land in a neighbour's sleep.
            raise RuntimeError(
                "a %s call inside a %s sleep_window: use sleep_window(exclusive=True)" % (kind, self._holding)
            )
        return self._memory_phase(kind, what)

    # --- transport ---------------------------------------------------------------------------
    def raw(self, method: str, path: str, **kw) -> requests.Response:
        """One request with the client's timeout unless `timeout` is given (for misuse tests)."""
        kw.setdefault("timeout", self.timeout_s)
        # A session of its own, as requests.request makes, that ignores the environment: an http_proxy
        # there must not route calls to a loopback server elsewhere (the launcher's /health poll ignores
        # it too), and reading the environment for proxies took a third of each call's CPU
        # (docs/design.md).
        with requests.Session() as session:
            session.trust_env = False
            return session.request(method, self.url + path, **kw)

    def _answer(self, method: str, path: str, **kw) -> requests.Response:
        """raw(), where a call the server took and never answered raises liveness.NoAnswer: a hang (#45326;
        #45520's dead engine) or an overloaded host, which no oracle can tell apart. A refused connection
        is no answer at all and propagates as requests' own exception."""
        try:
            return self.raw(method, path, **kw)
        except requests.ReadTimeout:
            raise liveness.NoAnswer(
                f"{method} {path}: no answer within {kw.get('timeout', self.timeout_s):g} s "
                "(a hang, or a host too loaded to answer: proves nothing)"
            ) from None

    def _ok(self, method: str, path: str, **kw) -> requests.Response:
        """The answer of a call that must succeed: a live server answering anything but 2xx fails the
        oracle api.status; one whose engine then reads dead (/health not 200: vLLM answers 5xx to every
        call once its engine died) raises liveness.EngineDead."""
        resp = self._answer(method, path, **kw)
        if not 200 <= resp.status_code < 300:
            what = f"{method} {path} answered HTTP {resp.status_code}: {resp.text[:300]}"
            self.confirm_live(what, dead_liveness="api.status")
            oracle.fail("api.status", f"{method} {path}", f"HTTP {resp.status_code}: {resp.text[:300]}", "2xx", "")
        return resp

    def confirm_live(self, what: str, dead_liveness: str = "server.healthy") -> None:
        """Returns when GET /health answers 200 within the client's bound; else raises the liveness.Errored
        that says what the server is (dead engine, no answer, unreachable), `what` leading its message.
        Called before an oracle judges a hang or an error answer: those count only on a live server."""
        liveness.confirm(self.url, self.timeout_s, what, dead_liveness)

    def check_stream(self, result: "StreamResult", what: str) -> None:
        """Raises what a stream's trouble stands for when it is no answer of a live server: a broken
        connection (liveness.Unreachable), a cut stream or an error status on a server that is not live
        (confirm_live), and a stream silent past its timeout (liveness.NoAnswer, on a live server too: a
        hang and an overloaded host look the same). Returns when the stream's end is a live server's own
        answer, for the oracles."""
        if result.transport:
            raise liveness.Unreachable(f"{what}: {result.error}")
        if result.status is not None and result.status != 200:
            self.confirm_live(f"{what}: {result.error}", dead_liveness="api.status")
        if result.timed_out or result.cut:
            self.confirm_live(f"{what}: {result.error}")
        if result.timed_out:
            raise liveness.NoAnswer(f"{what}: {result.error}, on a live server (a hang, or a host too loaded)")

    def _json(self, method: str, path: str, **kw) -> dict:
        body = self._json_or_empty(method, path, **kw)
        if body is None:
            raise ServerResponseError(f"{method} {path}: empty body where a JSON object was expected")
        return body

    def _json_or_empty(self, method: str, path: str, **kw) -> dict | None:
        """The JSON object of a 2xx answer, or None for an empty one (a release that reports nothing)."""
        resp = self._ok(method, path, **kw)
        if not resp.content.strip():
            return None
        try:
            body = resp.json()
        except ValueError:
            raise ServerResponseError(
                f"{method} {path}: body is not JSON: {resp.text[:500]!r}", resp.status_code, resp.text
            ) from None
        if not isinstance(body, dict):
            raise ServerResponseError(
                f"{method} {path}: expected a JSON object, got {resp.text[:500]!r}", resp.status_code, resp.text
            )
        return body

    # --- sleep API ---------------------------------------------------------------------------
    def sleep(
        self, level: int | str = 1, mode: str | None = None, check: bool = True, memory_moves: bool | None = None
    ) -> requests.Response:
        """POST /sleep. A sleep that unmaps memory holds a FREE memory phase (here, or in the server's
        worker when it brackets its calls), which no neighbour's allocation overlaps (vLLM's own check in
        Worker.sleep reads the device-wide free bytes before and after); one that moves none does not
        wait for it: level 0 only pauses scheduling, and a sleep while the executor already sleeps is a
        no-op for it (memory_moves=False, from a caller that knows the state)."""
        params = {"level": str(level)}
        if mode is not None:
            params["mode"] = mode
        if memory_moves is None:
            memory_moves = str(level) != "0"
        with self._phase(FREE, "sleep") if memory_moves else contextlib.nullcontext():
            return self._timed_call((self._ok if check else self._answer), "POST", "/sleep", params=params)

    def wake_up(
        self, tags: list[str] | None = None, check: bool = True, memory_moves: bool = True
    ) -> requests.Response:
        """POST /wake_up. A wake that maps memory holds an ALLOCATE phase (here or in the worker; it could
        break a neighbour's sleep check); memory_moves=False, from a caller that knows the state, for one
        that maps nothing: a wake while awake or paused at level 0, of tags already resident, of a tag
        that is no pool."""
        with self._phase(ALLOCATE, "wake") if memory_moves else contextlib.nullcontext():
            return self._timed_call(
                (self._ok if check else self._answer), "POST", "/wake_up", params=_tags_params(tags)
            )

    def _timed_call(self, call, *args, **kwargs):
        beside = self._start_step_beside()
        begin = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            self.last_call_s = time.perf_counter() - begin
            self.last_call_beside_start = beside or self._start_step_beside()

    def is_sleeping(self) -> bool:
        body = self._json("GET", "/is_sleeping")
        value = body.get("is_sleeping")
        if not isinstance(value, bool):
            raise ServerResponseError(f"/is_sleeping: expected a bool 'is_sleeping', got {body!r}")
        return value

    def metrics_text(self) -> str:
        return self._ok("GET", "/metrics").text

    def sleep_state(self) -> dict[str, float]:
        return metrics.sleep_state(self.metrics_text())

    def state(self) -> EngineState:
        return EngineState(self.is_sleeping(), self.sleep_state())

    def load(self) -> int:
        body = self._json("GET", "/load")
        if "server_load" not in body:
            raise ServerResponseError(f"/load: no 'server_load' in {body!r}")
        return int(body["server_load"])

    def reload_weights(self, weights_path: str | None = None) -> dict:
        """collective_rpc reload_weights: the checkpoint the server was last loaded from, or the
        checkpoint directory weights_path, which the workers then keep as their model path (vLLM 0.26.0
        v1/worker/gpu_model_runner.py GPUModelRunner.reload_weights sets model_config.model to it; MRV2
        calls the same method). The path must be absolute: the workers resolve it in their own cwd.
        Returns {"results": [one per worker]}, or {} when the server answers an empty 200 (every release
        does when collective_rpc returns None)."""
        body: dict[str, object] = {"method": "reload_weights"}
        if weights_path is not None:
            body["kwargs"] = {"weights_path": weights_path}
        with self._phase(ALLOCATE, "reload"):
            return self._json_or_empty("POST", "/collective_rpc", json=body) or {}

    def allocation(self, what: str):
        """An ALLOCATE memory phase for GPU memory that a process beside the server takes (an RL trainer's
        tensors): it must not land inside a GPU neighbour's sleep, whose check reads device-wide bytes."""
        return self._phase(ALLOCATE, what, in_server=False)

    def release(self, what: str):
        """A RELEASE memory phase for GPU memory that a process beside the server frees (an RL trainer that
        exits): freeing breaks no sleep's check, but it must not land inside an exclusive window, which reads
        device-wide bytes."""
        return self._phase(RELEASE, what, in_server=False)

    def collective_rpc(self, method: str, kwargs: dict | None = None, phase: str | None = ALLOCATE) -> list:
        """POST /collective_rpc {method, kwargs}: the workers' results, one per worker ([] for an empty 200).
        phase: the memory phase the call holds (ALLOCATE for one that maps or allocates, FREE for a worker's
        sleep, None for one that moves no memory)."""
        body: dict[str, object] = {"method": method}
        if kwargs:
            body["kwargs"] = kwargs
        in_server = method in SERVER_BRACKETED_CALLS
        with self._phase(phase, f"rpc {method}", in_server) if phase else contextlib.nullcontext():
            answer = self._json_or_empty("POST", "/collective_rpc", json=body) or {}
        results = answer.get("results", [])
        if not isinstance(results, list):
            raise ServerResponseError(f"/collective_rpc {method}: expected a list of results, got {answer!r}")
        return results

    def worker_sleep(self, level: int) -> list:
        """collective_rpc("sleep", level): the workers' own sleep, past the engine's pause and the executor's
        tag bookkeeping (verl's hybrid engine sleeps its rollout this way)."""
        return self.collective_rpc("sleep", {"level": level}, phase=FREE)

    def worker_wake_up(self, tags: list[str] | None = None) -> list:
        """collective_rpc("wake_up", tags): the workers' own wake, which the executor does not see."""
        return self.collective_rpc("wake_up", {"tags": tags} if tags is not None else None)

    def pause(self, mode: str = "abort", clear_cache: bool = True) -> dict:
        """POST /pause?mode=&clear_cache= (AsyncLLM.pause_generation): scheduling stops; abort ends the
        requests in flight, wait drains them, keep freezes them until /resume."""
        params = {"mode": mode, "clear_cache": "true" if clear_cache else "false"}
        return self._json("POST", "/pause", params=params)

    def resume(self) -> dict:
        """POST /resume (AsyncLLM.resume_generation)."""
        return self._json("POST", "/resume")

    def is_paused(self) -> bool:
        body = self._json("GET", "/is_paused")
        value = body.get("is_paused")
        if not isinstance(value, bool):
            raise ServerResponseError(f"/is_paused: expected a bool 'is_paused', got {body!r}")
        return value

    def load_weights_in_process(self, checkpoint: str) -> dict:
        """POST /load_weights {checkpoint}: the door host, which holds the engine in its own process (TRL
        colocate), hands the checkpoint's tensors to the model's load_weights as TRL's trainer does."""
        with self._phase(ALLOCATE, "load_weights", in_server=False):
            return self._json("POST", "/load_weights", json={"checkpoint": checkpoint})

    def weight_transfer(self, route: str, body: dict | None = None) -> dict:
        """POST /<route> of vLLM's native weight-transfer API (init_weight_transfer_engine,
        start_weight_update, update_weights, finish_weight_update)."""
        with self._phase(ALLOCATE, route, in_server=False):
            return self._json_or_empty("POST", f"/{route}", json=body or {}) or {}

    def wake_everything(self) -> None:
        """Back to awake from any state, after a test failed mid-way: each tag on its own, the weights
        first (a KV-cache-first wake after level 2 restores the model buffers into unmapped memory), then
        the scheduler. A wake of a tag that is not asleep is a no-op; a full wake while one tag is
        resident fails on every supported release (known divergence full_wake_remaps_resident_pool)."""
        for tags in (["weights"], ["kv_cache"], ["scheduling"]):
            self.wake_up(tags, check=False)

    def recover_from_level2(self) -> None:
        """vLLM's documented level-2 recovery: wake weights, reload them from the checkpoint, wake
        the KV cache. A plain wake leaves garbage weights (#29341, #54235)."""
        self.wake_up(["weights"])
        self.reload_weights()
        self.wake_up(["kv_cache"])

    def reset_prefix_cache(self, blocks_held: bool = False, reset_running_requests: bool = False) -> bool | None:
        """True when the server reports the reset done; None when it reports nothing (an empty 200:
        vLLM before 0.26.0 drops the engine's result). success=false fails api.reset_prefix_cache_result,
        unless blocks_held: a running request holds blocks (a level-0 keep froze it), so vLLM refuses and
        False is the answer to judge. reset_running_requests: preempt the running requests first
        (?reset_running_requests=true), so that the reset is never refused."""
        params = {"reset_running_requests": "true"} if reset_running_requests else None
        body = self._json_or_empty("POST", "/reset_prefix_cache", params=params)
        if body is None:
            return None
        success = body.get("success")
        if success is False and blocks_held:
            return False
        if success is False:
            # vLLM refuses while running requests hold blocks; the suite calls it only with none in flight.
            oracle.fail(
                "api.reset_prefix_cache_result", "POST /reset_prefix_cache with no request in flight", False, True
            )
        if success is not True:
            raise ServerResponseError(
                f'/reset_prefix_cache: expected {{"success": bool}} or an empty body, got {body!r}'
            )
        return True

    def version(self) -> str:
        """The vLLM release the server runs (GET /version, {"version": "0.26.0"} in every supported
        release); read once per client, since a server does not change its release."""
        if self._version is None:
            body = self._json("GET", "/version")
            value = body.get("version")
            if not isinstance(value, str) or not value:
                raise ServerResponseError(f"/version: expected a string 'version', got {body!r}")
            self._version = value
        return self._version

    def health(self) -> bool:
        """True on HTTP 200; False when the server answers otherwise, not at all or cannot be reached."""
        try:
            return self.health_status() == 200
        except (requests.RequestException, liveness.NoAnswer):
            return False

    def health_status(self) -> int:
        """GET /health's status code; no answer raises liveness.NoAnswer, a transport failure propagates."""
        return self._answer("GET", "/health").status_code

    # --- completions -------------------------------------------------------------------------
    def completion_body(
        self,
        prompt,
        max_tokens=GOLDEN_MAX_TOKENS,
        temperature=0.0,
        ignore_eos=True,
        logprobs=None,
        seed=None,
        n=1,
        stream=False,
        **extra,
    ) -> dict:
        body = {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
            "n": n,
            "return_token_ids": True,
            "stream": stream,
        }
        if logprobs is not None:
            body["logprobs"] = logprobs
        if seed is not None:
            body["seed"] = seed
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(extra)
        return body

    def complete(
        self,
        prompt,
        max_tokens=GOLDEN_MAX_TOKENS,
        temperature=0.0,
        ignore_eos=True,
        logprobs: int | None = None,
        seed=None,
        n=1,
        timeout_s=None,
        **extra,
    ) -> Completion:
        body = self.completion_body(prompt, max_tokens, temperature, ignore_eos, logprobs, seed, n, **extra)
        raw = self._json("POST", "/v1/completions", json=body, timeout=timeout_s or self.timeout_s)
        return parse_completion(raw, want_logprobs=logprobs is not None)

    def enqueue(self, prompt, max_tokens=GOLDEN_MAX_TOKENS, temperature=0.0, seed=None, n=1) -> list[str]:
        """POST /enqueue, the door host's vllm.LLM.enqueue (llm doors only): the ids of the request it added,
        answered at once; its output comes with wait_for_completion."""
        body = self.completion_body(prompt, max_tokens, temperature, True, None, seed, n)
        ids = self._json("POST", "/enqueue", json=body).get("request_ids")
        if not isinstance(ids, list) or len(ids) != 1:
            raise ServerResponseError(f"/enqueue: {ids!r} where one request id was expected")
        return ids

    def wait_for_completion(self, timeout_s=None) -> list[Completion]:
        """POST /wait_for_completion, the door host's vllm.LLM.wait_for_completion: the output of every
        request enqueued since the last call, in the order they were added, once all ended."""
        body = self._json("POST", "/wait_for_completion", timeout=timeout_s or self.timeout_s)
        return [parse_completion(o) for o in body.get("outputs", [])]

    def complete_stream(
        self,
        prompt,
        max_tokens=GOLDEN_MAX_TOKENS,
        temperature=0.0,
        ignore_eos=True,
        seed=None,
        n=1,
        timeout_s=None,
        **extra,
    ) -> StreamResult:
        """A streamed completion that never raises for server-side trouble: it reports it.

        timeout_s bounds both each read and the whole stream.
        """
        timeout_s = timeout_s or self.timeout_s
        body = self.completion_body(prompt, max_tokens, temperature, ignore_eos, None, seed, n, stream=True, **extra)
        result = StreamResult(finish_reasons=[None] * n, token_ids=[[] for _ in range(n)], num_tokens=0, error=None)
        start = time.monotonic()
        try:
            with self.raw("POST", "/v1/completions", json=body, stream=True, timeout=timeout_s) as resp:
                result.status = resp.status_code
                if resp.status_code != 200:
                    result.error = f"HTTP {resp.status_code}: {resp.text[:500]}"
                    return result
                for line in resp.iter_lines(decode_unicode=True):
                    if time.monotonic() - start > timeout_s:
                        result.timed_out = True
                        result.error = f"stream still open after {timeout_s:g} s"
                        return result
                    tokens = result.num_tokens
                    if _consume_sse_line(line, result):
                        break
                    if result.num_tokens > tokens:
                        result.arrivals.append(time.perf_counter())
                else:
                    if result.error is None:
                        result.cut, result.error = True, "stream closed without [DONE]"
        except requests.Timeout as e:
            result.timed_out, result.error = True, f"timeout after {timeout_s:g} s: {e}"
        except requests.RequestException as e:  # refused, reset, or broken off mid-stream
            if _read_timed_out(e):  # silent past the timeout while streaming: requests says ConnectionError
                result.timed_out, result.error = True, f"timeout after {timeout_s:g} s: {e}"
                return result
            result.transport, result.error = True, f"transport error: {e!r}"
        finally:
            result.seconds = time.monotonic() - start
        return result


def _read_timed_out(error: requests.RequestException) -> bool:
    """Whether a stream's failure is urllib3's read timeout, which requests raises from iter_lines as a
    ConnectionError (only a timeout before the answer starts is requests.Timeout)."""
    return any(isinstance(arg, urllib3.exceptions.ReadTimeoutError) for arg in error.args)


def _consume_sse_line(line: str, result: StreamResult) -> bool:
    """Fold one SSE line into result; True at [DONE]."""
    if not line or not line.startswith("data:"):
        return False
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return True
    event = json.loads(data)
    if "error" in event:
        result.error = f"error event: {event['error']}"
        return False
    for choice in event.get("choices", []):
        i = choice.get("index", 0)
        while i >= len(result.token_ids):
            result.token_ids.append([])
            result.finish_reasons.append(None)
        ids = choice.get("token_ids")
        if ids is None:  # counting text instead would misjudge how far a request got
            result.error = f"stream chunk without token_ids (was return_token_ids sent?): {choice!r}"
            return False
        result.token_ids[i].extend(ids)
        result.num_tokens += len(ids)
        if choice.get("finish_reason") is not None:
            result.finish_reasons[i] = choice["finish_reason"]
    return False


def parse_completion(raw: dict, want_logprobs: bool = False) -> Completion:
    """A Completion from a /v1/completions body requested with return_token_ids=true."""
    try:
        choices = sorted(raw["choices"], key=lambda c: c.get("index", 0))
        token_ids = []
        for c in choices:
            if c.get("token_ids") is None:
                raise ServerResponseError(f"choice {c.get('index')} has no token_ids: was return_token_ids sent? {c!r}")
            token_ids.append(list(c["token_ids"]))
        logprobs = None
        if want_logprobs:
            logprobs = [list((c.get("logprobs") or {}).get("token_logprobs") or []) for c in choices]
        details = (raw.get("usage") or {}).get("prompt_tokens_details") or {}
        return Completion(
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reasons=[c.get("finish_reason") for c in choices],
            cached_tokens=details.get("cached_tokens"),
            text=[c.get("text", "") for c in choices],
            raw=raw,
        )
    except (KeyError, TypeError) as e:
        raise ServerResponseError(f"malformed completion body ({e!r}): {json.dumps(raw)[:500]}") from None


def client_of(server, phases_in_server: bool | None = None) -> SleepWakeClient:
    """The client of a started server (VllmServer or a fake): its phases ordered by the server's
    memory_phase; phases_in_server defaults to whether the server's worker brackets its own calls
    (False: this client takes each call's phase itself, which covers the worker's)."""
    if phases_in_server is None:
        phases_in_server = getattr(server, "brackets_calls", False)
    return SleepWakeClient(
        server.url,
        timeout_s=thresholds.get("request_completion_s_max"),
        memory_phase=getattr(server, "memory_phase", None),
        phases_in_server=phases_in_server,
        start_step_beside=getattr(server, "neighbour_in_start_step", None),
    )
