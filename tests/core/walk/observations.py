"""What a tier observed of an operation, and its checks against what the model predicts, through the
oracles of tests/core/oracle.py. A tier (driver.Subject) performs the call and returns its observation,
one dataclass per kind of operation here; the driver hands it to that kind's check_* function, so every
tier's step is judged by the same code, with the same oracle ids and bounds. Today: a terminal pair's
(Terminal, check_terminal); the other operations' tiers still judge their own results.

Each function tells `judged` every oracle id it is about to check, before it checks it: a tier that counts
its checks (the engine tier's coverage record) counts the driver's among them, a failing one too
(driver.Subject.judged)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tests.core import expect, oracle, thresholds
from tests.core.walk import model
from tests.core.walk import operations as ops
from tests.core.walk.model import State


@dataclasses.dataclass
class Terminal:
    """What a tier observed of a terminal pair's call and everything observable after it: a value for each
    key of the pin's `expected` the tier can observe (status, is_sleeping, gauge as expect.fmt writes it,
    is_paused, health, request), and the answer's body as the failure's message shows it."""

    seen: dict
    body: str


def check_terminal(
    observed: Terminal,
    pin: thresholds.Pin,
    before: State,
    version: str,
    where: str,
    judged: Callable[[list[str]], None],
) -> None:
    """A terminal pair against the pin of its known divergence: every key the tier observed equals the
    pin's; a gauge pinned "unchanged" is the gauge of the state probed (model.flags)."""
    want = dict(pin.expected)
    if "gauge" in observed.seen:
        gauge = model.flags(before, version)[1] if want["gauge"] == thresholds.UNCHANGED else want["gauge"]
        want["gauge"] = expect.fmt(gauge)
    oracle_id = ops.TERMINAL_ORACLES[pin.entry.name]
    judged([oracle_id])
    oracle.equal(
        oracle_id,
        observed.seen,
        {k: want[k] for k in observed.seen},
        f"walk {where}, {pin.describe()}; body {observed.body}",
    )
