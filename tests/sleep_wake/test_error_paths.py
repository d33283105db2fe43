"""Misuse of the sleep API: each call gets the status vLLM 0.26.0 gives, leaves the state unchanged
(flags + gauge), and the server still serves golden tokens."""

from tests.core import expect, measure, oracle, thresholds

# Expected HTTP status per misuse, with the reason from vLLM 0.26.0's source.
EXPECTED_STATUS = {
    "sleep_level_not_integer": (
        400,
        "entrypoints/serve/dev/sleep/api_router.py sleep() does int(level): ValueError, which the "
        "app's exception_handler maps to 400 BadRequestError (serve/utils/error_response.py "
        "create_error_response: ValueError -> HTTPStatus.BAD_REQUEST)",
    ),
    "wake_unknown_tag": (
        200,
        "v1/executor/abstract.py wake_up logs 'Tag X is not in sleeping tags' (or 'Executor is "
        "not sleeping.') and returns; the router answers 200",
    ),
    "wake_while_awake": (200, "v1/executor/abstract.py wake_up: 'Executor is not sleeping.' warning, no-op (#31618)"),
    "sleep_while_asleep": (200, "v1/executor/abstract.py sleep: 'Executor is already sleeping.' warning, no-op"),
}


def _expect_status(recorder, resp, case: str, issue: str) -> None:
    status, reason = EXPECTED_STATUS[case]
    recorder.record(measure.current_test(), f"status:{case}", resp.status_code, "http status", body=resp.text[:300])
    oracle.equal("api.status", resp.status_code, status, f"[{issue}] {case} ({reason}); body {resp.text[:300]}")


class TestErrorPaths:
    def test_invalid_level(self, client, golden, recorder):
        for level in ("abc", "1.5", ""):
            resp = client.sleep(level=level, check=False)
            _expect_status(recorder, resp, "sleep_level_not_integer", issue="sleep level validation")
            expect.awake(client, step=f"sleep?level={level!r}", issue="invalid level is a no-op")
        expect.golden(client, golden, step="invalid sleep levels", issue="invalid level is a no-op")

        # An integer outside 0..2 is not rejected by the supported releases: pinned per release, so a
        # fix (or a worse change) shows.
        pin = thresholds.divergence("sleep_level_out_of_range_accepted", client.version())
        resp = client.sleep(level=3, check=False)
        recorder.record(
            measure.current_test(),
            "status:sleep_level_out_of_range",
            resp.status_code,
            "http status",
            body=resp.text[:300],
        )
        seen = client.state()
        observed = {"status": resp.status_code, "is_sleeping": seen.is_sleeping, "gauge": seen.gauge}
        expected = {k: v for k, v in pin.expected.items() if k != "weights_discarded"}
        oracle.equal("api.level_out_of_range", observed, expected, f"sleep?level=3, {pin.describe()}")
        if pin.expected["weights_discarded"]:
            # Level 3 discarded the weights like level 2: only the level-2 recovery brings golden back.
            client.recover_from_level2()
            expect.awake(client, step="level-2 recovery after sleep?level=3", issue="level 3")
        expect.golden(client, golden, step="sleep?level=3", issue="level 3")

    def test_unknown_tag(self, client, golden, recorder):
        resp = client.wake_up(["no_such_tag"], check=False)
        _expect_status(recorder, resp, "wake_unknown_tag", issue="unknown tag")
        expect.awake(client, step="wake unknown tag while awake", issue="unknown tag is a no-op")

        client.sleep(level=1)
        resp = client.wake_up(["no_such_tag"], check=False)
        _expect_status(recorder, resp, "wake_unknown_tag", issue="unknown tag")
        # The executor ignored the tag (still asleep); the gauge was rewritten to awake anyway.
        expect.partially_asleep(client, step="wake unknown tag during level 1", issue="unknown tag is a no-op")
        client.wake_up()
        expect.awake(client, step="full wake after the unknown tag", issue="unknown tag")
        expect.golden(client, golden, step="unknown tag", issue="unknown tag is a no-op")

    def test_wake_while_awake_and_sleep_while_asleep(self, client, golden, recorder):
        """Both are harmless (#31618): 200, flags unchanged, output golden."""
        for tags in (None, ["weights"], ["kv_cache"]):
            resp = client.wake_up(tags, check=False)
            _expect_status(recorder, resp, "wake_while_awake", issue="#31618")
            expect.awake(client, step=f"wake_up(tags={tags}) while awake", issue="#31618")

        client.sleep(level=1)
        resp = client.sleep(level=1, check=False)
        _expect_status(recorder, resp, "sleep_while_asleep", issue="#31618")
        expect.asleep(client, 1, step="second sleep level 1", issue="#31618")

        # Waking a tag that is already awake must not abort the rest of the wake (#31618).
        client.wake_up(["weights"])
        resp = client.wake_up(["weights"], check=False)
        _expect_status(recorder, resp, "wake_while_awake", issue="#31618")
        expect.partially_asleep(client, step="wake weights twice (kv_cache still asleep)", issue="#31618")
        client.wake_up(["kv_cache"])
        expect.awake(client, step="wake kv_cache after the repeated weights wake", issue="#31618")
        expect.golden(client, golden, step="repeated wake/sleep", issue="#31618")
