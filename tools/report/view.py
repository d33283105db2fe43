"""The view of a run that the page (render.py) and the text (text.py) show: every cell of the front door x
runner x mode x class grid with its state, cases, logs and measurements; the vLLM/GPU identities; the
mutation table when mutants ran."""

from __future__ import annotations

import dataclasses
import os

from tools.matrix import (
    DOOR_CELLS,
    DOOR_EXCLUDED,
    EXECUTION_MODES,
    FAKE_INFIX,
    FRONT_DOORS,
    HTTP,
    RUNNERS,
    SLEEP_WAKE_CLASSES,
    cell_id,
    door_cells,
    shard_count,
    split_cell,
)
from tools.report import reading, time_spent
from tools.results import mutation_table, placement, testlogs, walk_gate

PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"
# A cell of the grid the spec makes no target for (a class a door cannot run, DOOR_EXCLUDED): nothing is
# missing there, so it is neither "not run" nor counted.
EXCLUDED = "excluded"
ABSENT = (NOT_RUN, EXCLUDED)  # no result of the cell in the testlogs
# States whose result proves nothing about this run. FLAGGED: those of cells this run ran; a stale
# cell's result is an earlier run's, counted apart (headline, failing).
NO_CASES, STALE, UNREADABLE = "no cases", "stale", "unreadable"
FLAGGED = (NO_CASES, UNREADABLE)
RAN = ("passed", "failed")  # outcomes of a case that ran; "skipped" did not
# A run's verdict (Run.verdict): what the headline opens with.
GREEN, PARTIAL, NOT_GREEN = "green", "partial", "not green"
VERDICT_PREFIX = {GREEN: "", PARTIAL: "PARTIAL: ", NOT_GREEN: "NOT GREEN: "}


def column_label(column: tuple[str, str, str]) -> str:
    door, runner, mode = column
    return f"{'HTTP' if door == HTTP else door} · {cell_id(runner, mode)}"


def exclusion(key: tuple[str, str, str, str]) -> str:
    """Why the spec makes no target for the grid cell (class, door, runner, mode); "" where it makes one.
    Classes the spec does not know (found in the testlogs only) are never excluded."""
    test_class, door, runner, mode = key
    if door == HTTP or test_class not in SLEEP_WAKE_CLASSES:
        return ""
    if test_class in DOOR_EXCLUDED.get(door, {}):
        return DOOR_EXCLUDED[door][test_class]
    if f"{runner}_{mode}" not in DOOR_CELLS.get(door, []):
        return f"tools/matrix.bzl DOOR_CELLS runs {door} on {', '.join(DOOR_CELLS.get(door, [])) or 'no cell'}"
    return ""


@dataclasses.dataclass
class Cell:
    test_class: str
    runner: str
    mode: str
    door: str = HTTP  # the front door the cell drives vLLM through (tools/matrix.bzl FRONT_DOORS)
    state: str = NOT_RUN
    note: str = ""  # why a cell is flagged or excluded
    dirs: list[str] = dataclasses.field(default_factory=list)  # one per shard and run, each with a test.xml
    # Result dirs an earlier bazel test left beside this run's (another --runs_per_test, shard count):
    # left out of the cell's cases and measurements, counted in the headline.
    stale_dirs: list[str] = dataclasses.field(default_factory=list)
    cases: list = dataclasses.field(default_factory=list)  # verdict.Case
    logs: list[reading.OutputFile] = dataclasses.field(default_factory=list)
    records: list[dict] = dataclasses.field(default_factory=list)
    bad_lines: int = 0  # lines of measurements.jsonl that were not JSON
    target: str = ""  # the Bazel target where it is not <class>[_<door>]_<runner>_<mode> (a fake tier cell)
    shard_seconds: list[float] = dataclasses.field(default_factory=list)  # per result dir, its cases' time

    @classmethod
    def at(cls, key: tuple[str, str, str, str], **fields) -> Cell:
        """The cell of a grid key (class, door, runner, mode)."""
        test_class, door, runner, mode = key
        return cls(test_class, runner, mode, door, **fields)

    @property
    def name(self) -> str:  # the Bazel target, as tools/defs.bzl cell_name() builds it
        if self.target:
            return self.target
        door = "" if self.door == HTTP else f"_{self.door}"
        return f"{self.test_class}{door}_{self.runner}_{self.mode}"

    @property
    def seconds(self) -> float:
        """The cell's test time, server starts included: its cases' JUnit times, of its longest shard
        (shards run side by side)."""
        return max(self.shard_seconds, default=0.0)

    @property
    def server_start_s(self) -> float | None:
        """The longest server start the cell recorded (launch to /health, lease waits included)."""
        starts = [r["value"] for r in self.records if r.get("key") == "server_start_s"]
        return max(starts) if starts else None

    @property
    def id(self) -> str:  # MRV1-eager, as tests record it (the same through every door)
        return cell_id(self.runner, self.mode)

    @property
    def label(self) -> str:  # its column's heading: "HTTP · MRV1-eager", "async_llm · MRV2-graph"
        return column_label((self.door, self.runner, self.mode))

    @property
    def failures(self) -> list:
        return [c for c in self.cases if c.outcome == "failed"]

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.cases)


