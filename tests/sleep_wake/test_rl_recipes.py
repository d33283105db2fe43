"""RL frameworks' weight-update sequences, each reproduced call for call through the front door that
framework holds, and judged by the suite's oracles: the pushed checkpoint's own golden (token ids and
logprobs, long prompts included, so a prefix block computed with the old weights cannot pass), the sleep
flags and gauge after every call, the server's device bytes in the state the sequence leaves, and how
each request frozen across the update ends.

Each test names its framework's call site (repository, commit, file and lines: read on the snapshots its
docstring gives) and runs only in the cells of its door (the through_door marker; a cell of another door
deselects it). What a sequence meets in vLLM that its documentation does not say is pinned per release in
lib/thresholds.py KNOWN_DIVERGENCES and checked here.

The pushes are the suite's stand-ins for each framework's transport (lib/pushes.py): TRL's tensors into
the model's load_weights in the engine's own process; CUDA-IPC handles from a trainer process for verl,
NeMo-RL, OpenRLHF and SkyRL (verl and NeMo-RL send the handles over ZMQ, OpenRLHF and SkyRL through
collective_rpc; the receiving worker rebuilds them and calls model.load_weights either way).
"""

from __future__ import annotations

import os

import pytest

from tests.core import expect, goldens, measure, memory, metrics, oracle, pushes, servers, thresholds
from tests.core.background import background, generated_tokens, wait_decoding
from tests.core.prompts import CHECKPOINT_GOLDEN_PROMPTS, LONG_PROMPTS, PROMPTS
from tests.core.walk import model
from tools.launcher import door_host
from tools.launcher.config import resolve_model

HTTP, ASYNC_LLM, COLOCATE = "http", "async_llm", "llm_colocate"
SYNC_PROMPTS = CHECKPOINT_GOLDEN_PROMPTS
# A request frozen across an update: long enough to be mid-decode for the whole pause.
FROZEN_MAX_TOKENS = 256
ALL_TAGS = frozenset(model.TAGS)


# --- fixtures ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def checkpoint_b() -> str:
    value = os.environ.get("SLEEPWAKE_MODEL_B", "")
    if not value:
        pytest.fail("SLEEPWAKE_MODEL_B is unset: the matrix sets it to checkpoint B's config.json (tools/defs.bzl)")
    return resolve_model(value)


@pytest.fixture(scope="class")
def checkpoint_a(server) -> str:
    return resolve_model(server.config.model)


@pytest.fixture(scope="class")
def golden_b(cell, checkpoint_b) -> dict:
    path = os.environ.get("SLEEPWAKE_GOLDEN_B", "")
    if not path:
        pytest.fail("SLEEPWAKE_GOLDEN_B is unset: the matrix sets it to checkpoint B's golden on this cell")
    return goldens.read(
        path,
        runner=cell.runner,
        mode=cell.mode,
        identity=servers.identity(),
        checkpoint=goldens.checkpoint_name(checkpoint_b),
        prompts=SYNC_PROMPTS,
    )


@pytest.fixture(scope="class")
def golden_a(client, golden) -> dict:
    return {**golden, **expect.take_golden(client, LONG_PROMPTS)}


@pytest.fixture(scope="class")
def sizes(server, client, checkpoint_a) -> model.Sizes:
    """The server's bytes awake (after a forward), its checkpoint's and its KV cache's: what the walk's
    device bands are relative to (walk/model.py device_band)."""
    client.complete(PROMPTS[0])
    return model.Sizes(
        awake_bytes=memory.settled_gpu_bytes(server, "awake, before the recipe"),
        weights_bytes=memory.checkpoint_tensor_bytes(checkpoint_a),
        kv_bytes=server.config.kv_cache_bytes,
    )


@pytest.fixture(scope="class")
def trainer(client):
    trainer = servers.trainer_class()(client)
    yield trainer
    trainer.close()


@pytest.fixture
def recipe(request, server, client, cell, recorder, sizes, golden_a, golden_b, checkpoint_a, checkpoint_b, trainer):
    steps = Recipe(server, client, cell, recorder, sizes, golden_a, golden_b, checkpoint_a, checkpoint_b, trainer)
    steps.expect_goldens_differ()
    yield steps
    # A recipe that failed half-way must not hand a sleeping server, or B's weights, to the next one.
    if client.health():
        client.wake_everything()
        if door_host.cannot(cell.door, "pause") is None and client.is_paused():
            client.resume()
        client.reload_weights(checkpoint_a)
        client.reset_prefix_cache()


