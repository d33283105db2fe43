"""The engine behind FakeVllm: vLLM's sleep-mode state machine, the GPU bytes it holds, its decode
loop, and switches that re-create catalogued defects.

The state machine follows vLLM 0.26.0's source, which 0.24.0 and 0.25.0 share line for line
(v1/engine/core.py sleep/wake_up/is_sleeping, v1/executor/abstract.py sleep/wake_up,
v1/engine/async_llm.py's gauge writes):
  * sleep(level, mode): pause scheduling (mode abort ends in-flight requests); level >= 1 clears the
    prefix cache and puts both tags to sleep (a second sleep is a no-op); only level 1 keeps a copy of
    the weights, so any other level >= 2 (3 included) leaves garbage until reload_weights.
  * wake_up(tags): "scheduling" is dropped; the executor ignores the call when it is awake or when a
    tag is not asleep; scheduling resumes only once no tag is asleep (#44483). The gauge reads awake
    after every wake_up, partial or not (the divergence pinned in thresholds.KNOWN_DIVERGENCES).
  * GPU bytes of the server's process (what NVML reports per pid): a resident context, the CUDA-graph
    pool in graph mode (kept at level 1, #45648), the weights and KV-cache pools while their tag is
    awake, and in eager mode the activation blocks torch's caching allocator keeps after a forward
    (emptied by a sleep, reserved again by the next forward).
Timing: each decode step takes token_delay_s, so a sleep can land mid-decode.
"""

import dataclasses
import hashlib
import threading
import time

from tests.sleep_wake.lib import metrics

MiB = 1 << 20
MAX_HOLD_S = 120.0  # a held request gives up after this, so a broken test cannot hang the fake
BLOCK_TOKENS = 16  # vLLM caches only full KV blocks: a prompt shorter than one never hits the cache
SLOW_WAKE_S = 0.3  # slow_wake: above the 0.25 s wake_s_max on its own (the plugin's 2 s would cost 50 s a run)
LEAK_PER_WAKE = 64 * MiB  # leak_per_wake, as the plugin's torch.empty(64 << 20)
LOGPROB_SCALE_PER_WAKE = 1.25  # weights_perturbed, as the plugin's lm_head.mul_(1.25)
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."

# The defects the fake can re-create. The first group carries the names of the mutant catalogue
# (tests/mutants/plugin/sleepwake_mutants MUTANTS): the same bug, re-created here instead of patched
# into vLLM, judged by the same harness (tests/mutants/mutant_test.py). The rest exist only here.
DEFECTS = {
    "resume_on_partial_wake": "scheduling resumes after any wake (#44483 reverted, #44395)",
    "prefix_cache_kept": "sleep does not reset the prefix cache (#17103, #22726)",
    "reload_weights_noop": "reload_weights does nothing: level 2 wakes into garbage (#29341, #54235)",
    "leak_per_wake": "each wake of the executor leaks 64 MiB (#21336, #36651)",
    "kv_cache_kept_on_sleep": "sleep does not release the KV cache (#11743, #47654)",
    "is_sleeping_false_partial": "/is_sleeping is true only while both tags are asleep (#44483)",
    "gauge_not_updated": "/sleep does not write the sleep-state gauge",
    "slow_wake": f"each wake of the executor takes {SLOW_WAKE_S:g} s longer (#45648)",
    "weights_perturbed": "each weights wake scales logprobs by 1.25; greedy tokens unchanged (#21336)",
    "engine_dies_on_sleep_during_decode": (
        "/sleep during decode answers 200 and the engine is dead (#45520). The plugin kills the core 0.3 s "
        "after the sleep; the fake, whose requests are faster, kills it as the sleep returns, so that no "
        "test can finish inside the delay and miss the death"),
    "wake_awake_tag_aborts": "waking an awake executor fails the call (#31618)",
    "abort_leaves_choices_running": (
        "sleep?mode=abort never reports the end of an n>1 request's child choices (#45326). vLLM's stream "
        "then stays open until the client gives up (60 s in the suite); the fake ends it at [DONE] with "
        "the children's finish_reason missing, which the same oracle rejects at once"),
    "staged_wake_loses_weights": "from the third weights-only wake on, the weights are garbage (#21336)",
    "gauge_tracks_tags": ("the gauge keeps the sleep level until every tag is awake: the divergence "
                          "gauge_awake_while_partially_asleep fixed, which its pinning tests must notice"),
}