WALK_CLASS, WALK_KEY = "state_walk", walk_gate.KEY  # test_state_walk.py records one per shard


def _walk_rows(cell) -> dict:
    """shard -> the last walk_coverage record of a walk cell's shard (a rerun shard's last record counts)."""
    rows = {}
    for r in cell.records:
        if r.get("key") == WALK_KEY and isinstance(r.get("value"), (int, float)):
            rows[r.get("shard")] = r
    return rows


def _states(rows) -> tuple[int | None, int | None]:
    """The states a cell's shards visited (the union of their visited_states) and the model's count;
    None where a shard recorded no list (a union of counts would overstate)."""
    rows = list(rows)
    if not rows or any(not isinstance(r.get("visited_states"), list) for r in rows):
        return None, None
    union = {str(s) for r in rows for s in r["visited_states"]}
    totals = {r.get("model_states") for r in rows}
    return len(union), (totals.pop() if len(totals) == 1 and isinstance(next(iter(totals)), int) else None)


@dataclasses.dataclass
class WalkCoverage:
    """What the state walk of one cell covered: summed over the shards that reported, and the cell's gate
    (tools/results/walk_gate.py: its shards' walked pairs that reach the worker, and its door's cells' walked
    pairs, against its door's)."""

    cell: Cell
    gate: walk_gate.Gate
    shards: int  # that walked their share to the end
    expected_shards: int  # the spec's shards for the cell's door and mode (tools/matrix.bzl SHARD_COUNTS)
    visited: int  # situation pairs the executed steps visited of the reporting shards' shares
    pairs: int
    steps: int
    walks: int
    unvisited: list[str]
    states: int | None = None  # distinct states the shards' steps left from or arrived at; None: not recorded
    model_states: int | None = None  # the model's reachable states, as the shards recorded it
    stopped: int = 0  # shards a failure stopped: their executed steps count in visited, the shard does not

    @property
    def complete(self) -> bool:
        """The cell walked every pair of its door and ran every probe (a full cell), not a part of them."""
        return self.gate.full

    @property
    def label(self) -> str:
        """The grid's column heading of a GPU cell; a fake tier cell's target, which has no column."""
        return self.cell.name if self.cell.target else self.cell.label

    def gate_text(self) -> str:
        g = self.gate
        worker = f"{g.worker_walked}/{g.worker_pairs if g.worker_pairs is not None else '?'} reaching the worker"
        walked = (
            f"{g.pairs_walked}/{g.door_pairs if g.door_pairs is not None else '?'} pairs of its door walked "
            f"(with its door's cells), {worker} in this cell"
        )
        probes = f"{g.probes_ran}/{g.door_probes if g.door_probes is not None else '?'} probes"
        return f"{walked}, {probes}: " + ("full" if g.full else "PARTIAL (" + "; ".join(g.reasons) + ")")


