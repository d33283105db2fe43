"""@sleepwake_gpu: the GPU runner's interpreter as a Python toolchain, and the identity of what it runs.

--config=gpu selects this toolchain. The interpreter is named by SLEEPWAKE_GPU_PYTHON (environment
or --repo_env): the runner's own Python, which has torch and vLLM. identity.txt names the vLLM
build (version and a digest of its installed RECORD), torch, Python and the GPU model and driver; every
GPU cell depends on it, so a cached result is never reused for another vLLM install or another GPU.
Under remote execution (SLEEPWAKE_REMOTE_EXECUTION, set by --config=remote) the interpreter is a path
on the workers and is not run here; the GPU pool's platform properties carry the identity instead.
"""

# Reads package metadata only: importing vLLM itself costs 20+ s.
_IDENTITY_PY = """
import hashlib, importlib.metadata as md, platform, sys
def ident(name):
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        return name + ": not installed"
    record = d.read_text("RECORD") or ""
    return "%s: %s record-sha256=%s" % (name, d.version, hashlib.sha256(record.encode()).hexdigest())
print("python: %s %s" % (platform.python_version(), sys.executable))
for name in ("vllm", "torch", "transformers"):
    print(ident(name))
"""

_NOT_CONFIGURED = """#!/bin/sh
echo "sleepwake: --config=gpu needs the GPU runner's Python, which has vLLM and torch." >&2
echo "Set SLEEPWAKE_GPU_PYTHON=/path/to/python3 (environment, user.bazelrc or --repo_env) and rerun." >&2
exit 1
"""

def _gpu_runtime_impl(rctx):
    python = rctx.os.environ.get("SLEEPWAKE_GPU_PYTHON", "")
    lines = []
    if python and rctx.os.environ.get("SLEEPWAKE_REMOTE_EXECUTION"):
        # --config=remote: the interpreter is a path on the GPU workers, not here. What it runs is
        # named by the GPU pool's platform properties (vllm_build, gpu_model, ...), which key every
        # GPU action (platforms/exec_properties.bzl); nothing on this client can vouch for it.
        lines.append("python: %s on the remote GPU pool (identity in its exec properties)" % python)
        runtime = 'interpreter_path = "%s"' % python
    elif python:
        result = rctx.execute([python, "-c", _IDENTITY_PY], timeout = 120)
        if result.return_code != 0:
            fail("SLEEPWAKE_GPU_PYTHON=%s does not run: %s" % (python, result.stderr))
        lines.append(result.stdout.strip())
        runtime = 'interpreter_path = "%s"' % python
    else:
        lines.append("python: not configured (SLEEPWAKE_GPU_PYTHON unset)")
        rctx.file("python_not_configured.sh", _NOT_CONFIGURED, executable = True)
        runtime = 'interpreter = "python_not_configured.sh"'
    smi = rctx.which("nvidia-smi")
    if smi:
        result = rctx.execute([smi, "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader"], timeout = 60)
        lines.append("gpus: " + (result.stdout.strip().replace("\n", "; ") or "none"))
    else:
        lines.append("gpus: no nvidia-smi on PATH")
    fingerprint = rctx.os.environ.get("SLEEPWAKE_GPU_FINGERPRINT", "")
    if fingerprint:
        lines.append("fingerprint: " + fingerprint)
    rctx.file("identity.txt", "\n".join(lines) + "\n")
    rctx.file("BUILD.bazel", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

exports_files(["identity.txt"])

py_runtime(
    name = "python3",
    {runtime},
    python_version = "PY3",
    stub_shebang = "#!/usr/bin/env python3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":python3",
)

toolchain(
    name = "py_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(runtime = runtime))

gpu_runtime = repository_rule(
    implementation = _gpu_runtime_impl,
    # local: re-read on every Bazel server start, so a vLLM reinstalled in place is noticed;
    # SLEEPWAKE_GPU_FINGERPRINT lets a runner force a re-read without a restart.
    local = True,
    configure = True,
    environ = ["SLEEPWAKE_GPU_PYTHON", "SLEEPWAKE_GPU_FINGERPRINT", "SLEEPWAKE_REMOTE_EXECUTION", "PATH"],
)
