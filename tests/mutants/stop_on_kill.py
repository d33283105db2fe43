"""A pytest plugin for mutant_test.py's inner run: stop once a test failed with one of the oracle ids
the catalogue expects (SLEEPWAKE_MUTANT_KILL_IDS, comma-separated), since the class is then killed and the
rest of its tests would only spend time (each of the state walk's shards starts a server). Any other
failure lets the run go on: a later test may still be the kill; so does an expected oracle on a server
no longer live (marked errored), which is no kill, and an expected liveness oracle (verdict.LIVENESS),
whose kill stands only if the class's control did not fire it (needs_control, checked by the table
later): stopping there could cut short the sound kill that makes the class's verdict certain."""

import os

# verdict imports only the catalogue (on the inner run's PYTHONPATH: the site dir) and testlogs.
from tests.mutants.verdict import LIVENESS
from tools.results.testlogs import ERRORED_PROPERTY, ORACLE_PROPERTY  # the JUnit properties oracle.py writes

ENV = "SLEEPWAKE_MUTANT_KILL_IDS"


class StopOnKill:
    def __init__(self, ids):
        self.ids = set(ids)
        self.session = None

    def pytest_sessionstart(self, session):
        self.session = session

    def pytest_runtest_logreport(self, report):
        fired = {v for n, v in report.user_properties if n == ORACLE_PROPERTY}
        errored = any(n == ERRORED_PROPERTY for n, _ in report.user_properties)
        if stops(report.failed, fired, errored, self.ids) and self.session is not None:
            self.session.shouldstop = (
                f"killed by {', '.join(sorted(sound_kills(fired, self.ids)))}: the rest need not run"
            )


def sound_kills(fired: set, ids: set) -> set:
    """The expected ids among those fired whose kill needs no control: all but the liveness oracles."""
    return (fired & ids) - LIVENESS.keys()


def stops(failed: bool, fired: set, errored: bool, ids: set) -> bool:
    """Whether a test's outcome ends the run: it failed with an expected oracle id that is no liveness
    oracle, not errored. Also what stops a target's other shards (mutant_test.py), read from a finished
    shard's JUnit cases."""
    return failed and bool(sound_kills(fired, ids)) and not errored


def pytest_configure(config):
    ids = [i for i in os.environ.get(ENV, "").split(",") if i]
    if ids:
        config.pluginmanager.register(StopOnKill(ids), "sleepwake-stop-on-kill")