@dataclasses.dataclass
class Mutation:
    table: str  # tools/results/mutation_table.py's markdown
    ok: bool
    # "N of M" when the run is a selection of the catalogue's targets that judges green on its own rows (each
    # mutant that ran killed by its oracle, no control failed): the rest have no row, which is no defect of
    # theirs, and never a green whole table either.
    partial: str = ""

    def verdict(self) -> str:
        if self.ok:
            return "every mutant killed by its oracle, every control passed"
        if self.partial:
            return (
                f"PARTIAL: {self.partial} mutants ran, each killed by its oracle, no control failed; the rest have "
                "no result (run //tests/mutants:mutants for the whole table)"
            )
        return "NOT GREEN (a mutant survived, errored or was not applied, a control failed or a row is missing)"


@dataclasses.dataclass
class Run:
    testlogs: str
    classes: list[str]
    columns: list[tuple[str, str, str]]  # (door, runner, mode)
    cells: dict[tuple[str, str, str, str], Cell]  # (class, door, runner, mode)
    invocation: str | None  # the bazel commands of the build events; None: stale cells not told apart
    identities: dict[str, list[str]]  # vllm_identity text -> the cells that reported it
    identity_file: tuple[str, str] | None  # (path, text) of @sleepwake_gpu's identity.txt
    mutation: Mutation | None
    notes: list[str]
    fake: dict[str, Cell] = dataclasses.field(default_factory=dict)  # target -> the fake tier's cells
    # Where the CPU-only targets ran (tools/results/placement.py), from the build events; None without them.
    cpu_placement: placement.Placement | None = None
    # Where the run's time went and its replay on more GPUs, from its run record; None without one.
    time_spent: time_spent.TimeSpent | None = None

    def ordered(self) -> list[Cell]:
        return [self.cells[(c, door, runner, mode)] for c in self.classes for door, runner, mode in self.columns]

    def ran(self) -> list[Cell]:
        """The grid's cells this run ran: neither absent from the testlogs nor an earlier run's (stale)."""
        return [c for c in self.ordered() if c.state not in ABSENT + (STALE,)]

    def generated(self) -> list[Cell]:
        """The grid's cells the spec makes a target for (all but the excluded)."""
        return [c for c in self.ordered() if c.state != EXCLUDED]

    def excluded(self) -> dict[tuple[str, str], list[str]]:
        """(class, why) -> the doors whose cells of the class the spec leaves out, once per door."""
        out: dict[tuple[str, str], list[str]] = {}
        for cell in self.ordered():
            if cell.state != EXCLUDED:
                continue
            doors = out.setdefault((cell.test_class, cell.note), [])
            if cell.door not in doors:
                doors.append(cell.door)
        return out

    def states(self, cells=None) -> dict[str, int]:
        out: dict[str, int] = {}
        for cell in self.ordered() if cells is None else cells:
            out[cell.state] = out.get(cell.state, 0) + 1
        return out

    def headline(self) -> tuple[str, bool, str]:
        """(what a person should read first, whether every GPU cell that ran passed, the fake tier's
        count): how many of the cells that ran passed, on which vLLM and GPU, how long the slowest took;
        the fake tier counted apart (it is no GPU cell)."""
        # A stale cell's result is an earlier run's: a run of a few targets is judged on those (the
        # rest of bazel-testlogs is counted apart, never as failed).
        ran = self.ran()
        stale = sum(len(c.stale_dirs) for c in self.ordered() + list(self.fake.values()))
        passed = sum(c.state == PASSED for c in ran)
        where = ", ".join(x for x in (", ".join(f"vLLM {v}" for v in self.versions()), self.gpu_model()) if x)
        slowest = max(ran, key=lambda c: c.seconds, default=None)
        text = f"{passed}/{len(ran)} GPU cells passed" + (f", {where}" if where else "")
        if slowest is not None and slowest.seconds:
            text += f", slowest cell {slowest.seconds:.0f} s"
        fake = [c for c in self.fake.values() if c.state != STALE]
        fake_text = f"; fake tier: {sum(c.state == PASSED for c in fake)}/{len(fake)} passed" if fake else ""
        partial = self.partial_walks()
        if partial:
            text += f"; state walk partial in {', '.join(w.cell.name for w in partial)}"
        if stale:
            fake_text += f"; {stale} earlier result(s) in these testlogs not counted (stale)"
        return text, bool(ran) and passed == len(ran) and not partial, fake_text

    def partial_walks(self) -> list[WalkCoverage]:
        """The walk cells that ran but did not walk every pair of their door and run every probe
        (tools/results/walk_gate.py): a run holding one is never a green full run."""
        return [w for w in self.walk_coverage() if not w.complete]

    def verdict(self) -> str:
        """GREEN, PARTIAL (every GPU cell that ran passed, but a walk cell is partial) or NOT_GREEN."""
        ran = self.ran()
        passed = bool(ran) and all(c.state == PASSED for c in ran)
        if self.partial_walks():
            return PARTIAL if passed or not ran else NOT_GREEN
        return GREEN if passed else NOT_GREEN

    def failing(self) -> list[Cell]:
        """The cells of this run that failed or prove nothing (flagged), GPU cells first; stale cells
        (an earlier run's results) are no part of this run's verdict."""
        return [c for c in self.ordered() + list(self.fake.values()) if c.state in (FAILED,) + FLAGGED]

    def walk_coverage(self) -> list[WalkCoverage]:
        """Per state-walk cell that ran (the GPU grid's, then the fake tier's), its coverage from the
        shards' walk_coverage records."""
        out = []
        fake = [c for c in self.fake.values() if c.state not in ABSENT + (STALE,)]
        cells = [c for c in self.ran() + fake if c.test_class == WALK_CLASS]
        by_cell = {id(c): _walk_rows(c) for c in cells}
        # The GPU grid's cells of a door split the pairs above the worker (tools/results/walk_gate.py): each is
        # judged with its door's cells that ran. A fake tier cell walks its door alone (SLEEPWAKE_WALK_SHARE).
        by_door: dict[str, list] = {}
        for c in self.ran():
            if c.test_class == WALK_CLASS:
                by_door.setdefault(c.door, []).extend(by_cell[id(c)].values())
        for cell in cells:
            rows = by_cell[id(cell)]
            door_rows = None if cell.target else by_door.get(cell.door)
            stopped = sum(1 for r in rows.values() if r.get("completed") is False)
            expected = shard_count(WALK_CLASS, cell.mode, cell.door)
            out.append(
                WalkCoverage(
                    cell,
                    walk_gate.judge(rows, expected, door_rows),
                    len(rows) - stopped,
                    expected,
                    sum(int(r["value"]) for r in rows.values()),
                    sum(int(r.get("shard_pairs", 0)) for r in rows.values()),
                    sum(int(r.get("steps", 0)) for r in rows.values()),
                    sum(int(r.get("walks", 0)) for r in rows.values()),
                    sorted(str(u) for r in rows.values() for u in r.get("unvisited", [])),
                    *_states(rows.values()),
                    stopped=stopped,
                )
            )
        return out

    def _identity_lines(self, key: str) -> list[str]:
        texts = list(self.identities) + ([self.identity_file[1]] if self.identity_file else [])
        return [
            line.split(":", 1)[1].strip()
            for text in texts
            for line in text.splitlines()
            if line.split(":", 1)[0].strip().lower() == key
        ]

    def versions(self) -> list[str]:
        """The vLLM releases the GPU cells' servers reported (GET /version), else the identity's."""
        served = {
            str(r["vllm_version"])
            for cell in self.ordered()
            for r in cell.records
            if r.get("key") == "server_start_s" and r.get("vllm_version")
        }
        return sorted(served or {line.split()[0] for line in self._identity_lines("vllm") if line})

    def gpu_model(self) -> str:
        """The GPU's name from the identity ("gpus: 0, NVIDIA H200, <driver>, <memory>; 1, ...")."""
        for line in self._identity_lines("gpus"):  # third_party/gpu_runtime writes "gpus: ..."
            fields = [f.strip() for f in line.split(";")[0].split(",")]
            if len(fields) > 1:
                return fields[1]
        return ""


