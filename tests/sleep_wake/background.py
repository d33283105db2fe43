"""Requests sent from background threads, for tests that hold requests behind a sleeping engine."""

import concurrent.futures
import contextlib


@contextlib.contextmanager
def background(client, workers: int = 1):
    """A thread pool for requests. If the block fails while the engine sleeps, wake it (fully) before
    joining, so held requests end now instead of at their client timeout."""
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="held-request")
    try:
        yield pool
    except BaseException:
        try:
            if client.health() and client.is_sleeping():
                client.wake_up()
        finally:
            pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)
