"""The one host-list parser (Slurm's ``n[1-3,05],gpu7`` syntax)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.hostlist import HostlistError, expand_hostlist


def test_ranges_lists_padding_and_plain_names_expand_in_order():
    assert expand_hostlist("n[1-3,5],m2") == ("n1", "n2", "n3", "n5", "m2")
    assert expand_hostlist("g[01-02]x") == ("g01x", "g02x")
    assert expand_hostlist("(null)") == () and expand_hostlist(" ") == ()


@pytest.mark.parametrize("bad", ["n[1-x]", "n[3-1]", "n[1", "n]1["])
def test_malformed_lists_name_the_text(bad):
    with pytest.raises(HostlistError, match="hostlist"):
        expand_hostlist(bad)


@given(st.lists(st.integers(0, 999), min_size=1, max_size=30, unique=True))
def test_a_compressed_list_expands_to_its_names(numbers):
    body = ",".join(str(k) for k in numbers)
    assert expand_hostlist(f"node[{body}]") == tuple(f"node{k}" for k in numbers)
