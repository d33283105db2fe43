"""docs/walk/not-walked.md, generated from the walk's model: every pair (situation, operation) over the
states a front door reaches that the walk does not make, with its reason and class (operations.LeftOut):
meaningless for the API, a pinned vLLM failure (and whether a terminal probe makes it), or not yet walked.

    python3 -m tests.core.walk.not_walked > docs/walk/not-walked.md

(unit:not_walked_unit_test fails when the committed page differs from what this prints, and when any pair
is not yet walked.)
"""

from __future__ import annotations

import collections
import dataclasses
import sys

from tests.core import thresholds
from tests.core.walk import operations as ops
from tests.core.walk import plan
from tests.core.walk.model import INITIAL
from tools.matrix import FRONT_DOORS

# A pair left out for reasons of several classes (in different states of its situation) takes the first
# of them here: a client can reach it there, so the walk owes it unless a pin covers it.
CLASSES = (ops.UNWALKED, ops.PINNED, ops.MEANINGLESS)


@dataclasses.dataclass
class Door:
    """What the walk makes and leaves out through one front door."""

    states: int
    # (state, operation) pairs the door reaches: the finer count, of which a situation pair is a class
    state_pairs: int
    planned: int  # situation pairs in the walk's plan (what ran is each cell's walk.pairs_visited)
    # {class: {reason: {situation: [operation, ...]}}}, each pair once, under its class's first reason
    left_out: dict
    # the pairs the door's terminal probes end with
    probed: set
    # {reason: states}: operations left out in some states of a pair the walk plans from other states
    planned_elsewhere: dict

    def pairs(self, kind: str) -> set:
        return {(sit, op) for by_sit in self.left_out.get(kind, {}).values() for sit, o in by_sit.items() for op in o}


def survey(door: str) -> Door:
    """Every (state, operation) through `door` that the walk does not make, classed and grouped by pair."""
    planned = plan.reachable_pairs(door)
    reasons: dict = collections.defaultdict(dict)  # pair -> {class: reason}, first reason per class
    elsewhere: dict = collections.defaultdict(set)  # reason -> the states it leaves a planned pair out in
    states = plan.reachable_states(door)
    for state in states:
        for op in ops.ALL:
            left = op.left_out(state, door)
            if left is None:
                continue
            pair = plan.pair_of(state, op)
            if pair in planned:
                elsewhere[left.reason].add(state)
            else:
                reasons[pair].setdefault(left.kind, left.reason)
    left_out: dict = {}
    for pair in sorted(reasons, key=plan.pair_key):
        kind = next(k for k in CLASSES if k in reasons[pair])
        sit, op = pair
        left_out.setdefault(kind, {}).setdefault(reasons[pair][kind], {}).setdefault(sit, []).append(op)
    probed = set()
    for probe in plan.terminal_probes(door):
        probed.add(plan.pair_of(plan.run(INITIAL, probe[:-1]), probe[-1]))
    state_pairs = sum(len(plan.successors(state, door)) for state in states)
    return Door(len(states), state_pairs, len(planned), left_out, probed, {r: len(s) for r, s in elsewhere.items()})


def _divergences(door: str) -> dict:
    """{known divergence: the releases thresholds.KNOWN_DIVERGENCES pins it for} of the door's terminal
    pairs."""
    names = {name for name, _, _ in plan.terminal_pairs(door)}
    return {name: thresholds.KNOWN_DIVERGENCES[name].versions for name in sorted(names)}


def _summary_row(door: str, d: Door) -> str:
    pinned = d.pairs(ops.PINNED)
    cells = [
        f"`{door}`",
        str(d.states),
        str(d.state_pairs),
        str(d.planned),
        str(len(d.pairs(ops.MEANINGLESS))),
        f"{len(pinned)} ({len(pinned & d.probed)} probed)",
        str(len(d.pairs(ops.UNWALKED))),
    ]
    return "| " + " | ".join(cells) + " |"


def _door_section(door: str, d: Door, same_as: str | None) -> list[str]:
    lines = [f"## `{door}`", ""]
    if same_as:
        return lines + [f"The same pairs, reasons and probes as `{same_as}`.", ""]
    for name, versions in _divergences(door).items():
        lines.append(f"- `{name}`: pinned for vLLM {', '.join(versions)} (thresholds.KNOWN_DIVERGENCES)")
    if lines[-1]:
        lines.append("")
    for kind in CLASSES:
        for reason, by_sit in d.left_out.get(kind, {}).items():
            count = sum(len(o) for o in by_sit.values())
            lines += [f"### {kind}: {count} pairs", "", f"{reason}.", ""]
            by_tokens: dict = {}  # the same operations left out in many situations: listed once
            for sit, sit_ops in by_sit.items():
                tokens = ", ".join(f"`{op}`" + (" (probed)" if (sit, op) in d.probed else "") for op in sit_ops)
                by_tokens.setdefault(tokens, []).append(sit)
            for tokens, sits in by_tokens.items():
                if len(sits) == 1:
                    lines.append(f"- {sits[0].describe()}: {tokens}")
                    continue
                lines.append(f"- {tokens}, in each of {len(sits)} situations:")
                lines += [f"  - {sit.describe()}" for sit in sits]
            lines.append("")
    if d.planned_elsewhere:
        lines += ["### Left out in some states of a pair the walk plans from others", ""]
        lines += [f"- {states} states: {reason}." for reason, states in sorted(d.planned_elsewhere.items())]
        lines.append("")
    return lines


def render() -> str:
    doors = {door: survey(door) for door in FRONT_DOORS}
    lines = [
        "# The pairs the walk does not make",
        "",
        "Generated from the walk's model by `python3 -m tests.core.walk.not_walked > "
        "docs/walk/not-walked.md`; `unit:not_walked_unit_test` fails when this page is stale or when a pair "
        "is not yet walked.",
        "",
        "A situation pair is a situation (plan.Situation) and an operation (operations.ALL) in a state the door "
        "reaches; the (state, operation) pairs beside them count the same over the model's whole states, which "
        "carry more than decides how vLLM handles an operation. "
        "Every pair not below is in the plan of its door's walk cells (docs/walk/dealt.md: which cells), and each "
        "cell's run counts the pairs its executed steps visited (`walk.pairs_visited`). Classes (operations.LeftOut): "
        f"**{ops.MEANINGLESS}** (no client can send it there, or the door cannot send it at all), "
        f"**{ops.PINNED}** (a known divergence: the server is not usable after it on the releases pinned, so "
        "each kind is probed once, as a shard's last step, and the whole observable state is checked after "
        f"it), **{ops.UNWALKED}** (a client can send it and nothing pins what vLLM does).",
        "",
        "| door | states | (state, operation) pairs | situation pairs the walk plans | meaningless for the API "
        "| pinned vLLM failure | not yet walked |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_summary_row(door, d) for door, d in doors.items()]
    lines += ["", "## Outside the walk's model", ""]
    lines += [
        "What a client can send that the model holds no operation for (operations.NOT_MODELLED), and why:",
        "",
    ]
    lines += [f"- {what}: {why}." for what, why in ops.NOT_MODELLED.items()]
    lines.append("")
    shown: dict = {}
    for door, d in doors.items():
        same = next((other for other, od in shown.items() if od == d), None)
        lines += _door_section(door, d, same)
        shown[door] = d
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
