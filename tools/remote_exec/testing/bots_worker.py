"""The smallest worker for BuildGrid's Bots API (Remote Workers API v1test2): a TEST STAND-IN.

It exists because no package registry ships a BuildGrid worker (buildbox-worker is not packaged and
BuildGrid's old host-tools bot predates PyPI). Production pools run buildbox-worker (BuildGrid),
bb_worker + bb_runner (Buildbarn) or the vendor's executors (BuildBuddy, EngFlow). This one has what
//tools/remote_exec/unit:remote_exec_test needs and nothing more: it advertises a pool's platform
properties, takes one lease at a time, runs it unsandboxed (action_runner.py) and reports the
ActionResult. It is not a product.

    bots_worker.py --server=grpc://127.0.0.1:50051 --instance=main --bot_id=gpu-a \
        --property=OSFamily=Linux --property=gpu=nvidia --env=SLEEPWAKE_EXECUTOR=gpu-a

Runs until SIGTERM/SIGINT. Under the BuildGrid venv (/opt/sleepwake/remote-exec-venv).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time

# Runs as a script from the runfiles tree, beside action_runner.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc, worker_pb2  # noqa: E402
from buildgrid._protos.google.rpc import code_pb2  # noqa: E402
from google.protobuf import any_pb2  # noqa: E402

import action_runner  # noqa: E402

# How long one UpdateBotSession may wait for work. BuildGrid answers after 80% of it when no lease
# came, so this is also how often an idle worker proves it is alive (keep it below the server's
# bot-session-keepalive-timeout).
_POLL_SECONDS = 10.0
# CreateBotSession with a deadline this short returns as soon as the bot is registered: BuildGrid
# waits for a first lease only when 80% of the deadline exceeds its 3 s network timeout.
_CREATE_SECONDS = 3.5
# While an action runs, how often the worker tells the server it is alive (well below the server's
# bot-session-keepalive-timeout, 60 s in buildgrid.yml.in).
_HEARTBEAT_SECONDS = 10.0


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the Bots/CAS endpoint, e.g. grpc://127.0.0.1:50051")
    parser.add_argument("--instance", default="main", help="REAPI instance name the worker serves")
    parser.add_argument("--bot_id", required=True, help="this worker's id; also printed in its log lines")
    parser.add_argument(
        "--property",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a platform property this worker advertises (repeat); actions are matched on them",
    )
    parser.add_argument(
        "--env",
        type=_key_value,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="added to every action's environment (repeat), so an action can tell who ran it",
    )
    parser.add_argument(
        "--connect_timeout",
        type=float,
        default=120.0,
        help="seconds to keep trying to register with a server that is still starting",
    )
    parser.add_argument("--scratch_dir", default=None, help="where action directories are made (default: TMPDIR)")
    return parser.parse_args(argv)


def _bot_session(args: argparse.Namespace) -> bots_pb2.BotSession:
    device = worker_pb2.Device(
        handle=args.bot_id, properties=[worker_pb2.Device.Property(key=k, value=v) for k, v in args.property]
    )
    return bots_pb2.BotSession(
        bot_id=args.bot_id, status=bots_pb2.BotStatus.OK, worker=worker_pb2.Worker(devices=[device])
    )


def _log(bot_id: str, message: str) -> None:
    print(f"bots_worker[{bot_id}]: {message}", file=sys.stderr, flush=True)


def _create_session(stub: bots_pb2_grpc.BotsStub, args: argparse.Namespace) -> bots_pb2.BotSession:
    request = bots_pb2.CreateBotSessionRequest(parent=args.instance, bot_session=_bot_session(args))
    deadline = time.monotonic() + args.connect_timeout
    while True:
        try:
            # wait_for_ready: a server not listening yet is waited for, within the call's deadline.
            return stub.CreateBotSession(request, timeout=_CREATE_SECONDS, wait_for_ready=True)
        except grpc.RpcError as e:
            # A server still starting, or one too busy to answer in time; a retried creation
            # replaces the session a timed-out one may have left (same bot_id).
            if (
                e.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
                or time.monotonic() > deadline
            ):
                raise


def _update(stub: bots_pb2_grpc.BotsStub, session: bots_pb2.BotSession) -> bots_pb2.BotSession:
    """One UpdateBotSession: reports our leases, returns the server's view (new leases included)."""
    try:
        return stub.UpdateBotSession(
            bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session), timeout=_POLL_SECONDS
        )
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        # No answer within the poll: the leases we hold are unchanged; the next call repeats them.
        return session