def split_fake(name: str) -> tuple[str, str, str, str] | None:
    """(class, door, runner, mode) of a fake tier target name, <class>_fake_<runner>_<mode>[_vllm<version>]
    [_<door>] (tools/defs.bzl sleep_wake_fake_tier), or None for any other target."""
    head, sep, tail = name.partition(FAKE_INFIX)
    if not sep or not head:
        return None
    runner, _, rest = tail.partition("_")
    mode, _, rest = rest.partition("_")
    if runner not in RUNNERS or mode not in EXECUTION_MODES:
        return None
    return head, _trailing_door(rest), runner, mode


def _trailing_door(rest: str) -> str:
    """The in-process door a fake target's name ends with, else HTTP (a bare cell, or _vllm<version>)."""
    # Longest first: "async_llm" ends with "llm".
    for door in sorted(FRONT_DOORS[1:], key=len, reverse=True):
        if rest == door or rest.endswith("_" + door):
            return door
    return HTTP


def _judge(cell: Cell, invocation: reading.Invocation | None) -> None:
    """Fill the cell's cases and state from its result dirs: those of the last bazel test where its
    build events are known; a cell with none of those is stale."""
    if invocation is not None:
        current = [d for d in cell.dirs if os.path.realpath(os.path.join(d, "test.xml")) in invocation.xmls]
        cell.stale_dirs = [d for d in cell.dirs if d not in current]
        if current:
            cell.dirs = current
        else:
            cell.state = STALE
            cell.note = "not among the results of this run's bazel tests (left by an earlier one)"
    for result_dir in cell.dirs:
        xml = os.path.join(result_dir, "test.xml")
        try:
            cases = reading.junit_cases(xml)
            cell.cases += cases
            cell.shard_seconds.append(sum(c.seconds for c in cases))
        except ValueError as e:
            cell.state, cell.note = UNREADABLE, str(e)
            return
    if cell.state == STALE:
        return
    if cell.failures:
        cell.state = FAILED
    elif not any(c.outcome in RAN for c in cell.cases):
        reasons = [r for d in cell.dirs for r in reading.skip_reasons(os.path.join(d, "test.xml"))]
        cell.state = NO_CASES
        cell.note = "; ".join(reasons) or "no test case ran (zero cases, or a filter or shard that selected none)"
    else:
        cell.state = PASSED