@dataclasses.dataclass(frozen=True)
class GpuMemory:
    """Bytes per pool. Defaults from the H200 run (README): 0.84 GB resident at level 1 in eager mode,
    ~0.1 GB more in graph mode, 354 MiB of activation blocks that eager mode does not get back on wake."""
    weights: int
    kv_cache: int
    context: int = 800 * MiB
    graph_pool: int = 0
    activations: int = 0
    device_other: int = 512 * MiB  # the rest of the device's used memory: driver, other processes

    @classmethod
    def for_mode(cls, weights: int, kv_cache: int, mode: str) -> "GpuMemory":
        if mode == "graph":
            return cls(weights, kv_cache, graph_pool=96 * MiB)
        return cls(weights, kv_cache, activations=354 * MiB)


def _tokens(prompt: str, n: int, choice: int, seed) -> list[int]:
    digest = hashlib.sha256(f"{prompt}|{choice}|{seed}".encode()).digest()
    return [(digest[i % len(digest)] * 7 + i) % 1000 + 10 for i in range(n)]


def _logprob(token: int) -> float:
    return -(0.1 + 0.05 * (token % 7))


@dataclasses.dataclass
class Choice:
    index: int
    planned: list  # the token ids this choice will generate
    token_ids: list = dataclasses.field(default_factory=list)
    logprobs: list = dataclasses.field(default_factory=list)
    finish_reason: str | None = None


class EngineDeadError(RuntimeError):
    pass