def _runnable(session: bots_pb2.BotSession) -> bots_pb2.Lease | None:
    return next(
        (lease for lease in session.leases if lease.state in (bots_pb2.LeaseState.PENDING, bots_pb2.LeaseState.ACTIVE)),
        None,
    )


def _run_lease(stub, session, lease_id: str, run, log) -> bots_pb2.BotSession:
    """Runs run() for the lease while keeping the session alive; returns it with the lease COMPLETED.

    BuildGrid drops a bot that stays silent for bot-session-keepalive-timeout and requeues its lease,
    so a long action (a GPU cell) is run in a thread while the session is updated with the lease ACTIVE.
    """
    outcome: dict = {}

    def target():
        try:
            outcome["result"] = run()
        except Exception as e:  # noqa: BLE001 - any failure is reported to the client through the lease
            outcome["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    while True:
        thread.join(_HEARTBEAT_SECONDS)
        if not thread.is_alive():
            break
        for lease in session.leases:
            if lease.id == lease_id:
                lease.state = bots_pb2.LeaseState.ACTIVE
        session = _update(stub, session)
    for lease in session.leases:
        if lease.id != lease_id:
            continue
        if "error" in outcome:
            e = outcome["error"]
            # The lease's status reaches Bazel as the Execute error; the worker keeps serving.
            lease.status.code = code_pb2.INTERNAL
            lease.status.message = f"the worker could not run the action: {type(e).__name__}: {e}"
            log(f"failed lease {lease_id}: {lease.status.message}")
        else:
            lease.result.Pack(outcome["result"])
            lease.status.code = code_pb2.OK
            log(f"completed lease {lease_id}: exit code {outcome['result'].exit_code}")
        lease.state = bots_pb2.LeaseState.COMPLETED
        return session
    log(f"lease {lease_id} was cancelled by the server while it ran")
    return session


def serve(args: argparse.Namespace) -> None:
    channel = grpc.insecure_channel(args.server.replace("grpc://", "", 1))
    stub = bots_pb2_grpc.BotsStub(channel)
    scratch = args.scratch_dir or tempfile.gettempdir()
    extra_env = dict(args.env)

    session = _create_session(stub, args)
    _log(args.bot_id, f"holds session {session.name} with properties {dict(args.property)}")
    while True:
        lease = _runnable(session)
        if lease is None:
            session = _update(stub, session)  # waits up to _POLL_SECONDS for work
            continue
        lease_id, payload = lease.id, any_pb2.Any()
        payload.CopyFrom(lease.payload)  # the session message is replaced while the action runs
        _log(args.bot_id, f"running lease {lease_id}")
        session = _run_lease(
            stub,
            session,
            lease_id,
            lambda payload=payload: action_runner.run_action(channel, args.instance, payload, extra_env, scratch),
            lambda m: _log(args.bot_id, m),
        )
        session = _update(stub, session)


def main(argv: list[str]) -> int:
    args = _parse_args(argv)
    # Bazel's test runner and the fixture stop workers with SIGTERM; exit without a traceback.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve(args)
    except KeyboardInterrupt:
        return 0
    except grpc.RpcError as e:
        _log(args.bot_id, f"the server at {args.server} failed the session: {e.code().name} {e.details()}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
