"""docs/walk/dealt.md is the model's deal: the committed page is what tests.core.walk.dealt prints."""

import os

from tests.core.walk import dealt

PAGE = os.path.join("docs", "walk", "dealt.md")


def test_the_page_is_generated_from_the_model():
    with open(PAGE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == dealt.render(), f"{PAGE} is stale: regenerate it with python3 -m tests.core.walk.dealt > {PAGE}"
