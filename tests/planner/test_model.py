from planner.model import Assignment


def test_assignment_sorts_gpus_so_equal_sets_compare_equal():
    a = Assignment((("n2", 1), ("n1", 3), ("n1", 0)), 8, 32.0)
    b = Assignment((("n1", 0), ("n1", 3), ("n2", 1)), 8, 32.0)
    assert a == b
    assert a.gpus == (("n1", 0), ("n1", 3), ("n2", 1))
    assert a.per_node == (("n1", 2), ("n2", 1))
    assert a.nodes == ("n1", "n2")


def test_node_shares_split_by_gpus_and_add_up():
    # 3 GPUs on n1 and 1 on n2; 10 CPUs: 10*3//4 = 7 and 10*1//4 = 2, remainder 1 to n1.
    a = Assignment((("n1", 0), ("n1", 1), ("n1", 2), ("n2", 0)), 10, 40.0)
    assert a.node_shares() == (("n1", 8, 30.0), ("n2", 2, 10.0))
    assert sum(c for _, c, _ in a.node_shares()) == a.cpus
    assert a.share_on("n2") == (2, 10.0)
    assert a.share_on("n9") == (0, 0.0)


def test_single_node_share_is_the_total():
    a = Assignment((("n1", 0),), 3, 62.5)
    assert a.node_shares() == (("n1", 3, 62.5),)


def test_same_resources_ignores_float_noise_but_not_plan_changes():
    a = Assignment((("n1", 0),), 3, 62.5)
    assert a.same_resources(Assignment((("n1", 0),), 3, 62.5 + 1e-9))
    assert not a.same_resources(Assignment((("n1", 0),), 4, 62.5))
    assert not a.same_resources(Assignment((("n1", 0),), 3, 62.5, plan={"zero": 2}))
