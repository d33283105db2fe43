"""Whether the server under test is live and answering, and the errors that say it is not.

A kill is an expected oracle firing on a live, answering server (tests/core/verdict.py). A call the
server never answered, an engine dead behind vLLM's API server (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 keeps
it answering: 5xx to every call, /health 503), a connection refused or broken: each proves nothing about
the defect under test, whatever check ran into it, and is raised as Errored, which carries no oracle id.
An Errored names the liveness oracle that observed it (api.answers for no answer, api.status for an
error answer, server.healthy for /health); the verdict counts that id only for a mutant whose defect
*is* a hang or an error answer (the catalogue marks those), and only where the class's control did not
fire it.

The conftest registers each server it starts (watch); after any oracle fails, the JUnit hook probes them
(after_oracle), so an oracle that fired on a server that was dead or not answering by then is judged
errored too, whatever function raised it.
"""

from __future__ import annotations

import requests

from tools.results.testlogs import ERRORED_PROPERTY, LIVENESS_PROPERTY  # what the verdicts read back

HEALTH = "/health"


class Errored(Exception):
    """The server under test did not answer as a live server does: proof of nothing about its
    behaviour. kind: what happened; liveness: the oracle that observed it, if any."""

    kind = "errored"

    def __init__(self, message: str, liveness: str | None = None):
        super().__init__(message)
        self.liveness = liveness

    def properties(self) -> list[tuple[str, str]]:
        return [(ERRORED_PROPERTY, self.kind)] + ([(LIVENESS_PROPERTY, self.liveness)] if self.liveness else [])


class NoAnswer(Errored):
    """A call the server took and did not answer within the client's bound."""

    kind = "no answer"

    def __init__(self, message: str, liveness: str | None = "api.answers"):
        super().__init__(message, liveness)


class EngineDead(Errored):
    """The API server answers, its engine does not: GET /health is not 200."""

    kind = "engine dead"


class Unreachable(Errored):
    """Nothing answers: the connection was refused, reset or cut (a stream that broke off mid-way)."""

    kind = "unreachable"


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # as the client: an http_proxy of the environment must not route the probe
    return session


def probe(url: str, timeout_s: float, what: str, dead_liveness: str = "server.healthy") -> Errored | None:
    """None when GET /health answers 200 within timeout_s; else the Errored that says why the server is
    not live (dead_liveness: the oracle the engine's death is charged to)."""
    try:
        with _session() as session:
            status = session.get(url.rstrip("/") + HEALTH, timeout=timeout_s).status_code
    except requests.Timeout:
        return NoAnswer(f"{what}; GET {HEALTH} then did not answer within {timeout_s:g} s either")
    except requests.RequestException as e:
        return Unreachable(f"{what}; GET {HEALTH} then could not connect: {e!r}")
    if status != 200:
        return EngineDead(
            f"{what}; GET {HEALTH} then answered {status}: the engine is dead behind the API server", dead_liveness
        )
    return None


def confirm(url: str, timeout_s: float, what: str, dead_liveness: str = "server.healthy") -> None:
    """Returns when the server is live (GET /health 200 within timeout_s); else raises its Errored."""
    error = probe(url, timeout_s, what, dead_liveness)
    if error is not None:
        raise error


_watched: dict[str, float] = {}  # url -> probe timeout, the servers the running tests use


def watch(url: str, timeout_s: float) -> None:
    _watched[url] = timeout_s


def unwatch(url: str) -> None:
    _watched.pop(url, None)


def after_oracle(failure: BaseException) -> list[tuple[str, str]]:
    """The JUnit properties that mark an oracle failure errored: those of the first watched server that
    is not live now; [] when every one is (or none is watched: the engine tier, unit tests)."""
    for url, timeout_s in list(_watched.items()):
        error = probe(url, timeout_s, f"after the oracle failed ({str(failure).splitlines()[0][:200]})")
        if error is not None:
            return error.properties()
    return []
