"""RecordingOutputQueue: EngineCoreProc's output queue, with the output socket's view on the timeline.

In a server, EngineCoreProc puts (client index, EngineCoreOutputs) on `output_queue` and its output
thread sends them over ZMQ. Here the queue stays a real queue.Queue (the engine and the test's client
both use it as one) and also records each finished request output on the Timeline, so a test sees
when an abort or a finish left the engine relative to the worker's sleep.
"""

from __future__ import annotations

import queue

from tests.engine.fakes.timeline import Timeline


class RecordingOutputQueue(queue.Queue):
    def __init__(self, timeline: Timeline) -> None:
        super().__init__()
        self.timeline = timeline

    def put(self, item, block=True, timeout=None) -> None:
        if isinstance(item, tuple):  # else EngineCoreProc.ENGINE_CORE_DEAD, a bytes sentinel
            for output in item[1].outputs or ():
                if output.finish_reason is not None:
                    self.timeline.add("output", output.request_id, output.finish_reason.name)
        super().put(item, block, timeout)
