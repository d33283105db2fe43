"""The bench's targets and Markdown table."""

from tools.bench import bench_table

RESULT = {
    "date": "2026-12-01T10:00:00",
    "command": "bazel run --config=gpu //tools/bench -- --out bench.json",
    "machine": {"gpus": ["NVIDIA H200, 143771 MiB, 580.1", "NVIDIA H200, 143771 MiB, 580.1"], "cpus": 32},
    "vllm": "vllm 0.26.0",
    "start_config": "MRV1-eager",
    "measured": {"warm_start_s": 6.4, "matrix_elapsed_s": 149.3, "warm_cell_s": 9.9},
    "not_measured": {"matrix_start_median_s": "cut after 80 s (budget)"},
    "starts": [
        {
            "name": "zygote, warm",
            "concurrency": 1,
            "median_s": 6.4,
            "max_s": 6.4,
            "cpu_median_s": 9.1,
            "phases": {"import_and_args": 0.7, "engine_init": 3.1},
        }
    ],
    "cell": {
        "target": "//tests/sleep_wake:scheduler_gate_mrv1_eager",
        "runs": [{"label": "warm", "status": "PASSED", "wall_s": 9.9, "test_s": 8.7}],
    },
    "notes": ["a note"],
}


def test_targets_say_met_unmet_and_why_missing():
    by_key = {t["key"]: t for t in bench_table.targets(RESULT)}
    assert by_key["warm_start_s"]["met"] is True and by_key["matrix_elapsed_s"]["met"] is False
    assert by_key["warm_cell_s"]["met"] is True  # 9.9 <= 10
    missing = by_key["matrix_start_median_s"]
    assert missing["met"] is None and missing["why_missing"] == "cut after 80 s (budget)"


def test_markdown_has_the_machine_the_targets_and_the_phases():
    text = bench_table.markdown(RESULT)
    assert "## Speed, measured 2026-12-01T10:00:00" in text
    assert "NVIDIA H200, 143771 MiB, 580.1; NVIDIA H200" in text and "vLLM: vllm 0.26.0" in text
    assert "| whole matrix, default settings (Bazel's elapsed time) | <= 60 s | 149.3 s | **no** |" in text
    assert "| warm start (the zygote already serves, idle machine) | <= 7 s | 6.4 s | yes |" in text
    assert "| median server start in the matrix | <= 15 s | not measured (cut after 80 s (budget)) | - |" in text
    assert "| zygote, warm | 1 | 6.4 s | 6.4 s | 9.1 s | 0.7 s | - | 3.1 s | - | - |" in text
    assert "warm run PASSED in 9.9 s (test 8.7 s)" in text and "- a note" in text


def test_markdown_shows_where_the_matrix_time_went():
    result = dict(
        RESULT,
        matrix={
            "command": "tools/run_matrix.sh",
            "status": "passed",
            "elapsed_s": 171.8,
            "critical_path_s": 162.7,
            "waves_s": [90.1, 81.7],
            "starts": {"count": 64, "median_s": 12.6, "min_s": 6.1, "max_s": 34.4},
            "start_modes": {"zygote": 64},
            "breakdown": {
                "cells": 60,
                "cell_seconds": 4800.0,
                "median_cell_s": 80.0,
                "mean_cells_in_flight": 27.9,
                "phases": [
                    {
                        "key": "memory_phase_wait_s",
                        "what": "waiting on GPU neighbours' memory phases",
                        "cell_seconds": 2400.0,
                        "share": 0.5,
                        "median_cell_s": 40.0,
                    }
                ],
                "by_class": {
                    "state_walk": {
                        "units": 24,
                        "servers": 24,
                        "cell_seconds": 3007.0,
                        "start_s": 610.0,
                        "memory_phase_wait_s": 778.0,
                        "rest_s": 1605.0,
                        "longest_unit_s": 134.0,
                        "lease_wait_s": 0.0,
                        "stop_s": 14.0,
                    }
                },
            },
        },
    )
    text = bench_table.markdown(result)
    assert "64 GPU server starts (launch to /health), median 12.6 s" in text
    assert "Bazel elapsed 171.8 s (waves: 90.1 s + 81.7 s)" in text
    assert (
        "60 GPU cells, 4800.0 cell-seconds (median cell 80.0 s), 27.9 cells in flight on average, "
        "critical path 162.7 s" in text
    )
    assert "| waiting on GPU neighbours' memory phases | 2400 | 50% | 40.0 s |" in text
    assert "| state_walk | 24 | 3007 | 610 (24) | 778 | 1605 | 134.0 s |" in text


def test_targets_follow_the_gpu_count_and_the_wait_share_is_a_percentage():
    one_gpu = dict(
        RESULT,
        machine={"gpus": ["NVIDIA H200, 143771 MiB, 580.1"], "cpus": 16},
        measured={"matrix_elapsed_s": 180.0, "longest_cell_s": 124.8, "wait_share": 0.41},
        starts=[
            {
                "name": "zygote, 8 at once",
                "concurrency": 8,
                "median_s": 13.4,
                "max_s": 20.0,
                "phases": {},
                "memory_phase": {"allocate_held_s": 4.9, "allocate_waited_s": 5.9},
            }
        ],
    )
    text = bench_table.markdown(one_gpu)
    assert "| whole matrix, default settings (Bazel's elapsed time) | <= 100 s | 180.0 s | **no** |" in text
    assert "| longest single GPU cell inside the matrix | <= 45 s | 124.8 s | **no** |" in text
    assert "| share of GPU cell time waiting on neighbours' memory phases | <= 10% | 41% | **no** |" in text
    assert "| ALLOCATE held | waited for it |" in text and "| - | 4.9 s | 5.9 s |" in text
    four = dict(one_gpu, machine={"gpus": ["H200"] * 4})
    assert (
        "| whole matrix, default settings (Bazel's elapsed time) | none for this GPU count | 180.0 s | - |"
        in bench_table.markdown(four)
    )
