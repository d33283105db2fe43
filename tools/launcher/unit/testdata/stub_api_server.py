"""A stand-in for vLLM's API server in the launcher's CPU tests.

Like vLLM it leaves processes behind when it dies: a worker, a worker that ignores SIGTERM, and an
"engine core" that setsid's and is orphaned by a double fork (so only a subreaper still sees it).
Every PID it creates is appended to --pid_file, so a test can check that none survive.

Modes: ok (answers GET /health 200), never_healthy (answers 503), die_at_start (prints and exits 3).
With SLEEPWAKE_MEMORY_LOCK set (a shared lease, memory_phase_scope steps) it runs a worker's start-up
steps through the memory-phase plugin, as vLLM with the plugin does; STUB_SERVER_UNBRACKETED=1 skips
them (a plugin that did not load), STUB_SERVER_NO_SLEEP=1 leaves the worker without a sleep to bracket.
--runner_line: env (prints vLLM's "Using V2 Model Runner" iff VLLM_USE_V2_MODEL_RUNNER=1), always, never.
CPU work, for the launcher's CPU accounting: STUB_SERVER_START_CPU_S of it before listening, and
GET /spin?cpu_s=S spends S while serving, in a thread that has exited when it answers.
STUB_SERVER_LATE_IMPORTS (comma-separated modules): imported at start, as vLLM's engine core imports its
worker, each first printed with whether it was imported already (a zygote's preload).
STUB_SERVER_LATE_CALLS (comma-separated MODULE:FUNCTION): called at start, as vLLM's first kernel lookup
computes Triton's cache key.

It also runs as a module (`python -m stub_api_server` with this directory on PYTHONPATH), which is how a
zygote pre-imports and forks it in place of vLLM's API server. Its heavy import is fake_heavy (the
stand-in for the vllm package), and like vLLM's load_general_plugins (vllm/plugins/__init__.py, at
run time, not at import) it loads the `vllm.general_plugins` entry points on sys.path when it starts:
those named in STUB_SERVER_PLUGINS (comma-separated; the real vLLM's own entry points, installed in
the same environment, would import vLLM).
"""

import argparse
import gc
import http.server
import importlib
import importlib.metadata
import os
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING

import psutil

import fake_heavy  # imported for its cost and its side effects, like vllm

PLUGIN_GROUP = "vllm.general_plugins"


def _record(pid_file, pid):
    """Appends "PID START_TIME": the start time tells a reused PID from the process recorded."""
    if pid_file:
        with open(pid_file, "a") as f:
            f.write("%d %r\n" % (pid, psutil.Process(pid).create_time()))


def _idle(ignore_term=False):
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        signal.pause()


def _fork(body):
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    return pid


def _spawn_family(pid_file):
    _record(pid_file, os.getpid())
    _record(pid_file, _fork(_idle))
    _record(pid_file, _fork(lambda: _idle(ignore_term=True)))
    read_end, write_end = os.pipe()

    def middle():
        os.setsid()
        os.write(write_end, b"%d\n" % _fork(_idle))

    os.waitpid(_fork(middle), 0)
    _record(pid_file, int(os.read(read_end, 64)))


def _start_worker():
    """The worker's start-up steps as a vLLM server with the memory-phase plugin runs them (the launcher
    put the plugin's dir on PYTHONPATH): each inside the ALLOCATE phase, each logging its MARK line. The
    bytes are STUB_SERVER_WORKER_BYTES (NVML's figure for the worker's process)."""
    if TYPE_CHECKING:  # the same file, by the name the type check reads it under
        from tools.launcher.phase_plugin import sleepwake_memory_phase as plugin
    else:
        import sleepwake_memory_phase as plugin

    class Worker:
        pass

    for step in plugin.STEPS + tuple(n for n in plugin.CALLS if not os.environ.get("STUB_SERVER_NO_" + n.upper())):
        setattr(Worker, step, lambda self: None)
    worker_bytes = int(os.environ.get("STUB_SERVER_WORKER_BYTES", "0"))
    plugin.bracket(Worker, os.environ["SLEEPWAKE_MEMORY_LOCK"], 5.0, process_bytes=lambda: worker_bytes)
    for step in plugin.STEPS:
        getattr(Worker(), step)()