def _read_cell(cell: Cell, invocation) -> None:
    _judge(cell, invocation)
    for result_dir in cell.dirs:
        records, bad = reading.measurements(result_dir)
        cell.records += records
        cell.bad_lines += bad
        cell.logs += reading.log_files(result_dir)


def _mutation(root: str, workspace: str) -> Mutation | None:
    rows = mutation_table.load_rows(os.path.join(root, reading.MUTANTS_DIR))
    if not rows:
        return None
    catalogue = os.path.join(workspace, mutation_table.DEFAULT_CATALOGUE)
    expected = mutation_table.catalogue(catalogue) if os.path.isfile(os.path.join(catalogue, "__init__.py")) else None
    text, ok = mutation_table.table(rows, expected)
    partial = ""
    if not ok and expected:
        ran = {r["mutant"] for r in rows} - {mutation_table.CONTROL}
        if ran and mutation_table.table(rows)[1]:  # green on the rows that are there
            partial = f"{len(ran)} of {len(expected)}"
    return Mutation(table=text, ok=ok, partial=partial)


def _read_cells(matrix: str, invocation, notes: list[str]) -> tuple[dict, dict]:
    """(the GPU cells by (class, door, runner, mode), the fake tier's by target) that left results under
    the package dir `matrix`; a note per cell with lines of measurements that are not JSON."""
    cells, fake = {}, {}
    for name in sorted(os.listdir(matrix)) if os.path.isdir(matrix) else []:
        faked = split_fake(name)
        parts = faked or split_cell(name)
        dirs = reading.result_dirs(os.path.join(matrix, name)) if parts else []
        if parts is None or not dirs:
            continue
        cell = Cell.at(parts, dirs=dirs, target=name if faked else "")
        _read_cell(cell, invocation)
        if faked:
            fake[name] = cell
            continue
        cells[parts] = cell
        if cell.bad_lines:
            notes.append(f"{name}: {cell.bad_lines} line(s) of measurements.jsonl are not JSON and were left out")
    return cells, fake


