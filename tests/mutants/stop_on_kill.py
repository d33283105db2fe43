"""A pytest plugin for mutant_test.py's inner run: stop once a test failed the way the catalogue expects
(SLEEPWAKE_MUTANT_KILL_IDS, comma-separated), since the class is then killed and the rest of its tests
would only spend time (each of the state walk's shards starts a server). That is a sound expected oracle
on a live server, or an expected liveness oracle (verdict.LIVENESS: listed only for a mutant whose defect
is one), fired or met as no answer (the errored case's liveness mark): that kill stands once the class's
control is clean (tools/results/mutation_table.py), and running on for a sound one would cost a hang's
timeout in every shard. Any other failure lets the run go on: a later test may still be the kill; so does
an expected oracle on a server no longer live (marked errored), which is no kill."""

import os

# verdict imports only the catalogue (on the inner run's PYTHONPATH: the site dir) and testlogs.
from tests.core.verdict import LIVENESS
from tools.results.testlogs import ERRORED_PROPERTY, LIVENESS_PROPERTY, ORACLE_PROPERTY  # what oracle.py writes

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
        met = {v for n, v in report.user_properties if n == LIVENESS_PROPERTY}
        if stops(report.failed, fired, errored, self.ids, met) and self.session is not None:
            self.session.shouldstop = (
                f"killed by {', '.join(sorted(kills(fired, errored, self.ids, met)))}: the rest need not run"
            )


def kills(fired: set, errored: bool, ids: set, met=frozenset()) -> set:
    """The expected ids a failed case kills with: its oracles but the liveness ones where it is not
    errored, and the liveness oracles it fired or met (met: its liveness marks) wherever it is."""
    sound = set() if errored else (fired & ids) - LIVENESS.keys()
    return sound | ((fired | set(met)) & ids & LIVENESS.keys())


def stops(failed: bool, fired: set, errored: bool, ids: set, met=frozenset()) -> bool:
    """Whether a test's outcome ends the run: it failed and kills (kills). Also what stops a target's other
    shards (mutant_test.py), read from a finished shard's JUnit cases."""
    return failed and bool(kills(fired, errored, ids, met))


def pytest_configure(config):
    ids = [i for i in os.environ.get(ENV, "").split(",") if i]
    if ids:
        config.pluginmanager.register(StopOnKill(ids), "sleepwake-stop-on-kill")
