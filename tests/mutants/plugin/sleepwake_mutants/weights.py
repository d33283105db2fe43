"""Mutants of the weights a server serves after sleeps, reloads and pushes of new weights
(vllm/v1/worker/gpu_worker.py Worker.sleep / wake_up / reload_weights of vLLM 0.26.0)."""

from .shared import Deferred, lm_head, replace, wrap

# The final RMSNorm's weight (all 1.0 in the synthetic checkpoint) scaled on its leading entries: greedy
# tokens stay, logprobs move. Sized against logprob_drift_max (a contract bound) at 1.5x, so a kill says
# the bound sees a drift just past it. NORM_SCALE = 250/256 is exact in bf16 (spacing 2^-8 below 1), and
# no single bf16 value over the whole vector lands in 1.4-1.6x (250/256 gives 2.1x, 251/256 1.7x, 252/256
# 1.3x), hence a share of the entries. The drift is computed, not measured: a float32 numpy forward of the
# seed-0 checkpoint (tools/checkpoints/reference_forward.py) over PROMPTS and their 16 greedy tokens,
#     python3 -m tools.checkpoints.make_synthetic_model --out_dir=/tmp/a --seed=0
#     python3 -m tests.mutants.norm_drift /tmp/a
# prints the worst per-token drift of these constants (the catalogue's expected value) and checks that
# every greedy token stays; --scale and --share size another perturbation.
NORM_SCALE = 1 - 6 * 2**-8
NORM_SCALED_SHARE = 3 / 4  # of the hidden size's entries, from the first


def scaled_entries(hidden_size: int) -> int:
    """How many leading entries of the final norm's weight the mutant scales by NORM_SCALE."""
    return round(hidden_size * NORM_SCALED_SHARE)


LATE_RESTORE_S = 1.0


def reload_weights_noop():
    from vllm.v1.worker.gpu_worker import Worker

    replace(Worker, "reload_weights", lambda self, *args, **kwargs: None)


def reload_ignores_weights_path():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def reload_weights(self, *args, **kwargs):
            kwargs.pop("weights_path", None)  # reloads the checkpoint the server started on
            return original(self, *args, **kwargs)

        return reload_weights

    wrap(Worker, "reload_weights", make)


def push_loads_wrong_file():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def reload_weights(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            if kwargs.get("weights_path") is not None:
                # A wrong file, the same every time: the pushed output projection with its rows rolled by
                # one, so greedy tokens change the same way at every push. A golden taken from this server
                # after a push agrees with itself; only an independent one tells.
                head = lm_head(self)
                head.copy_(head.roll(1, dims=0))
            return result

        return reload_weights

    wrap(Worker, "reload_weights", make)


def host_copy_predates_update():
    from vllm.v1.worker.gpu_worker import Worker

    def make_reload(original):
        def reload_weights(self, *args, **kwargs):
            if kwargs.get("weights_path") is not None:
                self._sleepwake_stale = lm_head(self).clone()  # the weights before the push
            return original(self, *args, **kwargs)

        return reload_weights

    def make_wake(original):
        def wake_up(self, tags=None):
            original(self, tags)
            stale = getattr(self, "_sleepwake_stale", None)
            if stale is not None and (tags is None or "weights" in tags):
                # Each wake restores the output projection as it was before the last push: a host
                # copy taken before the update. (After a level-2 wake the reload overwrites it.)
                lm_head(self).copy_(stale)

        return wake_up

    wrap(Worker, "reload_weights", make_reload)
    wrap(Worker, "wake_up", make_wake)


def weights_perturbed():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if tags is None or "weights" in tags:
                # What a slightly lossy weight restore looks like to a logprob consumer.
                weight = self.model_runner.model.model.norm.weight.data
                weight[: scaled_entries(weight.shape[0])].fill_(NORM_SCALE)

        return wake_up

    wrap(Worker, "wake_up", make)


def staged_wake_loses_weights():
    from vllm.v1.worker.gpu_worker import Worker

    calls = []

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if tags is not None and list(tags) == ["weights"]:
                calls.append(1)
                if len(calls) >= 3:
                    # From the third staged wake on, the restored weights are lost (zeroed, so the
                    # loss is certain rather than up to whatever the new pages held).
                    lm_head(self).zero_()

        return wake_up

    wrap(Worker, "wake_up", make)


def late_restore():
    from vllm.v1.worker.gpu_worker import Worker

    pending = Deferred(LATE_RESTORE_S)

    def make_sleep(original):
        def sleep(self, level=1):
            pending.flush()  # never write into a pool about to be unmapped
            self._sleepwake_level = level
            return original(self, level)

        return sleep

    def make_wake(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if getattr(self, "_sleepwake_level", None) == 1 and (tags is None or "weights" in tags):
                # /wake_up answers before the weights are back: the output projection holds zeros
                # until LATE_RESTORE_S later (level 1 only: at level 2 the reload brings them).
                weight = lm_head(self)
                saved = weight.clone()
                weight.zero_()
                pending.schedule(lambda: weight.copy_(saved))

        return wake_up

    wrap(Worker, "sleep", make_sleep)
    wrap(Worker, "wake_up", make_wake)


def wake_reloads_model_path():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if tags is None or "weights" in tags:
                # The woken weights are reloaded from the model path (TRL's work-around for #29341 moved
                # into the worker): a disk push moved that path, so it reloads what was pushed; a tensor or
                # IPC push never moves it, so each wake reverts to the checkpoint the server started on.
                self.model_runner.reload_weights()

        return wake_up

    wrap(Worker, "wake_up", make)


def push_skips_norms():
    from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM
    from vllm.v1.worker.gpu_worker import Worker

    started = []

    def make_load_model(original):
        def load_model(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            started.append(True)  # the start-up load is whole; every later one is a push or a reload
            return result

        return load_model

    def make_load_weights(original):
        def load_weights(self, weights, *args, **kwargs):
            if started:
                # A partial sync: every matrix arrives, no 1-D tensor does (the RMSNorm weights, Qwen3's
                # q_norm and k_norm among them), so the pool keeps the norm weights it held.
                weights = ((name, tensor) for name, tensor in weights if tensor.dim() != 1)
            return original(self, weights, *args, **kwargs)

        return load_weights

    wrap(Worker, "load_model", make_load_model)
    wrap(Qwen3ForCausalLM, "load_weights", make_load_weights)


def level2_skips_buffer_save():
    from vllm.v1.worker.gpu_worker import Worker

    def make(original):
        def sleep(self, level=1):
            original(self, level)
            # The model buffers (RoPE's cos_sin_cache) saved to host before the weights pool is discarded
            # are dropped: the wake has nothing to copy back, and no weight push or layerwise reload
            # recomputes a buffer (model_loader/reload/layerwise.py puts the old tensor back).
            self._sleep_saved_buffers = {}

        return sleep

    wrap(Worker, "sleep", make)
