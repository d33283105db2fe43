"""The demo's neighbour moves only once the sleep has begun freeing: vLLM's Worker.sleep reads its baseline
before it frees anything, so only an allocation after a rise can land between its two reads."""

from tests.memory_phase import neighbour

PAGE = neighbour.RISE_BYTES
BASE = 60 << 30


class Script:
    """The phase and device-wide free memory a neighbour would read, one reading per call."""

    def __init__(self, held: list[bool], free: list[int]):
        self.held, self.free = iter(held), iter(free)
        self.free_reads = 0

    def inside(self) -> bool:
        return next(self.held)

    def free_bytes(self) -> int:
        self.free_reads += 1
        return next(self.free)


def test_it_moves_at_the_first_reading_a_page_above_the_one_it_began_with():
    script = Script(held=[True] * 4, free=[BASE, BASE, BASE + PAGE, BASE + 8 * PAGE])
    assert neighbour.released_while_held(script.inside, script.free_bytes)
    assert script.free_reads == 3  # the baseline, one reading unchanged, the rise: no reading after it


def test_a_phase_that_ends_before_any_rise_is_no_release():
    script = Script(held=[True, True, False], free=[BASE, BASE, BASE])
    assert not neighbour.released_while_held(script.inside, script.free_bytes)


def test_less_than_a_page_is_not_a_release():
    script = Script(held=[True, True, False], free=[BASE, BASE + PAGE - 1, BASE + PAGE - 1])
    assert not neighbour.released_while_held(script.inside, script.free_bytes)
