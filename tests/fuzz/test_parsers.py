"""Every parser a user, a job or a node can feed answers bad input with its own error.

For each target of ``tests/fuzz/targets.py``: its seeds are accepted (so the mutations start
from valid input), mutated seeds and inputs from scratch are accepted or refused with the
parser's own error naming the input, never another exception. The number of inputs each
parser was fed is printed at the end of the run (``tests/fuzz/conftest.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import TRIED
from tests.fuzz.mutate import arbitrary, mutated
from tests.fuzz.targets import TARGETS, KnownBug

NAMES = sorted(name for name, t in TARGETS.items() if t.kind != "bytes")
FILES = sorted(name for name, t in TARGETS.items() if t.kind == "bytes")
# A quarter of the profile's examples per parser and generator (ci: 37 + 37 a parser), so that
# 23 parsers stay within a minute; benchmarks/soak/fuzz.py runs thousands per parser.
EXAMPLES = settings(max_examples=max(5, settings.default.max_examples // 4))


def _feed(name: str, data: Any) -> None:
    TRIED[name] += 1
    # A KnownBug is a finding reported, not yet fixed, in a module this suite does not own.
    with contextlib.suppress(KnownBug):
        TARGETS[name].check(data)


@pytest.mark.parametrize("name", NAMES + FILES)
def test_the_seeds_are_accepted(name: str) -> None:
    target = TARGETS[name]
    for seed in target.seeds:
        TRIED[name] += 1
        assert target.check(seed) is None, f"{name}: a seed is refused"


@pytest.mark.parametrize("name", NAMES + FILES)
@EXAMPLES
@given(data=st.data())
def test_mutated_inputs(name: str, data: st.DataObject) -> None:
    _feed(name, data.draw(mutated(TARGETS[name])))


@pytest.mark.parametrize("name", NAMES + FILES)
@EXAMPLES
@given(data=st.data())
def test_inputs_from_scratch(name: str, data: st.DataObject) -> None:
    _feed(name, data.draw(arbitrary(TARGETS[name])))