class FakeEngine:
    def __init__(self, memory: GpuMemory, token_delay_s: float = 0.0, defects=()):
        unknown = set(defects) - set(DEFECTS)
        if unknown:
            raise ValueError(f"unknown fake defects {sorted(unknown)}; known: {', '.join(sorted(DEFECTS))}")
        self.memory = memory
        self.token_delay_s = token_delay_s
        self.defects = frozenset(defects)
        self.cond = threading.Condition()
        self.paused = False
        self.sleeping_tags: set[str] = set()
        self.weights_valid = True
        self.gauge = dict(metrics.GAUGE_AWAKE)
        self.load = 0  # requests accepted and not finished (/load)
        self.running = 0  # requests being decoded (they hold KV blocks)
        self.abort_epoch = 0
        self.generated_tokens = 0  # vllm:generation_tokens_total
        self.prefix_cache: set[str] = set()
        self.activations_reserved = memory.activations > 0  # the start-up profile run did a forward
        self.leaked = 0
        self.weights_wakes = 0
        self.logprob_scale = 1.0
        self.dead = False
        self.stopping = threading.Event()

    # --- state ----------------------------------------------------------------------------------
    @property
    def executor_sleeping(self) -> bool:
        return bool(self.sleeping_tags)

    def _check_alive(self) -> None:
        if self.dead:
            raise EngineDeadError(ENGINE_DEAD)

    def is_sleeping(self) -> bool:
        with self.cond:
            self._check_alive()
            if "is_sleeping_false_partial" in self.defects:
                return self.sleeping_tags >= {"weights", "kv_cache"}
            return self.paused or self.executor_sleeping

    def gauge_values(self) -> dict:
        with self.cond:
            return dict(self.gauge)

    def gpu_bytes(self) -> int:
        m = self.memory
        with self.cond:
            kv_resident = "kv_cache" not in self.sleeping_tags or "kv_cache_kept_on_sleep" in self.defects
            return (m.context + m.graph_pool + self.leaked
                    + (0 if "weights" in self.sleeping_tags else m.weights)
                    + (m.kv_cache if kv_resident else 0)
                    + (m.activations if self.activations_reserved else 0))

    def device_used_bytes(self) -> int:
        return self.gpu_bytes() + self.memory.device_other

    # --- the sleep API ----------------------------------------------------------------------------
    def sleep(self, level: int, mode: str) -> None:
        with self.cond:
            self._check_alive()
            decoding = self.running > 0
            if mode == "abort":
                self.abort_epoch += 1
            self.paused = True
            if level >= 1:
                if "prefix_cache_kept" not in self.defects:
                    self.prefix_cache.clear()
                if not self.executor_sleeping:
                    self.sleeping_tags = {"weights", "kv_cache"}
                    self.activations_reserved = False  # sleep empties torch's caching allocator
                    if level != 1:
                        self.weights_valid = False
            if "gauge_not_updated" not in self.defects:
                self.gauge = metrics.gauge(0, level == 1, level == 2)
            if decoding and "engine_dies_on_sleep_during_decode" in self.defects:
                self.dead = True  # the sleep itself succeeded: /sleep still answers 200
            self.cond.notify_all()

    def wake_up(self, tags) -> None:
        with self.cond:
            self._check_alive()
            if tags is not None:
                tags = [t for t in tags if t != "scheduling"]
            woke = None
            if tags is None or tags:
                woke = self._executor_wake_up(tags)
        if woke and "slow_wake" in self.defects:
            time.sleep(SLOW_WAKE_S)  # simulated: the defect is the time itself
        with self.cond:
            if not self.executor_sleeping or "resume_on_partial_wake" in self.defects:
                self.paused = False
            if not self.executor_sleeping or "gauge_tracks_tags" not in self.defects:
                self.gauge = dict(metrics.GAUGE_AWAKE)
            self.cond.notify_all()

    def _executor_wake_up(self, tags) -> list | None:
        """executor/abstract.py wake_up; the tags the worker woke, None when it ignored the call."""
        if not self.executor_sleeping:
            if "wake_awake_tag_aborts" in self.defects:
                raise RuntimeError("wake_up called while awake")
            return None
        if tags and any(t not in self.sleeping_tags for t in tags):
            return None
        woken = list(tags) if tags else sorted(self.sleeping_tags)
        self.sleeping_tags -= set(woken)
        if "leak_per_wake" in self.defects:
            self.leaked += LEAK_PER_WAKE
        if "weights" in woken:
            if "weights_perturbed" in self.defects:
                self.logprob_scale *= LOGPROB_SCALE_PER_WAKE
            if tags == ["weights"]:
                self.weights_wakes += 1
                if "staged_wake_loses_weights" in self.defects and self.weights_wakes >= 3:
                    self.weights_valid = False
        return woken

    def reload_weights(self) -> None:
        with self.cond:
            self._check_alive()
            if "weights" in self.sleeping_tags:
                raise RuntimeError("reload_weights while the weights are asleep: their memory is unmapped")
            if "reload_weights_noop" not in self.defects:
                self.weights_valid = True

    def reset_prefix_cache(self) -> bool:
        """False while running requests hold blocks (0.26.0's documented success=false)."""
        with self.cond:
            self._check_alive()
            if self.running:
                return False
            self.prefix_cache.clear()
            return True

    # --- requests -------------------------------------------------------------------------------
    def accept(self) -> int:
        """A request arrives: counted in /load; returns the abort epoch it belongs to."""
        with self.cond:
            self._check_alive()
            self.load += 1
            return self.abort_epoch

    def finish(self) -> None:
        with self.cond:
            self.load -= 1

    def wait_scheduled(self, epoch: int) -> bool:
        """Block while scheduling is paused; False if a sleep aborted the request (or it gave up)."""
        deadline = time.monotonic() + MAX_HOLD_S
        with self.cond:
            while (self.paused and not self.dead and not self.stopping.is_set()
                   and time.monotonic() < deadline):
                if self.abort_epoch != epoch:
                    return False
                self.cond.wait(0.05)
            self._check_alive()
            if self.abort_epoch != epoch or self.paused:
                return False
            self.running += 1
            return True

    def prefill(self, prompt: str) -> tuple[int, int]:
        """(prompt tokens, of which served from the prefix cache) for a scheduled request."""
        words = len(prompt.split())
        with self.cond:
            cached = (words // BLOCK_TOKENS) * BLOCK_TOKENS if prompt in self.prefix_cache else 0
            self.prefix_cache.add(prompt)
            self.activations_reserved = self.memory.activations > 0
        return words, cached

    def plan(self, prompt: str, max_tokens: int, n: int, seed) -> list[Choice]:
        with self.cond:
            valid = self.weights_valid
        return [Choice(i, _tokens(prompt, max_tokens, i, seed) if valid else [0] * max_tokens)
                for i in range(n)]

    def decode_step(self, choices: list[Choice], epoch: int) -> list[tuple[Choice, list]]:
        """One token for every unfinished choice, as one engine step; [(choice, new ids)].

        A sleep in abort mode ends every unfinished choice with "abort"; EngineDeadError once the
        engine has died."""
        if self.token_delay_s:
            time.sleep(self.token_delay_s)  # simulated decode time: lets a sleep land mid-decode
        out = []
        with self.cond:
            self._check_alive()
            aborted = self.abort_epoch != epoch
            for c in choices:
                if c.finish_reason is not None:
                    continue
                if aborted:
                    c.finish_reason = "abort"
                    out.append((c, []))
                    continue
                token = c.planned[len(c.token_ids)]
                c.token_ids.append(token)
                c.logprobs.append(_logprob(token) * self.logprob_scale)
                self.generated_tokens += 1
                if len(c.token_ids) == len(c.planned):
                    c.finish_reason = "length"
                out.append((c, [token]))
        return out

    def end_decode(self) -> None:
        with self.cond:
            self.running -= 1
