"""Mutants of the weights a server serves after sleeps, reloads and pushes of new weights
(vllm/v1/worker/gpu_worker.py Worker.wake_up / reload_weights of vLLM 0.26.0)."""

from .shared import Deferred, lm_head, replace, wrap

# The final RMSNorm's weight (all 1.0 in the synthetic checkpoint) set to this scales every logit by
# it: greedy tokens stay, logprobs move. 0.9765625 = 250/256 is exact in bf16. A float32 numpy forward
# of the seed-0 checkpoint (make_synthetic_model_test._reference_logits) over PROMPTS' 16 greedy tokens
# puts the worst per-token drift at 0.0209 nats, about twice logprob_drift_max (0.9921875: 0.0064,
# 0.984375: 0.0133, 0.96875: 0.0290, 0.9375: 0.0690; the old lm_head x 1.25: 0.0693).
NORM_SCALE = 1 - 3 * 2**-7
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
                self.model_runner.model.model.norm.weight.data.fill_(NORM_SCALE)

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
