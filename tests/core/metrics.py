"""Prometheus text parsing and the expected values of vLLM's `vllm:engine_sleep_state` gauge."""

import dataclasses
import re

SLEEP_STATE_METRIC = "vllm:engine_sleep_state"
SLEEP_STATE_LABELS = ("awake", "weights_offloaded", "discard_all")


def gauge(awake: float, weights_offloaded: float, discard_all: float) -> dict[str, float]:
    return {"awake": float(awake), "weights_offloaded": float(weights_offloaded), "discard_all": float(discard_all)}


# What vLLM 0.26.0's StatLoggerManager.record_sleep_state(sleep, level) writes
# (vllm/v1/metrics/loggers.py PrometheusStatLogger.record_sleep_state).
GAUGE_AWAKE = gauge(1, 0, 0)
GAUGE_LEVEL0 = gauge(0, 0, 0)  # sleep=1, level 0: awake=0 and neither level flag
GAUGE_LEVEL1 = gauge(0, 1, 0)
GAUGE_LEVEL2 = gauge(0, 0, 1)
GAUGE_BY_LEVEL = {0: GAUGE_LEVEL0, 1: GAUGE_LEVEL1, 2: GAUGE_LEVEL2}


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: dict
    value: float


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _parse_labels(text: str, line: str) -> dict:
    labels, pos = {}, 0
    while pos < len(text.rstrip()):
        m = _LABEL.match(text, pos)
        if not m:
            raise ValueError(f"malformed labels in Prometheus line: {line!r}")
        labels[m.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return labels


def parse_prometheus(text: str, names=None) -> list[Sample]:
    """Samples of a Prometheus text exposition (comments and blank lines skipped); with names, only the
    samples of those names, and a line of another name is not parsed at all. Why: vLLM's page has
    hundreds of samples after a few requests, and parsing all of them for the one gauge the suite reads
    was a large share of a walk shard's test process (docs/design.md)."""
    wanted = tuple(names) if names else None
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or (wanted and not line.startswith(wanted)):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        if wanted and m.group("name") not in wanted:  # a longer name that starts like a wanted one
            continue
        labels = _parse_labels(m.group("labels") or "", line)
        samples.append(Sample(m.group("name"), labels, float(m.group("value"))))
    return samples


def sleep_state(text: str) -> dict[str, float]:
    """The `vllm:engine_sleep_state` gauge as {"awake", "weights_offloaded", "discard_all"}.

    With several engines (data parallel) every engine must agree; a disagreement is itself a bug.
    """
    per_engine: dict[str, dict[str, float]] = {}
    for s in parse_prometheus(text, [SLEEP_STATE_METRIC]):
        if s.labels.get("sleep_state") in SLEEP_STATE_LABELS:  # parse_prometheus kept this name only
            per_engine.setdefault(s.labels.get("engine", ""), {})[s.labels["sleep_state"]] = s.value
    if not per_engine:
        raise ValueError(
            f"{SLEEP_STATE_METRIC} not found in /metrics: the server must run with stats logging on "
            "(no --disable-log-stats) for the gauge to exist"
        )
    states = list(per_engine.values())
    for engine, state in per_engine.items():
        if set(state) != set(SLEEP_STATE_LABELS):
            raise ValueError(f"{SLEEP_STATE_METRIC} for engine {engine!r} lacks labels: got {sorted(state)}")
    if any(s != states[0] for s in states):
        raise ValueError(f"engines disagree on {SLEEP_STATE_METRIC}: {per_engine}")
    return {k: states[0][k] for k in SLEEP_STATE_LABELS}
