"""The bench's targets and its Markdown table, from the result dict bench.py writes as JSON."""

from __future__ import annotations

# (key in result["measured"], what, target, unit): the speed issue's targets, warm caches. The whole
# matrix's depends on how many GPUs the run had (MATRIX_TARGET_S); a count not listed has none.
MATRIX_TARGET_S = {1: 100.0, 2: 60.0}
TARGETS = (
    ("matrix_elapsed_s", "whole matrix, default settings (Bazel's elapsed time)", MATRIX_TARGET_S, "s"),
    ("longest_cell_s", "longest single GPU cell inside the matrix", 45.0, "s"),
    ("wait_share", "share of GPU cell time waiting on neighbours' memory phases", 0.10, "share"),
    ("warm_cell_s", "one warm cell, `bazel test` end to end", 10.0, "s"),
    ("warm_start_s", "warm start (the zygote already serves, idle machine)", 7.0, "s"),
    ("matrix_start_median_s", "median server start in the matrix", 15.0, "s"),
)
PHASE_COLUMNS = (
    ("import_and_args", "import + args"),
    ("engine_start", "engine start"),
    ("engine_init", "engine init"),
    ("api_up", "API up"),
    ("first_health", "first /health"),
)
# A start's ALLOCATE memory phase, from its worker's bracketed steps (tools/launcher/phase_plugin).
MEMORY_COLUMNS = (("allocate_held_s", "ALLOCATE held"), ("allocate_waited_s", "waited for it"))


def _seconds(value) -> str:
    return "%.1f s" % value if isinstance(value, (int, float)) else "-"


def _value(value, unit: str) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return "%.0f%%" % (100 * value) if unit == "share" else _seconds(value)


def targets(result: dict) -> list[dict]:
    measured = result.get("measured", {})
    gpus = len(result.get("machine", {}).get("gpus") or [])
    out = []
    for key, what, spec, unit in TARGETS:
        target = spec.get(gpus) if isinstance(spec, dict) else spec
        value = measured.get(key)
        out.append(
            {
                "key": key,
                "what": what,
                "target": target,
                "unit": unit,
                "measured": value,
                "met": None if value is None or target is None else value <= target,
                "why_missing": result.get("not_measured", {}).get(key),
            }
        )
    return out


def markdown(result: dict) -> str:
    machine = result.get("machine", {})
    lines = [
        "## Speed, measured %s" % result.get("date", "?"),
        "",
        "Machine: %s; %s CPUs. vLLM: %s."
        % ("; ".join(machine.get("gpus") or ["no GPU listed"]), machine.get("cpus", "?"), result.get("vllm", "?")),
        "Command: `%s`." % result.get("command", "?"),
        "",
        "| what | target | measured | met |",
        "|---|---|---|---|",
    ]
    for t in targets(result):
        if t["measured"] is None:
            measured, met = "not measured (%s)" % (t["why_missing"] or "phase not run"), "-"
        else:
            measured = _value(t["measured"], t["unit"])
            met = "-" if t["met"] is None else "yes" if t["met"] else "**no**"
        target = (
            "none for this GPU count"
            if t["target"] is None
            else "<= " + ("%.0f%%" % (100 * t["target"]) if t["unit"] == "share" else "%.0f s" % t["target"])
        )
        lines.append("| %s | %s | %s | %s |" % (t["what"], target, measured, met))
    starts = result.get("starts", [])
    if starts:
        lines += [
            "",
            "Server starts (%s): launch to GET /health 200; phases are medians from the server logs"
            " (vLLM's lines have 1-s timestamps)." % result.get("start_config", "?"),
            "",
            "| case | servers at once | median | max | median CPU | "
            + " | ".join(c for _, c in PHASE_COLUMNS + MEMORY_COLUMNS)
            + " |",
            "|---|---|---|---|---|" + "---|" * len(PHASE_COLUMNS + MEMORY_COLUMNS),
        ]
        for case in starts:
            phases = dict(case.get("phases", {}), **case.get("memory_phase", {}))
            lines.append(
                "| %s | %d | %s | %s | %s | %s |"
                % (
                    case["name"],
                    case["concurrency"],
                    _seconds(case.get("median_s")),
                    _seconds(case.get("max_s")),
                    _seconds(case.get("cpu_median_s")),
                    " | ".join(_seconds(phases.get(name)) for name, _ in PHASE_COLUMNS + MEMORY_COLUMNS),
                )
            )
    cell = result.get("cell")
    if cell:
        lines += [
            "",
            "Cell `%s`: %s."
            % (
                cell["target"],
                "; ".join(
                    "%s run %s in %s (test %s)"
                    % (run["label"], run["status"], _seconds(run["wall_s"]), _seconds(run.get("test_s")))
                    for run in cell["runs"]
                ),
            ),
        ]
    matrix = result.get("matrix")
    if matrix:
        starts_summary = matrix.get("starts", {})
        waves = matrix.get("waves_s") or []
        lines += [
            "",
            "Matrix (`%s`): %s, Bazel elapsed %s%s; %d GPU server starts (launch to /health), median %s"
            " (%s-%s), by start mode %s."
            % (
                matrix.get("command", "?"),
                matrix.get("status", "?"),
                _seconds(matrix.get("elapsed_s")),
                " (waves: %s)" % " + ".join(_seconds(w) for w in waves) if waves else "",
                starts_summary.get("count", 0),
                _seconds(starts_summary.get("median_s")),
                _seconds(starts_summary.get("min_s")),
                _seconds(starts_summary.get("max_s")),
                matrix.get("start_modes", {}),
            ),
        ]
        breakdown = matrix.get("breakdown") or {}
        if breakdown.get("cells"):
            lines += [
                "",
                "Where the matrix's time went: %d GPU cells, %s cell-seconds (median cell %s), %s cells in"
                " flight on average, critical path %s."
                % (
                    breakdown["cells"],
                    breakdown["cell_seconds"],
                    _seconds(breakdown["median_cell_s"]),
                    breakdown.get("mean_cells_in_flight", "?"),
                    _seconds(matrix.get("critical_path_s")),
                ),
                "",
                "| phase | cell-seconds | share | median cell |",
                "|---|---|---|---|",
            ]
            for phase in breakdown["phases"]:
                lines.append(
                    "| %s | %.0f | %.0f%% | %s |"
                    % (
                        phase["what"],
                        phase["cell_seconds"],
                        100 * (phase["share"] or 0),
                        _seconds(phase["median_cell_s"]),
                    )
                )
            by_class = breakdown.get("by_class") or {}
            if by_class:
                lines += [
                    "",
                    "| class | units | cell-seconds | starts (servers) | memory-phase waits | own work |"
                    " longest unit |",
                    "|---|---|---|---|---|---|---|",
                ]
                for name, c in sorted(by_class.items(), key=lambda kv: -kv[1]["longest_unit_s"]):
                    lines.append(
                        "| %s | %d | %.0f | %.0f (%d) | %.0f | %.0f | %s |"
                        % (
                            name,
                            c["units"],
                            c["cell_seconds"],
                            c["start_s"],
                            c["servers"],
                            c["memory_phase_wait_s"],
                            c["rest_s"],
                            _seconds(c["longest_unit_s"]),
                        )
                    )
    for note in result.get("notes", []):
        lines.append("- " + note)
    return "\n".join(lines) + "\n"
