"""The bench's targets and its Markdown table, from the result dict bench.py writes as JSON."""

from __future__ import annotations

# (key in result["measured"], what, target in seconds): issue 13's targets on 2 x H200, warm caches.
TARGETS = (
    ("matrix_elapsed_s", "whole matrix, default settings (Bazel's elapsed time)", 60.0),
    ("warm_cell_s", "one warm cell, `bazel test` end to end", 10.0),
    ("warm_start_s", "warm start (the zygote already serves, idle machine)", 7.0),
    ("matrix_start_median_s", "median server start in the matrix", 15.0),
)
PHASE_COLUMNS = (("import_and_args", "import + args"), ("engine_start", "engine start"),
                 ("engine_init", "engine init"), ("api_up", "API up"), ("first_health", "first /health"))


def _seconds(value) -> str:
    return "%.1f s" % value if isinstance(value, (int, float)) else "-"


def targets(result: dict) -> list[dict]:
    measured = result.get("measured", {})
    out = []
    for key, what, target in TARGETS:
        value = measured.get(key)
        out.append({"key": key, "what": what, "target_s": target, "measured_s": value,
                    "met": None if value is None else value <= target,
                    "why_missing": result.get("not_measured", {}).get(key)})
    return out


def markdown(result: dict) -> str:
    machine = result.get("machine", {})
    lines = ["## Speed, measured %s" % result.get("date", "?"), "",
             "Machine: %s; %s CPUs. vLLM: %s." % ("; ".join(machine.get("gpus") or ["no GPU listed"]),
                                                 machine.get("cpus", "?"), result.get("vllm", "?")),
             "Command: `%s`." % result.get("command", "?"), "",
             "| what | target | measured | met |", "|---|---|---|---|"]
    for t in targets(result):
        if t["measured_s"] is None:
            measured, met = "not measured (%s)" % (t["why_missing"] or "phase not run"), "-"
        else:
            measured, met = _seconds(t["measured_s"]), "yes" if t["met"] else "**no**"
        lines.append("| %s | <= %.0f s | %s | %s |" % (t["what"], t["target_s"], measured, met))
    starts = result.get("starts", [])
    if starts:
        lines += ["", "Server starts (%s): launch to GET /health 200; phases are medians from the server logs"
                  " (vLLM's lines have 1-s timestamps)." % result.get("start_config", "?"), "",
                  "| case | servers at once | median | max | " + " | ".join(c for _, c in PHASE_COLUMNS) + " |",
                  "|---|---|---|---|" + "---|" * len(PHASE_COLUMNS)]
        for case in starts:
            phases = case.get("phases", {})
            lines.append("| %s | %d | %s | %s | %s |" % (
                case["name"], case["concurrency"], _seconds(case.get("median_s")), _seconds(case.get("max_s")),
                " | ".join(_seconds(phases.get(name)) for name, _ in PHASE_COLUMNS)))
    cell = result.get("cell")
    if cell:
        lines += ["", "Cell `%s`: %s." % (cell["target"], "; ".join(
            "%s run %s in %s (test %s)" % (run["label"], run["status"], _seconds(run["wall_s"]),
                                            _seconds(run.get("test_s"))) for run in cell["runs"]))]
    matrix = result.get("matrix")
    if matrix:
        starts_summary = matrix.get("starts", {})
        lines += ["", "Matrix (`%s`): %s, Bazel elapsed %s; %d GPU server starts (launch to /health), median %s"
                  " (%s-%s), by start mode %s."
                  % (matrix.get("command", "?"), matrix.get("status", "?"), _seconds(matrix.get("elapsed_s")),
                     starts_summary.get("count", 0), _seconds(starts_summary.get("median_s")),
                     _seconds(starts_summary.get("min_s")), _seconds(starts_summary.get("max_s")),
                     matrix.get("start_modes", {}))]
        breakdown = matrix.get("breakdown") or {}
        if breakdown.get("cells"):
            lines += ["", "Where the matrix's time went: %d GPU cells, %s cell-seconds (median cell %s), %s cells in"
                      " flight on average, critical path %s." % (
                          breakdown["cells"], breakdown["cell_seconds"], _seconds(breakdown["median_cell_s"]),
                          breakdown.get("mean_cells_in_flight", "?"), _seconds(matrix.get("critical_path_s"))), "",
                      "| phase | cell-seconds | share | median cell |", "|---|---|---|---|"]
            for phase in breakdown["phases"]:
                lines.append("| %s | %.0f | %.0f%% | %s |" % (phase["what"], phase["cell_seconds"],
                                                            100 * (phase["share"] or 0), _seconds(phase["median_cell_s"])))
    for note in result.get("notes", []):
        lines.append("- " + note)
    return "\n".join(lines) + "\n"
