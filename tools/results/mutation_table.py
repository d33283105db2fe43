"""Tabulates a mutation run: which test classes killed which mutant, on which cell.

Usage: python3 tools/results/mutation_table.py [bazel-testlogs/tests/mutants] [--out FILE] [--catalogue DIR]

Reads each mutant target's test.outputs/mutation_row.json (written by tests/mutants/mutant_test.py;
inside outputs.zip when Bazel zipped the outputs) and prints a markdown table mutant x class (with the
bound each mutant is sized against and its size, from the catalogue), the
number of mutants each class killed, and whether every mutant was killed and every class killed one.
A mutant of the catalogue (tests/mutants/plugin/sleepwake_mutants, read from the workspace) with no
row (its target did not run, or stopped before judging) is not killed: its classes count it as "no
result", apart from errored, which is a judged run that proves nothing. Exits 1 unless all of that holds
(and the control, if it ran, passed).

A kill that rests on liveness oracles alone (a row's needs_control: api.answers, api.status,
server.healthy, which an overloaded host or a crash fires too) stands only where the class's control
ran under the same concurrency and did not fire them; otherwise the class is errored (confirm_by_controls).
"""

import argparse
import copy
import importlib.util
import json
import os
import sys

if not __package__:
    # Run as a script (python3 tools/X.py): make the workspace root, which holds `tools`, importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tools.results import testlogs  # noqa: E402

ROW_FILE = "mutation_row.json"
CONTROL = "none"
DEFAULT_CATALOGUE = "tests/mutants/plugin/sleepwake_mutants"
GPU_PREFIX, FAKE_PREFIX = "mutant_", "fake_mutant_"  # target names of tests/mutants/defs.bzl mutant_suite
# The verdicts of tests/core/verdict.py (killed, other oracle, errored, survived, not applied; passed: a
# control), and ours for a catalogued mutant whose target wrote no row.
NO_RESULT = "no result"
NO_ROW = f"no result: its target wrote no {ROW_FILE}; see its test.log"
CELL_TEXT = {
    "killed": "killed",
    "other oracle": "other oracle",
    "errored": "errored",
    "survived": "survived",
    "not applied": "not applied",
    "passed": "pass",
    NO_RESULT: NO_RESULT,
}
OUTCOMES = ("killed", "other oracle", "errored", "survived", "not applied", NO_RESULT)


def _row(target_dir):
    text = testlogs.read_output(target_dir, ROW_FILE)
    return None if text is None else json.loads(text)


def load_rows(root, prefix=GPU_PREFIX):
    """Rows of the targets under root named prefix* that wrote one, ordered by mutant name, the
    control last. The prefix keeps the fake's re-creations (fake_mutant_*) out of vLLM's table."""
    rows = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if not name.startswith(prefix):
            continue
        row = _row(os.path.join(root, name))
        if row is not None:
            rows.append(row)
    return _ordered(rows)


def _ordered(rows) -> list:
    """By mutant name, the control last."""
    return sorted(rows, key=lambda r: (r["mutant"] == CONTROL, r["mutant"]))