class Recipe:
    """The steps every recipe is made of, each followed by the oracles that judge it."""

    def __init__(self, server, client, cell, recorder, sizes, golden_a, golden_b, checkpoint_a, checkpoint_b, trainer):
        self.server, self.client, self.cell, self.recorder, self.sizes = server, client, cell, recorder, sizes
        self.golden = {"A": golden_a, "B": golden_b}
        self.checkpoint = {"A": checkpoint_a, "B": checkpoint_b}
        self.trainer = trainer
        self.issue = ""

    def expect_goldens_differ(self) -> None:
        same = [p for p in SYNC_PROMPTS if self.golden["A"][p].token_ids == self.golden["B"][p].token_ids]
        if same:
            raise oracle.Precondition(
                f"checkpoints A and B give the same greedy tokens for {same}: a push that changed nothing would pass"
            )

    # --- state --------------------------------------------------------------------------------------------
    def flags(self, sleeping: bool, gauge: dict, step: str) -> None:
        expect.state(self.client, sleeping=sleeping, gauge=gauge, step=step, issue=self.issue)

    def bytes_in(self, asleep_tags: frozenset, level: int | None, step: str) -> None:
        """The server's device bytes are those of a server whose pools `asleep_tags` are unmapped after a
        sleep of `level` (the walk's bands: walk/model.py device_band)."""
        state = model.State(
            level=level if asleep_tags else None,
            asleep_tags=asleep_tags,
            pause=model.PAUSE_NEW if asleep_tags else None,
            gauge_level=level if asleep_tags else None,
            weights="A" if level != 2 or model.WEIGHTS not in asleep_tags else None,
        )
        band = model.device_band(state, self.sizes, self.cell.id)
        seen = memory.settled_gpu_bytes(
            self.server, f"after {step}", done=lambda b: not band.violations(b), recorder=self.recorder
        )
        with oracle.together():
            for bound in band.violations(seen):
                oracle.fail(
                    bound.oracle,
                    f"[{self.issue}] device bytes after {step} ({bound.what}; awake {self.sizes.awake_bytes})",
                    seen,
                    bound.value,
                    bound.relation,
                )

    def serves(self, checkpoint: str, step: str, oracle_id: str | None = None) -> None:
        """Every prompt, long ones included, regenerates `checkpoint`'s golden with its logprobs."""
        expect.golden_with_logprobs(
            self.client,
            self.recorder,
            self.golden[checkpoint],
            SYNC_PROMPTS,
            self.cell.id,
            step=step,
            issue=self.issue,
            oracle_id=oracle_id or model.golden_oracle(checkpoint),
        )

    def fill_prefix_cache(self) -> None:
        """Cache the long prompts' blocks, computed with the weights serving now: a later hit on them after an
        update would serve the old weights' KV, which the goldens then catch."""
        for prompt in LONG_PROMPTS:
            self.client.complete(prompt)

    def cached_tokens(self, step: str) -> int:
        """The prefix-cache hit of a repeat of the first long prompt (fill_prefix_cache cached it), recorded."""
        hit = self.client.complete(LONG_PROMPTS[0]).cached_tokens or 0
        self.recorder.record(measure.current_test(), "cached_tokens_repeat", hit, "tokens", step=step)
        return hit

    # --- calls --------------------------------------------------------------------------------------------
    def sleep(self, level: int, step: str) -> None:
        self.client.sleep(level=level)
        expect.asleep(self.client, level, step=step, issue=self.issue)

    def wake(self, tags: list[str] | None, step: str, asleep_after: frozenset, level: int) -> None:
        self.client.wake_up(tags)
        if asleep_after:
            expect.partially_asleep(self.client, step=step, issue=self.issue, level=level)
        else:
            expect.awake(self.client, step=step, issue=self.issue)

    def push(self, way: pushes.Push, checkpoint: str) -> None:
        way.push(self.client, self.checkpoint[checkpoint])

    def ipc(self) -> pushes.Push:
        return pushes.IpcPush(self.trainer)

    def stream(self, pool, prompt: str = PROMPTS[3]):
        """A request decoding now (proven by the generated-token count moving), its future."""
        bound = thresholds.get("request_completion_s_max")
        since = generated_tokens(self.client)
        future = pool.submit(
            self.client.complete_stream,
            prompt,
            FROZEN_MAX_TOKENS,
            timeout_s=thresholds.get("held_request_window_s") + 2 * bound,
        )
        wait_decoding(self.client, [future], 1, since, 8)
        return future

    def ends_by_length(self, future, step: str, oracle_id: str = "requests.resumes_after_keep"):
        result = expect.result(
            future, thresholds.get("request_completion_s_max"), client=self.client, step=step, issue=self.issue
        )
        self.client.check_stream(result, f"[{self.issue}] {step}")
        oracle.equal(
            oracle_id,
            (result.finish_reasons, len(result.token_ids[0])),
            (["length"], FROZEN_MAX_TOKENS),
            f"[{self.issue}] how the request frozen across the update ended ({step}): finish reasons, tokens",
        )
        return result


