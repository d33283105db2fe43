"""A start's phases from the server log: the launcher's marks and vLLM 0.26.0's lines."""

import datetime

from tools.bench import start_phases
from tools.launcher.server import HEALTHY_MARK, LAUNCH_MARK

LAUNCHED = datetime.datetime(2026, 11, 30, 21, 4, 40, 250000).timestamp()


def _log(start_line, launched=LAUNCHED, healthy=LAUNCHED + 9.5):
    return (
        "\n".join(
            [
                "# sleepwake launcher, 2026-11-30 21:04:40 (%s %.3f)" % (LAUNCH_MARK, launched),
                '# argv: ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]',
                start_line,
                "[sleepwake supervisor 21256] forked by zygote 20455 (key k): the server skips importing vllm",
                "(APIServer pid=21257) INFO 11-30 21:04:41 [api_utils.py:325] vLLM server version 0.26.0,"
                " serving model m",
                "(APIServer pid=21257) INFO 11-30 21:04:41 [api_utils.py:273] non-default args: {'model': 'm'}",
                "(EngineCore pid=21300) INFO 11-30 21:04:43 [core.py:117] Initializing a V1 LLM engine"
                " (v0.26.0) with config: x",
                "(EngineCore pid=21300) INFO 11-30 21:04:45 [gpu_model_runner.py:5348] Model loading took"
                " 0.46 GiB memory and 0.612345 seconds",
                "(EngineCore pid=21300) INFO 11-30 21:04:47 [core.py:348] init engine (profile, create kv cache,"
                " warmup model) took 3.91 s",
                "(APIServer pid=21257) INFO 11-30 21:04:49 [api_server.py:677] Starting vLLM server on http://127.0.0.1:1",
                "(APIServer pid=21257) INFO:     Application startup complete.",
                "%s %.3f" % (HEALTHY_MARK, healthy),
                "(APIServer pid=21257) INFO 11-30 21:05:01 [api_server.py:677] Starting vLLM server on http://127.0.0.1:1",
            ]
        )
        + "\n"
    )


def test_phases_of_a_zygote_start():
    parsed = start_phases.parse(_log("# start: zygote key k, supervisor 21256"))
    assert parsed["start_mode"] == "zygote"
    assert parsed["phases"] == {
        "import_and_args": 0.75,
        "engine_start": 2.0,
        "engine_init": 4.0,
        "api_up": 2.0,
        "first_health": 0.75,
        "total": 9.5,
    }
    assert parsed["reported"] == {"model_load_s": 0.612345, "engine_init_s": 3.91}


def test_a_missing_event_drops_only_the_phases_that_need_it():
    text = _log("# start: plain (the zygote is unavailable: no host)").replace("Starting vLLM server on", "x")
    parsed = start_phases.parse(text)
    assert parsed["start_mode"] == "plain"
    assert set(parsed["phases"]) == {"import_and_args", "engine_start", "engine_init", "total"}


def test_a_log_without_marks_has_no_phases():
    assert start_phases.parse("stub vLLM server 1 starting\n")["phases"] == {}


def test_the_workers_bracketed_steps_give_how_long_the_start_held_its_allocate_phase():
    log = (
        '(EngineCore pid=11413) sleepwake-memory-phase {"step": "init_device", "waited_s": 1.69, "held_s": 0.97, '
        '"pid": 11413, "process_bytes": 1}\n'
        '(EngineCore pid=11413) sleepwake-memory-phase {"step": "load_model", "waited_s": 3.28, "held_s": 1.73, '
        '"pid": 11413, "process_bytes": 2}\n'
    )
    assert start_phases.parse(log)["memory_phase"] == {"allocate_held_s": 2.7, "allocate_waited_s": 4.97}
    assert start_phases.parse("no records")["memory_phase"] == {}
