"""The fake server module has the public surface of tools/launcher/server.py, which it stands in for.

The fixtures take VllmServer from whichever module SLEEPWAKE_SERVER_MODULE names, so a name, method,
parameter or attribute the real module gains and the fake lacks would break only on a GPU, and one the
fake has and the real module lacks would let a test pass on the fake and fail on a GPU. Both fail here.
ServerConfig and the rest of tools/launcher/config.py are not faked: the fixtures always import the
real module.
"""

import __future__
import inspect

import pytest

import tools.launcher.server as real
from tests.sleep_wake.fakes import fake_server as fake
from tools.launcher.config import ServerConfig

REPLACED = {"VllmServer"}  # everything else the fake re-exports unchanged


def public_names(module) -> set[str]:
    """What `from module import X` offers: names not starting with "_", neither modules (json, os,
    ...) nor `from __future__` flags."""
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not inspect.ismodule(value)
            and not isinstance(value, __future__._Feature)}


def class_members(cls) -> dict[str, str]:
    """Public attribute name -> its kind and signature, for methods and properties of cls."""
    out = {}
    for name, value in inspect.getmembers(cls):
        if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
            continue
        if isinstance(inspect.getattr_static(cls, name), property):
            out[name] = "property"
        elif callable(value):
            out[name] = f"method{inspect.signature(value)}"
    return out


def instance_attributes(cls) -> set[str]:
    """Public attributes an instance has before start() (the real one's __init__ touches no GPU)."""
    return {name for name in vars(cls(ServerConfig(log_dir="/nonexistent"))) if not name.startswith("_")}


def test_same_public_names():
    assert public_names(fake) == public_names(real), (
        f"only in tools.launcher.server: {sorted(public_names(real) - public_names(fake))}; only in the "
        f"fake: {sorted(public_names(fake) - public_names(real))}. Give the fake the same names.")


@pytest.mark.parametrize("name", sorted(public_names(real) - REPLACED))
def test_every_other_name_is_the_real_object(name):
    assert getattr(fake, name) is getattr(real, name), (
        f"fake_server.{name} is not tools.launcher.server.{name}: re-export it, or add it to REPLACED "
        "and to this test's comparisons")


def test_vllm_server_methods_and_signatures_match():
    want, got = class_members(real.VllmServer), class_members(fake.VllmServer)
    assert got == want, (
        "VllmServer differs (name: real / fake): "
        + ", ".join(f"{n}: {want.get(n)} / {got.get(n)}" for n in sorted(set(want) | set(got))
                    if want.get(n) != got.get(n)))


def test_vllm_server_instance_attributes_match():
    want, got = instance_attributes(real.VllmServer), instance_attributes(fake.VllmServer)
    assert got == want, f"only on the real server: {sorted(want - got)}; only on the fake: {sorted(got - want)}"


def test_the_drift_checks_see_a_difference():
    # The comparisons above must be able to fail: a class with one method fewer differs.
    class Smaller(fake.VllmServer):
        gpu_bytes = None

    assert class_members(Smaller) != class_members(real.VllmServer)