# --- the recipes ------------------------------------------------------------------------------------------
class TestRlRecipes:
    ENDS_SERVER = "the resume-while-asleep probe leaves the server unusable: it is the class's last test"

    @pytest.mark.through_door(COLOCATE)
    def test_trl_colocate(self, recipe):
        """TRL GRPO, vllm_mode="colocate" (huggingface/trl f2cd577, trl/generation/vllm_generation.py:334-370
        builds LLM(..., distributed_executor_backend="external_launcher") and sleeps at level 2; sync_weights
        444-501: wake_up(tags=["weights"]), each parameter through _push_param_to_vllm (387-392:
        llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights([(name, param)])),
        reset_prefix_cache() while the KV cache sleeps; generate 540-702: wake_up(tags=["kv_cache"]),
        generate, sleep(level=2)), as TRL PR #5313 fixes it: without the second weights wake and the
        reload_weights that revert the push (TRL #5312; the next test pins what TRL's head gets)."""
        recipe.issue = "TRL colocate"
        tensors = pushes.TensorLoad(COLOCATE)
        recipe.fill_prefix_cache()
        recipe.sleep(2, "LLM.sleep(level=2) after building the engine")
        recipe.bytes_in(ALL_TAGS, 2, "the level-2 sleep")
        for step, checkpoint in enumerate(("B", "A")):
            recipe.wake(["weights"], f"step {step}: wake_up(tags=[weights])", frozenset({model.KV_CACHE}), 2)
            recipe.bytes_in(frozenset({model.KV_CACHE}), 2, f"step {step}: the weights wake")
            recipe.push(tensors, checkpoint)
            recipe.client.reset_prefix_cache()
            recipe.wake(["kv_cache"], f"step {step}: wake_up(tags=[kv_cache])", frozenset(), 2)
            recipe.bytes_in(frozenset(), None, f"step {step}: the KV-cache wake")
            recipe.serves(checkpoint, f"step {step}: checkpoint {checkpoint} pushed as TRL colocate pushes it")
            recipe.sleep(2, f"step {step}: LLM.sleep(level=2) after generating")
        recipe.wake(["weights"], "wake weights", frozenset({model.KV_CACHE}), 2)
        recipe.push(tensors, "A")
        recipe.wake(["kv_cache"], "wake kv_cache", frozenset(), 2)

    @pytest.mark.through_door(COLOCATE)
    def test_trl_colocate_at_head_serves_the_disk_checkpoint(self, recipe):
        """TRL's head (f2cd577, vllm_generation.py:655-702) wakes the weights a second time in generate(), a
        no-op the executor only warns about (v1/executor/abstract.py wake_up: the tag is no longer asleep),
        then calls collective_rpc("reload_weights") as its work-around for vllm#29341: reload_weights without
        a path loads the model path, which a tensor push never moves (v1/worker/gpu_model_runner.py
        reload_weights), so the rollout is served by the checkpoint on disk (TRL #5312, open)."""
        recipe.issue = "TRL colocate at head (#5312)"
        recipe.sleep(2, "LLM.sleep(level=2)")
        recipe.wake(["weights"], "sync_weights: wake_up(tags=[weights])", frozenset({model.KV_CACHE}), 2)
        recipe.push(pushes.TensorLoad(COLOCATE), "B")
        recipe.client.reset_prefix_cache()
        recipe.client.wake_up(["weights"], memory_moves=False)  # generate(): the tag is awake already
        expect.partially_asleep(recipe.client, step="generate: wake_up(tags=[weights]) again", issue=recipe.issue)
        recipe.client.reload_weights()
        recipe.wake(["kv_cache"], "generate: wake_up(tags=[kv_cache])", frozenset(), 2)
        recipe.serves(
            "A",
            "TRL's head: tensors of B pushed, then reload_weights() without a path",
            oracle_id="weights.served_after_plain_reload",
        )

    @pytest.mark.through_door(COLOCATE)
    def test_in_process_engine_refuses_a_wait_sleep(self, recipe):
        """LLM.sleep(mode="wait") through the engine TRL builds in-process: refused before anything sleeps
        (pinned: llm_door_wait_mode_refused), and the engine goes on serving."""
        recipe.issue = "in-process wait sleep"
        pin = thresholds.divergence("llm_door_wait_mode_refused", recipe.client.version(), COLOCATE)
        answer = recipe.client.sleep(level=1, mode="wait", check=False)
        refused = "ValueError" if answer.status_code == 400 else None
        oracle.equal(
            "api.wait_mode",
            {"raised": refused, "is_sleeping": recipe.client.is_sleeping()},
            pin.expected,
            f"LLM.sleep(level=1, mode='wait') in-process answered HTTP {answer.status_code} {pin.describe()}",
        )
        if refused:
            expect.awake(recipe.client, step="the refused wait sleep", issue=recipe.issue)
            recipe.serves("A", "the refused wait sleep")

    @pytest.mark.through_door(COLOCATE)
    def test_nemo_rl_colocated_sync(self, recipe):
        """NeMo-RL, colocated sync engine (NVIDIA-NeMo/RL 7ea279a): vllm.LLM with the engine in the actor's
        process (nemo_rl/models/generation/vllm/vllm_worker.py:243 VLLM_ENABLE_V1_MULTIPROCESSING=0);
        finish_generation -> sleep() 1286-1312: reset_prefix_cache(), sleep(level=1); refit
        (nemo_rl/algorithms/grpo.py:2316-2419): wake_up(tags=["weights"]), collective_rpc(
        "update_weights_via_ipc_zmq") (vllm_backend.py:641-746: CUDA-IPC buffers rebuilt, then
        model_runner.model.load_weights), wake_up(tags=["kv_cache"])."""
        recipe.issue = "NeMo-RL colocated sync"
        for checkpoint in ("B", "A"):
            recipe.fill_prefix_cache()
            recipe.client.reset_prefix_cache()
            recipe.sleep(1, "finish_generation: sleep(level=1)")
            recipe.bytes_in(ALL_TAGS, 1, "the level-1 sleep")
            recipe.wake(["weights"], "refit: wake_up(tags=[weights])", frozenset({model.KV_CACHE}), 1)
            recipe.push(recipe.ipc(), checkpoint)
            recipe.wake(["kv_cache"], "refit: wake_up(tags=[kv_cache])", frozenset(), 1)
            recipe.serves(checkpoint, f"checkpoint {checkpoint} refit as NeMo-RL refits it")

    @pytest.mark.through_door(ASYNC_LLM)
    def test_verl_hybrid(self, recipe):
        """verl's hybrid engine (verl-project/verl 1dda039): AsyncLLM with its worker extension
        (verl/workers/rollout/vllm_rollout/vllm_async_server.py:302-327, 1100-1102); _sleep_hybrid
        1134: sleep(level=2); the driver (verl/workers/engine_workers.py:767-817) resumes tags=["weights"],
        which wakes them and resets the prefix cache (794), pushes through update_weights_from_ipc
        (vllm_rollout/utils.py:232-337: CUDA-IPC buckets into model.load_weights), clears the caches (826),
        then resumes tags=["kv_cache"] (wake, reset_prefix_cache)."""
        recipe.issue = "verl hybrid"
        for checkpoint in ("B", "A"):
            recipe.fill_prefix_cache()
            recipe.sleep(2, "release: sleep(level=2)")
            recipe.bytes_in(ALL_TAGS, 2, "the level-2 sleep")
            recipe.wake(["weights"], "resume(tags=[weights])", frozenset({model.KV_CACHE}), 2)
            recipe.client.reset_prefix_cache()
            recipe.push(recipe.ipc(), checkpoint)
            recipe.client.reset_prefix_cache()
            recipe.wake(["kv_cache"], "resume(tags=[kv_cache])", frozenset(), 2)
            recipe.client.reset_prefix_cache()
            recipe.serves(checkpoint, f"checkpoint {checkpoint} synced as verl's hybrid engine syncs it")

    @pytest.mark.through_door(ASYNC_LLM)
    def test_verl_worker_level_sleep(self, recipe):
        """verl before PR #6456 (volcengine/verl b178a3c, verl/workers/rollout/vllm_rollout/vllm_rollout.py
        131-143 and vllm_async_server.py:567-569, "Don't use engine.sleep(level=2) here"): the rollout
        sleeps and wakes at the workers, collective_rpc("sleep", level=2) and collective_rpc("wake_up",
        tags), past the engine's scheduler pause and the executor's tag bookkeeping. The engine then does
        not know it sleeps: /is_sleeping false and the gauge awake (v1/engine/core.py is_sleeping reads
        the scheduler and the executor only), while the device bytes are a level-2 sleep's."""
        recipe.issue = "verl worker-level sleep"
        recipe.client.worker_sleep(2)
        recipe.flags(False, metrics.GAUGE_AWAKE, "collective_rpc(sleep, level=2): the engine was not told")
        recipe.bytes_in(ALL_TAGS, 2, "the workers' level-2 sleep")
        recipe.client.worker_wake_up(["weights"])
        recipe.bytes_in(frozenset({model.KV_CACHE}), 2, "the workers' weights wake")
        recipe.push(recipe.ipc(), "B")
        recipe.client.reset_prefix_cache()
        recipe.client.worker_wake_up(["kv_cache"])
        recipe.flags(False, metrics.GAUGE_AWAKE, "collective_rpc(wake_up, kv_cache)")
        recipe.bytes_in(frozenset(), None, "the workers' KV-cache wake")
        recipe.serves("B", "checkpoint B pushed between the workers' own wakes")

    @pytest.mark.through_door(ASYNC_LLM)
    def test_verl_colocated(self, recipe):
        """verl's colocated rollout (vllm_async_server.py:815-826): sleep(level=1), then one wake of both
        tags, KV cache named first (wake_up(tags=["kv_cache", "weights"]), _get_wake_up_tags), then
        reset_prefix_cache: the weights come back from the level-1 host copy."""
        recipe.issue = "verl colocated"
        recipe.fill_prefix_cache()
        recipe.sleep(1, "sleep(level=1)")
        recipe.bytes_in(ALL_TAGS, 1, "the level-1 sleep")
        recipe.wake(["kv_cache", "weights"], "wake_up(tags=[kv_cache, weights])", frozenset(), 1)
        recipe.client.reset_prefix_cache()
        recipe.bytes_in(frozenset(), None, "the two-tag wake")
        recipe.serves("A", "a level-1 sleep and one wake of both tags")

    @pytest.mark.through_door(ASYNC_LLM)
    def test_openrlhf_hybrid(self, recipe):
        """OpenRLHF's hybrid engine (OpenRLHF/OpenRLHF 3c3be62): AsyncLLM with its WorkerWrap
        (openrlhf/trainer/ray/vllm_engine.py:242-282); after the rollout sleep(level=1); broadcast_to_vllm
        (ppo_trainer.py:300-316, ppo_actor.py:408-489): wake_up(tags=["weights"]), reset_prefix_cache(),
        then each parameter through update_weight_cuda_ipc (vllm_worker_wrap.py:32-70: the handle rebuilt,
        model_runner.model.load_weights); the next rollout wakes each tag on its own
        (vllm_engine.py wake_up: weights again, a no-op, then kv_cache)."""
        recipe.issue = "OpenRLHF hybrid"
        for checkpoint in ("B", "A"):
            recipe.fill_prefix_cache()
            recipe.sleep(1, "sleep(level=1)")
            recipe.wake(["weights"], "broadcast: wake_up(tags=[weights])", frozenset({model.KV_CACHE}), 1)
            recipe.client.reset_prefix_cache()
            recipe.push(recipe.ipc(), checkpoint)
            recipe.client.wake_up(["weights"], memory_moves=False)
            expect.partially_asleep(recipe.client, step="wake_up(tags=[weights]) again", issue=recipe.issue)
            recipe.wake(["kv_cache"], "wake_up(tags=[kv_cache])", frozenset(), 1)
            recipe.serves(checkpoint, f"checkpoint {checkpoint} broadcast as OpenRLHF's hybrid engine does")

    @pytest.mark.through_door(ASYNC_LLM)
    def test_openrlhf_partial_rollout(self, recipe):
        """OpenRLHF's async partial rollout (ppo_trainer_async.py:255-265): pause_generation(mode="keep")
        with requests decoding, the weights broadcast, resume_generation(). The pause's default
        clear_cache=True resets the caches once the engine is idle, which preempts the frozen requests and
        drops their KV (v1/engine/core.py EngineCoreProc.pause_scheduler, _reset_caches), so they re-run
        their prompt and tokens so far with the new weights after /resume and end by length."""
        recipe.issue = "OpenRLHF partial rollout"
        with background(recipe.client) as pool:
            with recipe.client.sleep_window():  # the pause must land while the request decodes
                frozen = recipe.stream(pool)
                recipe.client.pause(mode="keep")
            oracle.equal("flags.is_paused", recipe.client.is_paused(), True, "/is_paused after /pause?mode=keep")
            recipe.flags(True, metrics.GAUGE_AWAKE, "/pause?mode=keep (is_sleeping reads the scheduler's pause)")
            expect.held(
                "requests.held_while_paused",
                recipe.client,
                [frozen],
                thresholds.get("held_request_window_s"),
                f"[{recipe.issue}] the request frozen by /pause?mode=keep",
            )
            recipe.push(recipe.ipc(), "B")
            recipe.client.reset_prefix_cache()
            recipe.client.resume()
            oracle.equal("flags.is_paused", recipe.client.is_paused(), False, "/is_paused after /resume")
            recipe.ends_by_length(frozen, "resumed after the update")
        recipe.flags(False, metrics.GAUGE_AWAKE, "/resume")
        recipe.serves("B", "checkpoint B pushed while a rollout was paused")

    @pytest.mark.through_door(ASYNC_LLM)
    def test_nemo_rl_async_update_in_flight(self, recipe):
        """NeMo-RL's async GRPO with in-flight weight updates (nemo_rl/algorithms/async_utils/
        trajectory_collector.py:647-700): the weights are loaded while requests decode, without a pause
        or a sleep, then the prefix cache is invalidated (reset_prefix_cache, vllm_worker_async.py). A
        request in flight ends by length; what follows is the new checkpoint's."""
        recipe.issue = "NeMo-RL in-flight update"
        recipe.fill_prefix_cache()
        with background(recipe.client) as pool:
            flying = recipe.stream(pool)
            recipe.push(recipe.ipc(), "B")
            recipe.ends_by_length(flying, "the update landed mid-decode", oracle_id="output.finish_length")
        recipe.client.reset_prefix_cache()
        recipe.flags(False, metrics.GAUGE_AWAKE, "an update with a request in flight")
        recipe.serves("B", "checkpoint B loaded while a request decoded")

    @pytest.mark.through_door(HTTP)
    def test_skyrl_colocated(self, recipe):
        """SkyRL, colocated, over HTTP (NovaSky-AI/SkyRL a956457, skyrl/backends/skyrl_train/workers/
        worker_dispatch.py:629-711 and remote_inference_client.py): POST /sleep?level=2 after generating,
        /wake_up?tags=weights, /reset_prefix_cache, the CUDA-IPC update through its worker extension
        (new_inference_worker_wrap.py update_weights_ipc: handles rebuilt, model.load_weights),
        /wake_up?tags=kv_cache."""
        recipe.issue = "SkyRL colocated"
        for checkpoint in ("B", "A"):
            recipe.fill_prefix_cache()
            recipe.sleep(2, "POST /sleep?level=2")
            recipe.bytes_in(ALL_TAGS, 2, "the level-2 sleep")
            recipe.wake(["weights"], "POST /wake_up?tags=weights", frozenset({model.KV_CACHE}), 2)
            recipe.client.reset_prefix_cache()
            recipe.push(recipe.ipc(), checkpoint)
            recipe.wake(["kv_cache"], "POST /wake_up?tags=kv_cache", frozenset(), 2)
            recipe.bytes_in(frozenset(), None, "the KV-cache wake")
            recipe.serves(checkpoint, f"checkpoint {checkpoint} synced as SkyRL syncs a colocated engine")

    @pytest.mark.through_door(HTTP)
    def test_skyrl_fully_async(self, recipe):
        """SkyRL's fully async training (worker_dispatch.py:701-707): POST /pause?mode=keep&clear_cache=false
        with requests decoding, the weights updated, POST /resume. With clear_cache false the frozen requests
        keep their KV blocks and go on decoding over the old weights' KV after /resume: they end by length,
        and the requests that follow serve the new checkpoint. The pause keeps the prefix cache as a level-0
        pause does (EngineCoreProc.pause_scheduler resets the caches only with clear_cache), so a repeat after
        /resume hits as before it: the stale blocks SkyRL's own /reset_prefix_cache then drops."""
        recipe.issue = "SkyRL fully async"
        recipe.fill_prefix_cache()
        hit = recipe.cached_tokens("before /pause")
        if not hit:
            raise oracle.Precondition(
                "a repeat of a long prompt hit no cached token before /pause: the server must run "
                "--enable-prefix-caching and --enable-prompt-tokens-details"
            )
        with background(recipe.client) as pool:
            with recipe.client.sleep_window():
                frozen = recipe.stream(pool)
                recipe.client.pause(mode="keep", clear_cache=False)
            oracle.equal("flags.is_paused", recipe.client.is_paused(), True, "/is_paused after /pause")
            expect.held(
                "requests.held_while_paused",
                recipe.client,
                [frozen],
                thresholds.get("held_request_window_s"),
                f"[{recipe.issue}] the request frozen by /pause?mode=keep&clear_cache=false",
            )
            recipe.push(recipe.ipc(), "B")
            recipe.client.resume()
            oracle.equal("flags.is_paused", recipe.client.is_paused(), False, "/is_paused after /resume")
            oracle.equal(
                "prefix_cache.kept_at_level0",
                recipe.cached_tokens("after /resume"),
                hit,
                f"[{recipe.issue}] cached tokens of a repeat after /pause?mode=keep&clear_cache=false and /resume, "
                "against the repeat before the pause (clear_cache=false resets no cache)",
            )
            recipe.ends_by_length(frozen, "resumed on its own KV after the update")
        recipe.client.reset_prefix_cache()
        recipe.serves("B", "checkpoint B pushed while requests were frozen")

    @pytest.mark.through_door(HTTP, ASYNC_LLM)
    def test_resume_while_a_tag_sleeps(self, recipe):
        """/resume (AsyncLLM.resume_generation) after a level-1 sleep and a weights-only wake, the KV cache
        still asleep: EngineCore.resume_scheduler has no guard against a sleeping tag (v1/engine/core.py:852),
        so a request then runs a forward over the unmapped KV cache. Pinned per release
        (resume_while_kv_cache_asleep); the class's last test, since the server may not survive it."""
        recipe.issue = "resume while asleep"
        pin = thresholds.divergence("resume_while_kv_cache_asleep", recipe.client.version(), recipe.cell.door)
        recipe.sleep(1, "sleep(level=1)")
        recipe.wake(["weights"], "wake_up(tags=[weights])", frozenset({model.KV_CACHE}), 1)
        recipe.client.resume()
        observed = {"is_paused": recipe.client.is_paused(), "request": _outcome(recipe.client)}
        oracle.equal(
            "api.resume_while_asleep",
            observed,
            {k: pin.expected[k] for k in observed},
            f"/resume with the KV cache asleep, then a request {pin.describe()}",
        )


def _outcome(client) -> str:
    """How a request sent now ends within the held window: "held" (still pending), "served" (a
    completion), or "engine dead" (the server's /health no longer 200)."""
    window = thresholds.get("held_request_window_s")
    with background(client) as pool:
        future = pool.submit(client.complete, PROMPTS[0], timeout_s=window)
        try:
            future.result(timeout=window + thresholds.get("request_completion_s_max"))
        except Exception:  # noqa: BLE001  what ended it is read from the server below
            return "held" if client.health() else "engine dead"
        return "served"
