"""Mutants of the requests that wait while the engine sleeps: sent while paused (the scheduler's waiting
queue), frozen by a keep (a level >= 1 keep's cache reset preempts them back to that queue), arriving
during a wait drain; and of what a sleep, a wake, a reload or a prefix-cache reset does to them. Only the
state walk sends requests into these states. vLLM 0.26.0's v1/engine/core.py (pause_scheduler, sleep,
wake_up, _reset_caches, collective_rpc) and v1/core/sched/scheduler.py (schedule,
get_num_unfinished_requests, finish_requests, set_pause_state, _preempt_request).

The patches work on EngineCore and Scheduler, which the engine tier (tests/engine) runs on the CPU around
its fake worker: its catalogue reuses them, so each patch here is exercised there as it is written."""

from .shared import wrap


def _send_aborts(engine, aborted) -> None:
    """The abort outputs of requests the scheduler finished outside a step: EngineCoreProc sends them to
    the front end (its pause does the same); without them the client's request stays open."""
    send = getattr(engine, "_send_abort_outputs", None)
    if send is not None and aborted:
        send(aborted)


def abort_spares_waiting():
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import RequestStatus

    def make(original):
        def finish_requests(self, request_ids, finished_status):
            if request_ids is None and finished_status == RequestStatus.FINISHED_ABORTED:
                # The pause's "abort every request" takes the running queue only: the requests waiting
                # (sent while paused, or preempted by a keep's cache reset) stay queued for the wake.
                request_ids = [r.request_id for r in self.running]
            return original(self, request_ids, finished_status)

        return finish_requests

    wrap(Scheduler, "finish_requests", make)


def _schedules_waiting_while_paused_new(methods, when):
    """Scheduler methods that read PAUSED_NEW as UNPAUSED whenever when(scheduler) holds: the waiting
    queue is scheduled (schedule) and counted as work, so the busy loop steps for it
    (get_num_unfinished_requests)."""
    from vllm.v1.core.sched.interface import PauseState
    from vllm.v1.core.sched.scheduler import Scheduler

    def make(original):
        def method(self, *args, **kwargs):
            if self._pause_state != PauseState.PAUSED_NEW or not when(self):
                return original(self, *args, **kwargs)
            self._pause_state = PauseState.UNPAUSED
            try:
                return original(self, *args, **kwargs)
            finally:
                self._pause_state = PauseState.PAUSED_NEW

        return method

    for name in methods:
        wrap(Scheduler, name, make)


def paused_new_admits_waiting():
    # scheduler.py reads the waiting queue only UNPAUSED; this one reads it under every pause but keep's.
    _schedules_waiting_while_paused_new(("schedule", "get_num_unfinished_requests"), lambda scheduler: True)


def drain_admits_late_arrivals():
    # While a wait sleep drains (PAUSED_NEW with requests still running), the waiting queue is scheduled
    # too: a request arriving during the drain runs with it, and the drain waits for it.
    _schedules_waiting_while_paused_new(("schedule",), lambda scheduler: bool(scheduler.running))


def keep_without_preemption():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def _reset_caches(self, reset_running_requests=True, reset_connector=True):
            # #34382 reverted: the reset after a keep no longer preempts the running requests. The frozen
            # ones keep their blocks (whose KV the executor's sleep then discards), so the prefix-cache
            # reset is refused, and its result is not looked at.
            return original(self, False, reset_connector)

        return _reset_caches

    wrap(EngineCore, "_reset_caches", make)


def scheduling_tag_resumes():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def wake_up(self, tags=None):
            original(self, tags)
            if tags and "scheduling" in tags:
                # "scheduling" read as "resume scheduling", whatever the executor still has asleep.
                self.resume_scheduler()

        return wake_up

    wrap(EngineCore, "wake_up", make)


def wake_aborts_queued():
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.request import RequestStatus

    def make(original):
        def wake_up(self, tags=None):
            was_paused = self.is_scheduler_paused()
            original(self, tags)
            if was_paused and not self.is_scheduler_paused():
                # The wake that resumes scheduling drops what was queued while paused as stale (admitted
                # under the weights before the sleep): aborted, as a pause with mode abort would have.
                queued = [
                    r.request_id
                    for queue in (self.scheduler.waiting, self.scheduler.skipped_waiting)
                    for r in queue
                    if r.status == RequestStatus.WAITING
                ]
                _send_aborts(self, self.scheduler.finish_requests(queued, RequestStatus.FINISHED_ABORTED))

        return wake_up

    wrap(EngineCore, "wake_up", make)


def keep_reset_aborts_frozen():
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.request import RequestStatus

    def make(original):
        def _reset_caches(self, reset_running_requests=True, reset_connector=True):
            if reset_running_requests and self.scheduler.running:
                # The requests a keep froze are aborted to free their blocks instead of preempted back to
                # the waiting queue: a level >= 1 keep ends them as an abort would.
                running = [r.request_id for r in self.scheduler.running]
                _send_aborts(self, self.scheduler.finish_requests(running, RequestStatus.FINISHED_ABORTED))
            return original(self, reset_running_requests, reset_connector)

        return _reset_caches

    wrap(EngineCore, "_reset_caches", make)


def preempted_restarts_output():
    from vllm.v1.core.sched.scheduler import Scheduler

    def make(original):
        def _preempt_request(self, request, timestamp):
            original(self, request, timestamp)
            # Recomputed from the prompt alone (#16832): the tokens it generated are dropped with its
            # blocks, so it generates max_tokens again and the client gets the first ones twice.
            del request._output_token_ids[:]
            del request._all_token_ids[request.num_prompt_tokens :]
            del request.block_hashes[request.num_prompt_tokens // self.hash_block_size :]

        return _preempt_request

    wrap(Scheduler, "_preempt_request", make)


def reset_prefix_cache_preempts_running():
    from vllm.v1.engine.core import EngineCore

    def make(original):
        def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
            # /reset_prefix_cache preempts the running requests so that the reset always succeeds (the
            # sleep's own reset does; the route documents success=false while requests hold blocks).
            return original(self, True, reset_connector)

        return reset_prefix_cache

    wrap(EngineCore, "reset_prefix_cache", make)


def pause_mode_sticky():
    from vllm.v1.core.sched.interface import PauseState
    from vllm.v1.core.sched.scheduler import Scheduler

    def make(original):
        def set_pause_state(self, pause_state):
            if self._pause_state != PauseState.UNPAUSED and pause_state != PauseState.UNPAUSED:
                return  # "already paused": a second pause keeps the first one's mode
            return original(self, pause_state)

        return set_pause_state

    wrap(Scheduler, "set_pause_state", make)


def reload_aborts_requests():
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.request import RequestStatus

    def make(original):
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            if method == "reload_weights":
                # The abort an RL client makes before a weight sync, moved into the server: every request,
                # running or waiting, ends before the weights change.
                _send_aborts(self, self.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED))
            return original(self, method, timeout, args, kwargs)

        return collective_rpc

    wrap(EngineCore, "collective_rpc", make)