def catalogue(package_dir) -> dict:
    """The catalogue's mutants by name, read from the plugin package's MUTANTS (no vLLM needed)."""
    path = os.path.join(package_dir, "catalogue.py")
    spec = importlib.util.spec_from_file_location("_sleepwake_catalogue", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the catalogue {path}: pass --catalogue the plugin package's directory")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.MUTANTS)


def catalogue_names(package_dir):
    """The catalogue's mutant names."""
    return sorted(catalogue(package_dir))


def no_result_row(entry) -> dict:
    """The row of a catalogued mutant whose target wrote none: each class it lists has no result, so that
    the counts per class show it rather than leave it out of every column."""
    return {
        "mutant": entry.name,
        "issue": entry.issue,
        "bound": list(entry.bound),
        "size": entry.size,
        "passed": False,
        "problems": [NO_ROW],
        "no_row": True,
        "classes": {c: {"verdict": NO_RESULT} for c in entry.kills},
    }


def _bound(r) -> str:
    """The thresholds a mutant is sized against; an exact oracle (tokens, flags) fails at any size."""
    if r["mutant"] == CONTROL:
        return ""
    return ", ".join(r.get("bound") or []) or "exact oracle"


def _cell(result: dict) -> str:
    """A class's verdict with the oracle ids behind it: the expected ones that fired for a kill, the
    ones that fired instead for another oracle, why a liveness kill did not stand or a class is errored
    unjudged (its run cut short: verdict.cut_short)."""
    verdict = result["verdict"]
    text = CELL_TEXT.get(verdict, verdict)
    if verdict == "killed":
        return f"{text} ({', '.join(result.get('fired') or [])})"
    if verdict == "other oracle":
        fired = sorted({o for ids in result.get("oracles") or [] for o in ids})
        return f"{text} ({', '.join(fired)})"
    if result.get("unconfirmed"):
        return f"{text} ({result['unconfirmed']})"
    if result.get("interrupted"):
        return f"{text} (interrupted before the class finished)"
    return text


def _control_fired(control: dict) -> set:
    """Every oracle a control's class fired or ran into, liveness ones included."""
    return {o for key in ("oracles", "liveness") for ids in control.get(key) or [] for o in ids}


def confirm_by_controls(rows) -> list:
    """The rows with each kill that rests on liveness oracles alone (needs_control) kept only where the
    class's control ran under the same concurrency without firing them; else that class is errored and
    its row not killed. Copies: the rows read are left as they were."""
    controls = {}
    for r in rows:
        if r["mutant"] == CONTROL:
            for c, result in r["classes"].items():
                controls[c] = (r, result)
    out = []
    for r in rows:
        r = copy.deepcopy(r)
        for c, result in r["classes"].items():
            needs = result.get("needs_control") or []
            if r["mutant"] == CONTROL or result.get("verdict") != "killed" or not needs:
                continue
            control = controls.get(c)
            if control is None:
                why = f"{', '.join(needs)} alone, and no control of {c} ran"
            elif control[0].get("concurrency") != r.get("concurrency"):
                why = (
                    f"{', '.join(needs)} alone, and the control of {c} ran under other concurrency "
                    f"({control[0].get('concurrency')} against {r.get('concurrency')})"
                )
            elif set(needs) & _control_fired(control[1]):
                why = f"{', '.join(sorted(set(needs) & _control_fired(control[1])))}: the control of {c} fired it too"
            else:
                continue
            result["verdict"], result["unconfirmed"] = "errored", why
            r["passed"] = False
        out.append(r)
    return out


def outcome_counts(rows) -> dict:
    """class -> {outcome: number of mutants}, over the mutants (not the control)."""
    counts: dict[str, dict] = {}
    for r in rows:
        if r["mutant"] == CONTROL:
            continue
        for c, result in r["classes"].items():
            per = counts.setdefault(c, dict.fromkeys(OUTCOMES, 0))
            per[result["verdict"]] = per.get(result["verdict"], 0) + 1
    return counts


def table(rows, expected=None):
    """(markdown text, ok). expected: the catalogue (catalogue()), or None not to check for rows."""
    rows = confirm_by_controls(rows)
    missing = sorted(set(expected or ()) - {r["mutant"] for r in rows})
    rows = _ordered(rows + [no_result_row(expected[m]) for m in missing])
    mutants = [r for r in rows if r["mutant"] != CONTROL]
    controls = [r for r in rows if r["mutant"] == CONTROL]  # one per class (mutant_control_<class>)
    control_failed = sorted(c for r in controls if not r.get("passed") for c in r["classes"])
    classes = sorted({c for r in rows for c in r["classes"]})
    lines = [
        "| mutant | issue | bound | size | cell | " + " | ".join(classes) + " | verdict |",
        "|---" * (len(classes) + 6) + "|",
    ]
    for r in rows:
        cells = [_cell(r["classes"][c]) if c in r["classes"] else "" for c in classes]
        if r["mutant"] == CONTROL:
            verdict = "control passed" if r.get("passed") else "CONTROL FAILED"
        else:
            verdict = "killed" if r.get("passed") else "NOT KILLED"
        if r.get("problems"):
            verdict += " (" + "; ".join(r["problems"])[:120] + ")"
        lines.append(
            f"| {'(control)' if r['mutant'] == CONTROL else r['mutant']} | {r.get('issue', '')} "
            f"| {_bound(r)} | {r.get('size', '')} | {r.get('cell', '')} | " + " | ".join(cells) + f" | {verdict} |"
        )

    kills = {
        c: sorted(r["mutant"] for r in mutants if r["classes"].get(c, {}).get("verdict") == "killed") for c in classes
    }
    counts = outcome_counts(rows)
    lines += ["", "| class | " + " | ".join(OUTCOMES) + " |", "|---" * (len(OUTCOMES) + 1) + "|"]
    lines += [f"| {c} | " + " | ".join(str(counts.get(c, {}).get(o, 0)) for o in OUTCOMES) + " |" for c in classes]
    lines += ["", "kills per class:"]
    lines += [f"- {c}: {len(kills[c])}" + (f" ({', '.join(kills[c])})" if kills[c] else "") for c in classes]
    survivors = [r["mutant"] for r in mutants if not r.get("passed") and not r.get("no_row")]
    idle = [c for c in classes if not kills[c]]
    all_killed = bool(mutants) and not survivors and not missing
    lines += [
        "",
        f"every mutant killed: {'yes' if all_killed else 'no'} ({sum(bool(r.get('passed')) for r in mutants)}/"
        f"{len(mutants)}"
        + (f"; not killed: {', '.join(survivors)}" if survivors else "")
        + (f"; no result (no {ROW_FILE}): {', '.join(missing)}" if missing else "")
        + ")",
        f"every class killed at least one mutant: {'yes' if classes and not idle else 'no'}"
        + (f" (none killed by: {', '.join(idle)})" if idle else ""),
        "control: "
        + (
            "missing (no mutant_control_* target ran)"
            if not controls
            else f"FAILED ({', '.join(control_failed)})"
            if control_failed
            else f"passed ({len(controls)} classes)"
        ),
    ]
    ok = all_killed and bool(classes) and not idle and not control_failed
    return "\n".join(lines) + "\n", ok


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="bazel-testlogs/tests/mutants")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument(
        "--catalogue",
        default=DEFAULT_CATALOGUE,
        help="the plugin package whose MUTANTS must all have a row; '' not to check",
    )
    parser.add_argument(
        "--fake",
        action="store_true",
        help="tabulate the fake server's re-creations (fake_mutant_* targets, "
        "//tests/mutants:fake_mutants) instead of the vLLM mutants (mutant_*)",
    )
    args = parser.parse_args(argv[1:])
    expected = None
    if args.catalogue and os.path.isfile(os.path.join(args.catalogue, "catalogue.py")):
        expected = catalogue(args.catalogue)
    elif args.catalogue:
        print(
            f"note: no catalogue at {args.catalogue} (run from the workspace root): mutants that "
            "wrote no row are not detected",
            file=sys.stderr,
        )
    rows = load_rows(args.root, FAKE_PREFIX if args.fake else GPU_PREFIX)
    if not rows:
        print(
            f"no {ROW_FILE} under {args.root}/*/test.outputs: run the mutants first "
            "(tools/run_matrix.sh //tests/mutants:mutants) or pass the testlogs dir that holds them"
        )
        return 1
    text, ok = table(rows, expected)
    print(text, end="")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
