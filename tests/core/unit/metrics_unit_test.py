import math

import pytest

from tests.core import metrics

GAUGE_TEXT = """\
# HELP vllm:engine_sleep_state Engine sleep state
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 0.0
vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 1.0
vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="discard_all"} 0.0
"""


def test_parse_labels_values_and_comments():
    text = (
        '# HELP x y\nplain 3\nwith_ts{a="1"} 2.5 1700000000000\n'
        'escaped{path="C:\\\\dir",q="say \\"hi\\"",n="a\\nb",comma="x,y"} -1e-3\n'
        'special{k="v",} NaN\ninf +Inf\n\n'
    )
    samples = metrics.parse_prometheus(text)
    assert [s.name for s in samples] == ["plain", "with_ts", "escaped", "special", "inf"]
    assert samples[0].labels == {} and samples[0].value == 3
    assert samples[1].labels == {"a": "1"} and samples[1].value == 2.5
    assert samples[2].labels == {"path": "C:\\dir", "q": 'say "hi"', "n": "a\nb", "comma": "x,y"}
    assert samples[2].value == -1e-3
    assert math.isnan(samples[3].value) and samples[3].labels == {"k": "v"}
    assert samples[4].value == math.inf


@pytest.mark.parametrize("line", ["no_value", "bad{a=1} 2", "x 1 2 3"])
def test_malformed_lines_raise(line):
    with pytest.raises(ValueError):
        metrics.parse_prometheus(line)


def test_sleep_state_reads_gauge():
    assert metrics.sleep_state(GAUGE_TEXT) == metrics.GAUGE_LEVEL1


def test_sleep_state_missing_gauge_explains():
    with pytest.raises(ValueError, match="disable-log-stats"):
        metrics.sleep_state("vllm:num_requests_running 0\n")


def test_sleep_state_incomplete_labels():
    text = 'vllm:engine_sleep_state{engine="0",sleep_state="awake"} 1\n'
    with pytest.raises(ValueError, match="lacks labels"):
        metrics.sleep_state(text)


def test_sleep_state_engines_must_agree():
    other = GAUGE_TEXT.replace('engine="0"', 'engine="1"')
    assert metrics.sleep_state(GAUGE_TEXT + other) == metrics.GAUGE_LEVEL1
    flipped = other.replace('"awake"} 0.0', '"awake"} 1.0')
    with pytest.raises(ValueError, match="disagree"):
        metrics.sleep_state(GAUGE_TEXT + flipped)


def test_expected_gauges_follow_record_sleep_state():
    # vllm/v1/metrics/loggers.py record_sleep_state: awake=1 unless sleep; level picks the flag.
    assert metrics.GAUGE_BY_LEVEL == {0: metrics.gauge(0, 0, 0), 1: metrics.gauge(0, 1, 0), 2: metrics.gauge(0, 0, 1)}
    assert metrics.GAUGE_AWAKE == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}


# A page as vLLM serves it after a few requests: the gauge among hundreds of other samples.
BUSY_PAGE = (
    "".join(f'vllm:request_latency_bucket{{engine="0",le="{i}"}} {i}.0\n' for i in range(500))
    + GAUGE_TEXT
    + 'vllm:engine_sleep_state_seconds{engine="0"} 3.0\nvllm:generation_tokens_total{engine="0"} 42.0\n'
)


def test_parse_with_names_keeps_only_those_samples():
    every = metrics.parse_prometheus(BUSY_PAGE)
    wanted = ["vllm:generation_tokens_total", metrics.SLEEP_STATE_METRIC]
    assert metrics.parse_prometheus(BUSY_PAGE, wanted) == [s for s in every if s.name in wanted]
    assert len(metrics.parse_prometheus(BUSY_PAGE, wanted)) == 4  # not the longer name that starts alike


def test_sleep_state_parses_only_the_gauges_lines():
    # The other samples are not parsed at all: a line that is no sample line would fail a full parse.
    page = "not a sample line\n" + BUSY_PAGE
    with pytest.raises(ValueError):
        metrics.parse_prometheus(page)
    assert metrics.sleep_state(page) == metrics.GAUGE_LEVEL1
