"""Where a vLLM server start spends its time, read from the server log the launcher writes.

The launcher's own marks are epoch seconds to the millisecond (server.LAUNCH_MARK in the header,
server.HEALTHY_MARK once GET /health answered 200); vLLM 0.26.0's lines carry local time to the second
(`INFO 11-30 21:04:49 [file.py:N] message`, maybe behind a `(EngineCore pid=N) ` prefix), so a phase
between two vLLM lines is good to about a second. vLLM also reports two durations itself, which are
exact: model loading and engine initialisation.
"""

from __future__ import annotations

import datetime
import re

from tools.launcher.phase_plugin import sleepwake_memory_phase as phase_plugin
from tools.launcher.server import HEALTHY_MARK, LAUNCH_MARK

# The events, in the order a start passes them, with the vLLM 0.26.0 line that marks each.
EVENTS = (
    ("args", "non-default args:"),  # api_server.py setup_server: the module is imported, argv parsed
    ("engine_start", "Initializing a V1 LLM engine"),  # v1/engine/core.py: the engine core runs
    ("engine_ready", "init engine (profile, create kv cache, warmup model) took"),  # v1/engine/core.py
    ("listening", "Starting vLLM server on"),  # api_server.py build_and_serve: uvicorn starts
)
# Phase name -> (from event, to event); "launched" and "healthy" are the launcher's marks.
PHASES = (
    ("import_and_args", "launched", "args"),
    ("engine_start", "args", "engine_start"),
    ("engine_init", "engine_start", "engine_ready"),
    ("api_up", "engine_ready", "listening"),
    ("first_health", "listening", "healthy"),
    ("total", "launched", "healthy"),
)
_VLLM_LINE = re.compile(
    r"^(?:\(\S+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,]\d+)? \[[^\]]*\] (.*)$"
)
_LAUNCHED = re.compile(re.escape(LAUNCH_MARK) + r" (\d+\.\d+)")
_REPORTED = {
    "model_load_s": re.compile(r"Model loading took .* and ([\d.]+) seconds"),
    "engine_init_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}
_MODE = re.compile(r"^# start: (zygote|plain)\b")


def _vllm_time(match, year: int) -> float:
    month, day, hour, minute, second = (int(g) for g in match.groups()[:5])
    return datetime.datetime(year, month, day, hour, minute, second).timestamp()  # local time, as vLLM logs


def parse(log_text: str) -> dict:
    """{"start_mode", "events": {name: epoch s}, "phases": {name: s}, "reported": {name: s}}; an
    event not in the log is absent, and so is every phase that needs it."""
    events: dict[str, float] = {}
    reported: dict[str, float] = {}
    start_mode = None
    year = datetime.date.today().year
    for line in log_text.splitlines():
        launched = _LAUNCHED.search(line) if line.startswith("#") and "launched" not in events else None
        if launched:
            events["launched"] = float(launched.group(1))
            year = datetime.datetime.fromtimestamp(events["launched"]).year
            continue
        if line.startswith(HEALTHY_MARK) and "healthy" not in events:
            events["healthy"] = float(line[len(HEALTHY_MARK) :].split()[0])
            continue
        mode = _MODE.match(line)
        if mode:
            start_mode = mode.group(1)
            continue
        vllm = _VLLM_LINE.match(line)
        if not vllm:
            continue
        message = vllm.group(6)
        for name, marker in EVENTS:
            if name not in events and marker in message:
                events[name] = _vllm_time(vllm, year)
        for name, pattern in _REPORTED.items():
            found = pattern.search(message)
            if found and name not in reported:
                reported[name] = float(found.group(1))
    phases = {
        name: round(events[end] - events[begin], 3) for name, begin, end in PHASES if begin in events and end in events
    }
    # With memory_phase_scope steps, the worker's bracketed steps: how long the start held its GPU's
    # ALLOCATE phase (what neighbours' sleeps wait for) and how long it waited for it.
    steps = phase_plugin.read_steps(log_text)
    memory = (
        {
            "allocate_held_s": round(sum(s["held_s"] for s in steps), 3),
            "allocate_waited_s": round(sum(s["waited_s"] for s in steps), 3),
        }
        if steps
        else {}
    )
    return {"start_mode": start_mode, "events": events, "phases": phases, "reported": reported, "memory_phase": memory}
