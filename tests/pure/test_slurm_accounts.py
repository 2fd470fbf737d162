"""The quota tree as Slurm accounts, associations and QOS, and the diff against what Slurm holds
(quotas.slurm_accounts: pure, no Django, no Slurm)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from quotas.slurm_accounts import (
    Account,
    Association,
    ClassRef,
    Member,
    Naming,
    PortalState,
    QuotaLimit,
    SlurmState,
    desired_state,
    flat_file,
    parse_current,
    parse_flat_file,
    parse_tracked,
    plan,
)

A100 = "gres/gpu:a100"
H800 = "gres/gpu:h800"
N = Naming("gp_", "root")
CLASSES = (
    ClassRef("inference-online", 1000, False, 1),
    ClassRef("training", 100, True),
    ClassRef("best-effort", -10, True),
)


def state(**kw) -> PortalState:
    base = dict(
        departments=(("AI", None), ("cv", "AI"), ("nlp", "AI")),
        projects=(("Vision1", "cv"), ("chat", "nlp")),
        limits=(
            QuotaLimit("department", "AI", A100, Decimal(16), Decimal(0)),
            QuotaLimit("department", "cv", A100, Decimal(8), Decimal(4)),
            QuotaLimit("project", "Vision1", A100, Decimal(8), Decimal(2)),
            QuotaLimit("project", "chat", A100, Decimal(4), None),
        ),
        members=(
            Member("Vision1", "alice", 0),
            Member("Vision1", "bob", 1),
            Member("chat", "alice", 0),
        ),
        classes=CLASSES,
        tres=frozenset({A100}),
    )
    return PortalState(**(base | kw))


def test_departments_and_projects_become_a_tree_of_prefixed_lowercase_accounts():
    d = desired_state(state(), N)
    assert {a.name: a.parent for a in d.accounts.values()} == {
        "gp_ai": "root", "gp_cv": "gp_ai", "gp_nlp": "gp_ai", "gp_vision1": "gp_cv", "gp_chat": "gp_nlp",
    }


def test_grptres_is_quota_plus_borrow_limit_and_no_borrow_limit_is_no_limit():
    d = desired_state(state(), N)
    assert d.accounts["gp_ai"].limit_map() == {A100: 16}
    assert d.accounts["gp_cv"].limit_map() == {A100: 12}
    assert d.accounts["gp_vision1"].limit_map() == {A100: 10}
    assert d.accounts["gp_chat"].limit_map() == {A100: None}  # b = None: no cap
    assert d.accounts["gp_nlp"].limit_map() == {A100: None}  # no quota node: no cap (DESIGN §3 rule 2)


def test_a_fractional_cap_is_rounded_down_and_said_so():
    limits = (QuotaLimit("project", "chat", A100, Decimal("2.5"), Decimal(0)),)
    d = desired_state(state(limits=limits), N)
    assert d.accounts["gp_chat"].limit_map() == {A100: 2}
    assert any("2.5 rounded down to 2" in n for n in d.notes)


def test_flavors_sharing_a_tres_add_up_and_an_uncapped_one_uncaps_it():
    limits = (
        QuotaLimit("project", "chat", A100, Decimal(2), Decimal(1)),
        QuotaLimit("project", "chat", A100, Decimal(4), Decimal(0)),
        QuotaLimit("project", "Vision1", A100, Decimal(2), Decimal(1)),
        QuotaLimit("project", "Vision1", A100, Decimal(4), None),
    )
    d = desired_state(state(limits=limits), N)
    assert d.accounts["gp_chat"].limit_map() == {A100: 7}
    assert d.accounts["gp_vision1"].limit_map() == {A100: None}


def test_a_tres_the_cluster_does_not_track_is_left_out_with_a_note():
    limits = (*state().limits, QuotaLimit("project", "chat", H800, Decimal(8), Decimal(0)))
    d = desired_state(state(limits=limits, tres=frozenset({A100, H800})), N, tracked=frozenset({"cpu", A100}))
    assert d.tres == frozenset({A100})
    assert d.accounts["gp_chat"].limit_map() == {A100: None}
    assert any(H800 in n for n in d.notes)


def test_clashing_names_are_skipped_with_their_subtree_and_reported():
    d = desired_state(state(projects=(("Vision1", "cv"), ("chat", "nlp"), ("CV", "AI"))), N)
    assert "gp_cv" not in d.accounts and "gp_vision1" not in d.accounts
    assert ("gp_vision1", "alice") not in d.associations
    assert any("gp_cv" in n and "clashes" in n for n in d.notes)


def test_members_get_the_qos_their_role_may_use_and_training_by_default():
    d = desired_state(state(), N)
    alice = d.associations[("gp_vision1", "alice")]
    bob = d.associations[("gp_vision1", "bob")]
    assert alice.qos == {"gp_training", "gp_best-effort"}  # inference-online needs a project admin
    assert bob.qos == {"gp_training", "gp_best-effort", "gp_inference-online"}
    assert alice.default_qos == bob.default_qos == "gp_training"
    no_training = tuple(c for c in CLASSES if c.name != "training")
    d = desired_state(state(classes=no_training), N)
    assert d.associations[("gp_vision1", "alice")].default_qos == "gp_best-effort"  # the lowest allowed


def test_a_user_in_two_projects_defaults_to_the_first_account_by_name():
    d = desired_state(state(), N)
    assert d.default_accounts == {"alice": "gp_chat", "bob": "gp_vision1"}


def test_users_who_cannot_be_slurm_users_are_noted_not_associated():
    d = desired_state(state(members=(Member("chat", "Alice Smith", 0), Member("chat", "carol", 0))), N)
    assert list(d.associations) == [("gp_chat", "carol")]
    assert any("Alice Smith" in n for n in d.notes)


def test_priority_classes_become_qos_that_preempt_the_lower_preemptible_ones():
    d = desired_state(state(), N)
    assert d.qos["gp_inference-online"].priority == 2000
    assert d.qos["gp_best-effort"].priority == 990  # value + 1000: Slurm's priority is unsigned
    assert d.qos["gp_inference-online"].preempt == {"gp_training", "gp_best-effort"}
    assert d.qos["gp_training"].preempt == {"gp_best-effort"}
    assert d.qos["gp_best-effort"].preempt == frozenset()
    assert d.qos["gp_training"].preempt_mode == "requeue"
    assert d.qos["gp_inference-online"].preempt_mode == "cluster"  # not preemptible (Slurm's OFF)


def test_a_bad_prefix_is_refused():
    with pytest.raises(ValueError, match="prefix"):
        Naming("GP-")


# -- the diff


def test_nothing_to_do_when_slurm_matches():
    d = desired_state(state(), N)
    assert not plan(d, d, "c1", N)


def test_from_scratch_every_object_is_added_parents_first_and_preempt_lists_after_the_qos():
    d = desired_state(state(), N)
    p = plan(d, SlurmState(tres=d.tres), "c1", N)
    cmds = p.commands
    adds = [c.split()[2] for c in cmds if c.startswith("add account")]
    assert adds.index("gp_ai") < adds.index("gp_cv") < adds.index("gp_vision1")
    last_qos_add = max(i for i, c in enumerate(cmds) if c.startswith("add qos"))
    assert all(i > last_qos_add for i, c in enumerate(cmds) if "set preempt=" in c)
    assert "add account gp_vision1 cluster=c1 parent=gp_cv description='gpupool project Vision1' " \
           "grptres=gres/gpu:a100=10" in cmds
    assert "add user alice account=gp_vision1 cluster=c1 qos=gp_best-effort,gp_training " \
           "defaultqos=gp_training" in cmds
    assert "modify user where name=alice cluster=c1 set defaultaccount=gp_chat" in cmds
    assert all("cluster=c1" in c for c in cmds if "account" in c or " user " in c)
    assert {c.kind for c in p.changes} == {"qos", "account", "association", "default_account"}


def test_drift_is_reported_with_before_and_after_and_repaired():
    d = desired_state(state(), N)
    current = SlurmState(
        accounts=dict(d.accounts) | {"gp_cv": replace(d.accounts["gp_cv"], limits=((A100, 99),))},
        associations=dict(d.associations) | {("gp_chat", "mallory"): Association("gp_chat", "mallory")},
        qos=dict(d.qos),
        default_accounts=dict(d.default_accounts),
        tres=d.tres,
    )
    p = plan(d, current, "c1", N)
    assert p.commands == [
        "modify account where name=gp_cv cluster=c1 set grptres=gres/gpu:a100=12",
        "delete user where name=mallory account=gp_chat cluster=c1",
    ]
    changed = {(c.kind, c.name, c.action): (c.before, c.after) for c in p.changes}
    assert changed[("account", "gp_cv", "modify")] == (
        {"parent": "gp_ai", "grptres": {A100: 99}}, {"parent": "gp_ai", "grptres": {A100: 12}}
    )
    assert changed[("association", "gp_chat/mallory", "delete")][1] is None


def test_a_limit_to_clear_is_set_to_minus_one():
    d = desired_state(state(), N)
    current = SlurmState(accounts=dict(d.accounts), associations=dict(d.associations), qos=dict(d.qos),
                         default_accounts=dict(d.default_accounts), tres=d.tres)
    current.accounts["gp_chat"] = replace(d.accounts["gp_chat"], limits=((A100, 4),))
    assert plan(d, current, "c1", N).commands == [
        "modify account where name=gp_chat cluster=c1 set grptres=gres/gpu:a100=-1"
    ]


def test_accounts_are_deleted_children_first_after_their_users_and_default_moves_before():
    d = desired_state(state(projects=(("chat", "nlp"),), departments=(("AI", None), ("nlp", "AI"))), N)
    full = desired_state(state(), N)
    current = SlurmState(accounts=dict(full.accounts), associations=dict(full.associations),
                         qos=dict(full.qos), default_accounts={"alice": "gp_vision1", "bob": "gp_vision1"},
                         tres=full.tres)
    cmds = plan(d, current, "c1", N).commands
    assert cmds.index("modify user where name=alice cluster=c1 set defaultaccount=gp_chat") < cmds.index(
        "delete user where name=alice account=gp_vision1 cluster=c1"
    )
    assert cmds.index("delete user where name=bob account=gp_vision1 cluster=c1") < cmds.index(
        "delete account where name=gp_vision1 cluster=c1"
    ) < cmds.index("delete account where name=gp_cv cluster=c1")


def test_a_default_account_the_site_chose_stays():
    d = desired_state(state(), N)
    current = SlurmState(accounts=dict(d.accounts), associations=dict(d.associations), qos=dict(d.qos),
                         default_accounts={"alice": "physics", "bob": ""}, tres=d.tres)
    assert plan(d, current, "c1", N).commands == [
        "modify user where name=bob cluster=c1 set defaultaccount=gp_vision1"
    ]


# -- parsing what sacctmgr prints


ASSOC = """root||||normal|
root|root|||normal|
gp_ai||root|gres/gpu:a100=16|normal|
gp_cv||gp_ai|cpu=64,gres/gpu:a100=12|normal|
gp_vision1||gp_cv|gres/gpu:a100=10|normal|
gp_vision1|alice|||gp_best-effort,gp_training|gp_training
physics||root|gres/gpu:a100=3|normal|
physics|alice|||normal|
"""
QOS = """normal|0||cluster
gp_training|1100|gp_best-effort|requeue
site_high|5000||cluster
"""
USERS = """alice|physics|gp_vision1
alice|physics|physics
root|root|root
"""


def test_only_what_the_prefix_owns_is_read_and_other_tres_are_ignored():
    cur = parse_current(ASSOC, QOS, USERS, N, frozenset({A100}))
    assert set(cur.accounts) == {"gp_ai", "gp_cv", "gp_vision1"}
    assert cur.accounts["gp_cv"] == Account("gp_cv", "gp_ai", ((A100, 12),))
    assert set(cur.associations) == {("gp_vision1", "alice")}
    assert cur.associations[("gp_vision1", "alice")].qos == {"gp_best-effort", "gp_training"}
    assert set(cur.qos) == {"gp_training"} and cur.qos["gp_training"].preempt == {"gp_best-effort"}
    assert cur.default_accounts["alice"] == "physics"


def test_tracked_tres_are_read_from_show_tres():
    assert parse_tracked("cpu||1\nmem||2\ngres|gpu|1001\ngres|gpu:a100|1002\n") == {
        "cpu", "mem", "gres/gpu", "gres/gpu:a100"
    }


def test_a_non_owned_account_never_appears_in_the_plan():
    d = desired_state(state(), N)
    cur = parse_current(ASSOC, QOS, USERS, N, d.tres)
    text = "\n".join(plan(d, cur, "c1", N).commands)
    assert "physics" not in text and "site_high" not in text and " normal" not in text


# -- the flat file


def test_the_flat_file_reads_back_as_the_desired_state():
    d = desired_state(state(), N)
    text = flat_file(d, "c1", N)
    assert "GrpTRES='gres/gpu:a100=10'" in text  # quoted: ':' splits fields
    cluster, accounts, users = parse_flat_file(text)
    assert cluster == "c1"
    assert {name: parent for name, (parent, _f) in accounts.items()} == {
        a.name: a.parent for a in d.accounts.values()
    }
    for name, (_parent, fields) in accounts.items():
        capped = {t: v for t, v in d.accounts[name].limits if v is not None}
        assert fields.get("GrpTRES", "") == ",".join(f"{t}={v}" for t, v in capped.items())
    assert set(users) == set(d.associations)
    assert users[("gp_vision1", "alice")] == {
        "DefaultAccount": "gp_chat", "DefaultQOS": "gp_training", "QOS": "gp_best-effort,gp_training"
    }


def test_the_flat_file_reader_refuses_what_it_does_not_know():
    with pytest.raises(ValueError):
        parse_flat_file("Cluster - 'c1'\nCoordinator - 'x'\n")
    with pytest.raises(ValueError):
        parse_flat_file("Account - 'a:Description=x\n")


# -- CPU and memory in GrpTRES (DESIGN §15): each flavor's per-unit share × its cap

PER_GPU = {"cpu_millicores_per_unit": 12_000, "memory_mib_per_unit": 126_976}  # 96 cores, 992 GiB / 8
MACHINE = frozenset({A100, "cpu", "mem"})


def machine_state(**kw) -> PortalState:
    limits = tuple(replace(row, **PER_GPU) for row in state().limits)
    return state(limits=limits, tres=MACHINE, **kw)


def test_cpu_and_memory_caps_are_the_flavors_share_times_its_gpu_cap():
    d = desired_state(machine_state(), N)
    # Vision1: 8 GPUs + 2 it may borrow = 10 GPUs' worth of cores and memory.
    assert d.accounts["gp_vision1"].limit_map() == {A100: 10, "cpu": 120, "mem": 10 * 126_976}
    assert d.accounts["gp_ai"].limit_map() == {A100: 16, "cpu": 192, "mem": 16 * 126_976}
    # No cap on the GPUs (no borrow limit): none on what comes with them.
    assert d.accounts["gp_chat"].limit_map() == {A100: None, "cpu": None, "mem": None}


def test_a_flavor_without_machine_figures_leaves_cpu_and_memory_uncapped():
    limits = (
        QuotaLimit("project", "Vision1", A100, Decimal(8), Decimal(0), **PER_GPU),
        QuotaLimit("project", "Vision1", H800, Decimal(8), Decimal(0)),
    )
    d = desired_state(state(limits=limits, tres=MACHINE | {H800}), N)
    assert d.accounts["gp_vision1"].limit_map() == {A100: 8, H800: 8, "cpu": None, "mem": None}


def test_a_cpu_flavors_quota_is_cores_and_brings_its_memory():
    limits = (
        QuotaLimit("project", "Vision1", "cpu", Decimal(64), Decimal(0), 1000, 4096),
        QuotaLimit("project", "Vision1", A100, Decimal(2), Decimal(0), **PER_GPU),
    )
    d = desired_state(state(limits=limits, tres=MACHINE), N)
    assert d.accounts["gp_vision1"].limit_map() == {A100: 2, "cpu": 64 + 24, "mem": 64 * 4096 + 2 * 126_976}


def test_a_fractional_share_of_cores_is_rounded_down_and_said_so():
    limits = (QuotaLimit("project", "chat", A100, Decimal(7), Decimal(0), 1714, 18_139),)
    d = desired_state(state(limits=limits, tres=MACHINE), N)
    assert d.accounts["gp_chat"].limit_map()["cpu"] == 11  # 7 × 1.714 = 11.998 cores
    assert any("cpu cap 11.998 rounded down to 11 (whole cores)" in n for n in d.notes)


def test_grptres_carries_cpu_and_memory_in_mib_and_their_drift_is_repaired():
    d = desired_state(machine_state(), N)
    scratch = plan(d, SlurmState(tres=d.tres), "c1", N).commands
    assert "add account gp_vision1 cluster=c1 parent=gp_cv description='gpupool project Vision1' " \
           "grptres=cpu=120,gres/gpu:a100=10,mem=1269760M" in scratch
    # Slurm shows memory with a unit; a cap changed behind the portal's back is drift.
    assoc = "gp_vision1||gp_cv|cpu=100,gres/gpu:a100=10,mem=1000G||\n"
    current = parse_current(assoc, "", "", N, d.tres)
    assert current.accounts["gp_vision1"].limit_map() == {A100: 10, "cpu": 100, "mem": 1000 * 1024}
    current.accounts.update({k: v for k, v in d.accounts.items() if k != "gp_vision1"})
    current.associations, current.qos = dict(d.associations), dict(d.qos)
    current.default_accounts = dict(d.default_accounts)
    p = plan(d, current, "c1", N)
    assert p.commands == ["modify account where name=gp_vision1 cluster=c1 set grptres=cpu=120,mem=1269760M"]
    [change] = p.changes
    assert (change.before["grptres"]["cpu"], change.after["grptres"]["cpu"]) == (100, 120)


def test_without_machine_figures_cpu_and_memory_limits_are_the_sites():
    d = desired_state(state(), N)  # tres: the GRES only
    assoc = "gp_vision1||gp_cv|cpu=50,gres/gpu:a100=10,mem=100G||\n"
    current = parse_current(assoc, "", "", N, d.tres)
    assert current.accounts["gp_vision1"].limit_map() == {A100: 10}
    assert not any("cpu" in c or "mem" in c for c in plan(d, current, "c1", N).commands)


def test_the_flat_file_carries_cpu_and_memory():
    d = desired_state(machine_state(), N)
    _cluster, accounts, _users = parse_flat_file(flat_file(d, "c1", N))
    assert accounts["gp_vision1"][1]["GrpTRES"] == "cpu=120,gres/gpu:a100=10,mem=1269760M"
