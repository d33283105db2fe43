"""Runs one REAPI Action the way an executor does: inputs from CAS, the command, outputs back to CAS.

Test stand-in only (see bots_worker.py): no sandbox, no resource limits, no output symlinks. It runs
under the BuildGrid venv (/opt/sleepwake/remote-exec-venv) and uses BuildGrid's own CAS client.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2.remote_execution_pb2 import (
    Action,
    ActionResult,
    Command,
    Digest,
    OutputDirectory,
    OutputFile,
)
from buildgrid.server.client.cas import download, upload


def _resolve_action(payload, downloader) -> Action:
    """BuildGrid leases carry the Action itself, or only its digest when it was not inlined."""
    action = Action()
    if payload.Is(Action.DESCRIPTOR):
        payload.Unpack(action)
        return action
    digest = Digest()
    payload.Unpack(digest)
    return downloader.get_message(digest, action)


def _upload_outputs(uploader, command: Command, workdir: str, result: ActionResult) -> None:
    for path in command.output_files:
        full = os.path.join(workdir, path)
        if os.path.isfile(full):
            result.output_files.append(
                OutputFile(path=path, digest=uploader.upload_file(full), is_executable=os.access(full, os.X_OK))
            )
    for path in command.output_directories:
        full = os.path.join(workdir, path)
        if os.path.isdir(full):
            result.output_directories.append(OutputDirectory(path=path, tree_digest=uploader.upload_tree(full)))


def run_action(
    channel: grpc.Channel, instance: str, payload, extra_env: dict[str, str], scratch_root: str
) -> ActionResult:
    """Executes the Action in `payload` (an Any) in a fresh directory and returns its ActionResult.

    extra_env is added to the command's environment: how the test tells which worker ran an action.
    """
    root = tempfile.mkdtemp(prefix="action-", dir=scratch_root)
    try:
        with download(channel, instance=instance) as downloader:
            action = _resolve_action(payload, downloader)
            command = downloader.get_message(action.command_digest, Command())
            downloader.download_directory(action.input_root_digest, root)
        workdir = os.path.join(root, command.working_directory)
        # REAPI: the worker creates the parent directories of every declared output.
        for path in list(command.output_files) + list(command.output_directories):
            os.makedirs(os.path.dirname(os.path.join(workdir, path)), exist_ok=True)
        env = {v.name: v.value for v in command.environment_variables}
        env.update(extra_env)
        timeout = action.timeout.seconds or None
        try:
            proc = subprocess.run(
                list(command.arguments),
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
            )
            exit_code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            exit_code = 124
            stdout = e.stdout or b""
            stderr = (e.stderr or b"") + f"\nworker: action timed out after {timeout} s\n".encode()
        except OSError as e:  # the command itself cannot start (missing interpreter, bad path)
            exit_code, stdout, stderr = 127, b"", f"worker: cannot run {command.arguments[0]}: {e}\n".encode()

        result = ActionResult(exit_code=exit_code)
        with upload(channel, instance=instance) as uploader:
            result.stdout_digest.CopyFrom(uploader.put_blob(io.BytesIO(stdout), length=len(stdout)))
            result.stderr_digest.CopyFrom(uploader.put_blob(io.BytesIO(stderr), length=len(stderr)))
            _upload_outputs(uploader, command, workdir, result)
            uploader.flush()
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)