def _fill_grid(cells: dict) -> tuple[list[str], list[tuple[str, str, str]]]:
    """(the grid's rows, its columns): the spec's, and any class or door cell the testlogs hold beyond it;
    every grid cell without a result is added to `cells`, excluded where the spec makes no target for it."""
    classes = list(SLEEP_WAKE_CLASSES)
    columns = door_cells()  # the grid's columns (door, runner, mode), in the spec's order
    for test_class, door, runner, mode in cells:
        if test_class not in classes:
            classes.append(test_class)
        if (door, runner, mode) not in columns:  # a door cell off the spec's DOOR_CELLS (an earlier spec's)
            columns.append((door, runner, mode))
    columns.sort(key=lambda column: FRONT_DOORS.index(column[0]))  # stable: the spec's order within a door
    for key in [(c, *column) for c in classes for column in columns]:
        if key not in cells:
            why = exclusion(key)
            cells[key] = Cell.at(key, state=EXCLUDED, note=why) if why else Cell.at(key)
    return sorted(classes), columns


def _stalled(cells: list[Cell]) -> list[str]:
    """A note counting the timed samples this run's cells left out for a stall of the host (tests/core/
    stalls.py): never judged, so a run with many proves less than its green says."""
    counts: dict[str, int] = {}
    for cell in cells:
        if cell.state in ABSENT + (STALE,):
            continue
        for r in cell.records:
            if r.get("key") == testlogs.STALLED_KEY:
                counts[str(r.get("oracle"))] = counts.get(str(r.get("oracle")), 0) + 1
    if not counts:
        return []
    by = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
    return [f"{sum(counts.values())} timed sample(s) left out, not judged, for a stall of the host: {by}"]


def load_run(root: str, workspace: str, bep_paths: list[str], record: dict | None = None) -> Run:
    """The run whose results are under the testlogs dir `root`. bep_paths: its build event files, one per
    bazel test of the run (tools/run_matrix.sh's waves); none: stale cells are not told apart. record: its
    run record (tools/bench/run_record.py), for where its time went."""
    notes = []
    invocation = None
    found = [p for p in bep_paths if os.path.isfile(p)]
    if found:
        invocation = reading.read_invocation(found)
        under = os.path.realpath(root) + os.sep
        if not any(x.startswith(under) for x in invocation.xmls):
            notes.append(
                f"the build events {', '.join(found)} name no result under {root}: they describe "
                "another run and were ignored, so stale cells cannot be told from this run's"
            )
            invocation = None
    else:
        notes.append(
            f"no build event file ({', '.join(bep_paths) or 'none given'}): a stale cell, left in "
            "bazel-testlogs by an earlier bazel test, cannot be told from this run's"
        )
    cells, fake = _read_cells(os.path.join(root, reading.MATRIX_DIR), invocation, notes)
    # Results of this run kept in another output base (run_matrix.sh's CPU-only targets): read there too.
    for other in invocation.roots if invocation else []:
        if os.path.realpath(other) != os.path.realpath(root):
            more, more_fake = _read_cells(os.path.join(other, reading.MATRIX_DIR), invocation, notes)
            cells.update({k: c for k, c in more.items() if k not in cells or cells[k].state == STALE})
            fake.update({k: c for k, c in more_fake.items() if k not in fake or fake[k].state == STALE})
    classes, columns = _fill_grid(cells)
    notes += _stalled(list(cells.values()) + list(fake.values()))
    identities: dict[str, list[str]] = {}
    for cell in cells.values():
        for r in cell.records:
            if r.get("key") == "server_start_s" and r.get("vllm_identity"):
                names = identities.setdefault(str(r["vllm_identity"]), [])
                if cell.name not in names:
                    names.append(cell.name)
    identity_path = reading.identity_file(root)
    return Run(
        testlogs=root,
        classes=classes,
        columns=columns,
        cells=cells,
        invocation=invocation.command if invocation else None,
        identities=identities,
        identity_file=(identity_path, reading.read_text(identity_path)) if identity_path else None,
        mutation=_mutation(root, workspace),
        notes=notes,
        fake=fake,
        cpu_placement=placement.read(found) if invocation else None,
        time_spent=time_spent.read(record) if record else None,
    )