def _spend_cpu(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _bind_failed(e: OSError) -> None:
    print("OSError: [Errno %s] error while attempting to bind on address: %s" % (e.errno, e.strerror), flush=True)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["ok", "never_healthy", "die_at_start"], default="ok")
    parser.add_argument("--runner_line", choices=["env", "always", "never"], default="env")
    parser.add_argument("--pid_file")
    args = parser.parse_args()
    print("stub vLLM server %d starting on %s:%d" % (os.getpid(), args.host, args.port), flush=True)
    # What a collection here walks: the oldest generation, and whether the import's state is in it.
    walked = {id(o) for o in gc.get_objects()}
    print(
        "stub vLLM server gc: %d frozen, %d of fake_heavy's %d containers walked by a collection"
        % (gc.get_freeze_count(), sum(id(entry) in walked for entry in fake_heavy.STATE), fake_heavy.HEAVY_OBJECTS),
        flush=True,
    )
    for name in [n for n in os.environ.get("STUB_SERVER_LATE_IMPORTS", "").split(",") if n]:
        print("stub vLLM server: late import %s (imported already: %s)" % (name, name in sys.modules), flush=True)
        importlib.import_module(name)
    for call in [c for c in os.environ.get("STUB_SERVER_LATE_CALLS", "").split(",") if c]:
        module, function = call.split(":")
        print(
            "stub vLLM server: late call %s -> %s" % (call, getattr(importlib.import_module(module), function)()),
            flush=True,
        )
    # Like vLLM (api_server.py setup_server): bind with SO_REUSEADDR first, listen only once started,
    # STUB_SERVER_LISTEN_DELAY_S later.
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        _bind_failed(e)
    wanted = [name for name in os.environ.get("STUB_SERVER_PLUGINS", "").split(",") if name]
    for plugin in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        if plugin.name in wanted:
            print("stub vLLM server: plugin %s loaded" % plugin.name, flush=True)
            plugin.load()()
    _spawn_family(args.pid_file)
    if os.environ.get("SLEEPWAKE_MEMORY_LOCK") and not os.environ.get("STUB_SERVER_UNBRACKETED"):
        _start_worker()
    if args.runner_line == "always" or (
        args.runner_line == "env" and os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1"
    ):
        print("INFO [gpu_worker.py:378] Using V2 Model Runner", flush=True)
    if args.mode == "die_at_start":
        # As vLLM's engine process reports its cause, long before the API server's last lines.
        print("(EngineCore pid=7) ERROR 12-06 11:32:24 [core.py:1330] ModuleNotFoundError: No module named 'fake'")
        for i in range(80):
            print("fake start-up line %d" % i)
        print("RuntimeError: fake engine core failed to start", flush=True)
        sys.exit(3)
    healthy = args.mode == "ok"
    _spend_cpu(float(os.environ.get("STUB_SERVER_START_CPU_S", "0")))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/spin?cpu_s="):
                # In a thread joined before the answer: the launcher's CPU split by thread must count
                # what a thread that is gone by the stop spent.
                spender = threading.Thread(target=_spend_cpu, args=(float(self.path.split("=", 1)[1]),))
                spender.start()
                spender.join()
                self.send_response(200)
                self.end_headers()
                return
            self.send_response(200 if healthy and self.path == "/health" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    time.sleep(float(os.environ.get("STUB_SERVER_LISTEN_DELAY_S", "0")))
    httpd = http.server.ThreadingHTTPServer((args.host, args.port), Handler, bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = sock
    try:
        httpd.server_activate()
    except OSError as e:
        _bind_failed(e)
    print("stub vLLM server ready", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
