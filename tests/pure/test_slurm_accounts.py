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
    PendingJob,
    PortalState,
    QuotaLimit,
    SlurmState,
    blocked_accounts,
    budget_holds,
    desired_state,
    flat_file,
    hold_comment,
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
    assert {a.name: a.parent for a in d.accounts.values() if not a.name.startswith("gp_borrow")} == {
        "gp_ai": "root", "gp_cv": "gp_ai", "gp_nlp": "gp_ai", "gp_vision1": "gp_cv", "gp_chat": "gp_nlp",
    }


def test_grptres_is_the_quota_and_no_quota_node_is_no_limit():
    d = desired_state(state(), N)
    assert d.accounts["gp_ai"].limit_map() == {A100: 16}
    assert d.accounts["gp_cv"].limit_map() == {A100: 8}
    assert d.accounts["gp_vision1"].limit_map() == {A100: 8}
    assert d.accounts["gp_chat"].limit_map() == {A100: 4}  # however much it may borrow
    assert d.accounts["gp_nlp"].limit_map() == {A100: None}  # no quota node: no cap (DESIGN §3 rule 2)


def test_borrowing_is_a_mirror_tree_capped_at_the_borrow_room_in_one_preemptible_qos():
    d = desired_state(state(), N)
    mirror = {
        a.name: (a.parent, a.limit_map()) for a in d.accounts.values() if a.name.startswith("gp_borrow")
    }
    assert mirror == {
        "gp_borrow": ("root", {A100: None}),
        "gp_borrow.ai": ("gp_borrow", {A100: 16}),  # a department: its quota and borrow limit
        "gp_borrow.cv": ("gp_borrow.ai", {A100: 12}),
        "gp_borrow.vision1": ("gp_borrow.cv", {A100: 2}),  # a project: its borrow limit
        "gp_borrow.nlp": ("gp_borrow.ai", {A100: None}),
        "gp_borrow.chat": ("gp_borrow.nlp", {A100: None}),  # no borrow limit: no cap of its own
    }
    alice = d.associations[("gp_borrow.vision1", "alice")]
    assert (alice.qos, alice.default_qos) == ({"gp_borrow"}, "gp_borrow")
    assert d.default_accounts["alice"] == "gp_chat"  # never a borrow account
    borrow = d.qos["gp_borrow"]
    assert (borrow.priority, borrow.preempt, borrow.preempt_mode) == (0, frozenset(), "requeue")
    assert all("gp_borrow" in q.preempt for name, q in d.qos.items() if name != "gp_borrow")
    assert borrow.preempt_exempt_seconds is None  # no minimum runtime: Slurm's default
    # Each class QOS its class's minimum runtime; the borrow QOS the one the caller gives.
    classes = tuple(replace(c, min_runtime_seconds=600) for c in CLASSES)
    d = desired_state(state(classes=classes, preempt_exempt_seconds=300), N)
    exempt = {name: q.preempt_exempt_seconds for name, q in d.qos.items()}
    assert exempt["gp_training"] == exempt["gp_best-effort"] == 600
    assert d.qos["gp_borrow"].preempt_exempt_seconds == 300
    assert d.qos["gp_inference-online"].preempt_exempt_seconds is None  # never preempted anyway


def test_a_department_named_borrow_takes_the_name_and_borrowing_is_off_with_a_note():
    d = desired_state(state(departments=(("AI", None), ("cv", "AI"), ("nlp", "AI"), ("borrow", None))), N)
    assert d.accounts["gp_borrow"].description == "gpupool department borrow"
    assert not any(name.startswith("gp_borrow.") for name in d.accounts) and "gp_borrow" not in d.qos
    assert any("no borrowing" in n for n in d.notes)


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
    assert d.accounts["gp_chat"].limit_map() == {A100: 6}
    assert d.accounts["gp_borrow.chat"].limit_map() == {A100: 1}
    assert d.accounts["gp_vision1"].limit_map() == {A100: 6}
    assert d.accounts["gp_borrow.vision1"].limit_map() == {A100: None}


def test_a_tres_the_cluster_does_not_track_is_left_out_with_a_note():
    limits = (*state().limits, QuotaLimit("project", "chat", H800, Decimal(8), Decimal(0)))
    d = desired_state(state(limits=limits, tres=frozenset({A100, H800})), N, tracked=frozenset({"cpu", A100}))
    assert d.tres == frozenset({A100})
    assert d.accounts["gp_chat"].limit_map() == {A100: 4}
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
    assert list(d.associations) == [("gp_chat", "carol"), ("gp_borrow.chat", "carol")]
    assert any("Alice Smith" in n for n in d.notes)


def test_priority_classes_become_qos_that_preempt_the_lower_preemptible_ones():
    d = desired_state(state(), N)
    assert d.qos["gp_inference-online"].priority == 2000
    assert d.qos["gp_best-effort"].priority == 990  # value + 1000: Slurm's priority is unsigned
    assert d.qos["gp_inference-online"].preempt == {"gp_training", "gp_best-effort", "gp_borrow"}
    assert d.qos["gp_training"].preempt == {"gp_best-effort", "gp_borrow"}
    assert d.qos["gp_best-effort"].preempt == {"gp_borrow"}  # any job within its quota reclaims
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
           "grptres=gres/gpu:a100=8" in cmds
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
        "modify account where name=gp_cv cluster=c1 set grptres=gres/gpu:a100=8",
        "delete user where name=mallory account=gp_chat cluster=c1",
    ]
    changed = {(c.kind, c.name, c.action): (c.before, c.after) for c in p.changes}
    view = {"parent": "gp_ai", "fairshare": 1, "grp_submit_jobs": None}
    assert changed[("account", "gp_cv", "modify")] == (
        view | {"grptres": {A100: 99}}, view | {"grptres": {A100: 8}}
    )
    assert changed[("association", "gp_chat/mallory", "delete")][1] is None


def test_a_limit_to_clear_is_set_to_minus_one():
    d = desired_state(state(), N)
    current = SlurmState(accounts=dict(d.accounts), associations=dict(d.associations), qos=dict(d.qos),
                         default_accounts=dict(d.default_accounts), tres=d.tres)
    current.accounts["gp_nlp"] = replace(d.accounts["gp_nlp"], limits=((A100, 4),))
    assert plan(d, current, "c1", N).commands == [
        "modify account where name=gp_nlp cluster=c1 set grptres=gres/gpu:a100=-1"
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
    assert "GrpTRES='gres/gpu:a100=8'" in text  # quoted: ':' splits fields
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
    assert users[("gp_borrow.vision1", "alice")] == {
        "DefaultAccount": "gp_chat", "DefaultQOS": "gp_borrow", "QOS": "gp_borrow"
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
    # Vision1: a quota of 8 GPUs' worth of cores and memory; the 2 it may borrow in the mirror.
    assert d.accounts["gp_vision1"].limit_map() == {A100: 8, "cpu": 96, "mem": 8 * 126_976}
    assert d.accounts["gp_borrow.vision1"].limit_map() == {A100: 2, "cpu": 24, "mem": 2 * 126_976}
    assert d.accounts["gp_ai"].limit_map() == {A100: 16, "cpu": 192, "mem": 16 * 126_976}
    # No cap on the borrowed GPUs (no borrow limit): none on what comes with them.
    assert d.accounts["gp_borrow.chat"].limit_map() == {A100: None, "cpu": None, "mem": None}


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
           "grptres=cpu=96,gres/gpu:a100=8,mem=1015808M" in scratch
    # Slurm shows memory with a unit; a cap changed behind the portal's back is drift.
    assoc = "gp_vision1||gp_cv|cpu=100,gres/gpu:a100=8,mem=1000G||\n"
    current = parse_current(assoc, "", "", N, d.tres)
    assert current.accounts["gp_vision1"].limit_map() == {A100: 8, "cpu": 100, "mem": 1000 * 1024}
    current.accounts.update({k: v for k, v in d.accounts.items() if k != "gp_vision1"})
    current.associations, current.qos = dict(d.associations), dict(d.qos)
    current.default_accounts = dict(d.default_accounts)
    p = plan(d, current, "c1", N)
    assert p.commands == ["modify account where name=gp_vision1 cluster=c1 set grptres=cpu=96,mem=1015808M"]
    [change] = p.changes
    assert (change.before["grptres"]["cpu"], change.after["grptres"]["cpu"]) == (100, 96)


def test_without_machine_figures_cpu_and_memory_limits_are_the_sites():
    d = desired_state(state(), N)  # tres: the GRES only
    assoc = "gp_vision1||gp_cv|cpu=50,gres/gpu:a100=10,mem=100G||\n"
    current = parse_current(assoc, "", "", N, d.tres)
    assert current.accounts["gp_vision1"].limit_map() == {A100: 10}
    assert not any("cpu" in c or "mem" in c for c in plan(d, current, "c1", N).commands)


def test_the_flat_file_carries_cpu_and_memory():
    d = desired_state(machine_state(), N)
    _cluster, accounts, _users = parse_flat_file(flat_file(d, "c1", N))
    assert accounts["gp_vision1"][1]["GrpTRES"] == "cpu=96,gres/gpu:a100=8,mem=1015808M"


# -- the same policy for native users (issue 34 item 4): shares, budgets, per-user caps, dev MaxWall


def _matching(d: SlurmState) -> SlurmState:
    return SlurmState(accounts=dict(d.accounts), associations=dict(d.associations), qos=dict(d.qos),
                      default_accounts=dict(d.default_accounts), tres=d.tres)


def test_each_owned_account_gets_the_trees_shares_as_fairshare():
    shares = (("department", "AI", 16), ("project", "Vision1", 8), ("project", "chat", 0))
    d = desired_state(state(shares=shares), N)
    assert d.accounts["gp_ai"].fairshare == 16 and d.accounts["gp_vision1"].fairshare == 8
    assert d.accounts["gp_chat"].fairshare == 1  # Slurm's least: 0 would be "no share at all"
    assert d.accounts["gp_cv"].fairshare == 1  # not given: Slurm's default
    cmds = plan(d, SlurmState(tres=d.tres), "c1", N).commands
    assert "add account gp_ai cluster=c1 parent=root description='gpupool department AI' " \
           "grptres=gres/gpu:a100=16 fairshare=16" in cmds
    current = _matching(d)
    current.accounts["gp_vision1"] = replace(d.accounts["gp_vision1"], fairshare=3)
    p = plan(d, current, "c1", N)
    assert p.commands == ["modify account where name=gp_vision1 cluster=c1 set fairshare=8"]
    assert (p.changes[0].before["fairshare"], p.changes[0].after["fairshare"]) == (3, 8)


def test_a_spent_budget_blocks_new_submissions_on_the_account_and_its_borrow_mirror_and_lifts():
    d = desired_state(state(blocked=frozenset({("project", "chat")})), N)
    assert d.accounts["gp_chat"].grp_submit_jobs == 0 and d.accounts["gp_borrow.chat"].grp_submit_jobs == 0
    assert d.accounts["gp_vision1"].grp_submit_jobs is None
    open_ = desired_state(state(), N)
    p = plan(d, _matching(open_), "c1", N)
    # The description says why (Slurm's refusal only says "job submit limit").
    assert sorted(p.commands) == [
        "modify account where name=gp_borrow.chat cluster=c1 set grpsubmitjobs=0 description='gpupool"
        " borrowing project chat - budget spent (no new jobs until a top-up)'",
        "modify account where name=gp_chat cluster=c1 set grpsubmitjobs=0 description='gpupool project chat"
        " - budget spent (no new jobs until a top-up)'",
    ]
    assert {(c.name, c.before["grp_submit_jobs"], c.after["grp_submit_jobs"]) for c in p.changes} == {
        ("gp_chat", None, 0), ("gp_borrow.chat", None, 0)
    }
    # The budget allows again: the limit is cleared (-1), not left at 0.
    assert sorted(plan(open_, _matching(d), "c1", N).commands) == [
        "modify account where name=gp_borrow.chat cluster=c1 set grpsubmitjobs=-1"
        " description='gpupool borrowing project chat'",
        "modify account where name=gp_chat cluster=c1 set grpsubmitjobs=-1"
        " description='gpupool project chat'",
    ]


def test_a_spent_departments_accounts_below_it_are_blocked_and_their_queued_jobs_held_then_released():
    d = desired_state(state(blocked=frozenset({("department", "nlp")})), N)
    blocked = blocked_accounts(d)
    # each with the account whose budget is spent (what the held job's comment names)
    assert {a: blocked[a] for a in ("gp_nlp", "gp_chat", "gp_borrow.nlp", "gp_borrow.chat")} == {
        "gp_nlp": "gp_nlp", "gp_chat": "gp_nlp", "gp_borrow.nlp": "gp_borrow.nlp",
        "gp_borrow.chat": "gp_borrow.nlp"}
    assert "gp_vision1" not in blocked and "gp_ai" not in blocked
    mine = hold_comment("gp_chat")
    pending = [PendingJob("1", "gp_chat", False), PendingJob("2", "gp_chat", True, mine),
               PendingJob("3", "gp_vision1", True, mine), PendingJob("4", "gp_vision1", True, "maintenance"),
               PendingJob("5", "gp_vision1", False)]
    # 1 is held; 2 stays held; 3 was held by the sync and its budget allows: released; 4 is an
    # operator's hold: never released by the sync; 5 is not touched.
    assert budget_holds(blocked, pending) == (["1"], ["3"])


def test_per_user_caps_go_on_each_members_associations_and_a_cap_lifted_is_cleared():
    d = desired_state(state(user_caps=(("Vision1", 16, 2),)), N)
    alice = d.associations[("gp_vision1", "alice")]
    assert (alice.max_jobs, alice.limits) == (2, (("gres/gpu", 16),))
    assert d.associations[("gp_borrow.vision1", "alice")].max_jobs == 2
    assert d.associations[("gp_chat", "alice")].max_jobs is None  # chat has no cap
    cmds = plan(d, SlurmState(tres=d.tres), "c1", N).commands
    assert "add user alice account=gp_vision1 cluster=c1 qos=gp_best-effort,gp_training " \
           "defaultqos=gp_training maxjobs=2 grptres=gres/gpu=16" in cmds
    uncapped = desired_state(state(), N)
    p = plan(uncapped, _matching(d), "c1", N)
    assert "modify user where name=alice account=gp_vision1 cluster=c1 set maxjobs=-1 grptres=gres/gpu=-1" \
        in p.commands
    change = next(c for c in p.changes if c.name == "gp_vision1/alice")
    assert change.before["max_jobs"] == 2 and change.after == {
        "qos": ["gp_best-effort", "gp_training"], "default_qos": "gp_training", "max_jobs": None,
        "grptres": {},
    }


def test_a_gpu_cap_needs_gres_gpu_tracked_else_a_note():
    d = desired_state(state(user_caps=(("Vision1", 16, None),)), N, tracked=frozenset({A100}))
    assert d.associations[("gp_vision1", "alice")].limits == ()
    assert any("gres/gpu is not in AccountingStorageTRES" in n for n in d.notes)


def test_the_dev_class_qos_gets_max_wall_and_the_minimum_runtime_is_written_as_a_clock():
    classes = (*CLASSES, ClassRef("dev", 50, True, 0, 72 * 60, 90))
    d = desired_state(state(classes=classes, preempt_exempt_seconds=90), N)
    assert d.qos["gp_dev"].max_wall_minutes == 72 * 60 and d.qos["gp_training"].max_wall_minutes is None
    cmds = plan(d, SlurmState(tres=d.tres), "c1", N).commands
    assert "add qos gp_dev priority=1050 preemptmode=requeue maxwall=4320 preemptexempttime=00:01:30" in cmds
    assert "add qos gp_borrow priority=0 preemptmode=requeue preemptexempttime=00:01:30" in cmds
    current = _matching(d)
    current.qos["gp_dev"] = replace(d.qos["gp_dev"], max_wall_minutes=None, preempt_exempt_seconds=None)
    p = plan(d, current, "c1", N)
    assert p.commands == ["modify qos where name=gp_dev set maxwall=4320 preemptexempttime=00:01:30"]
    assert p.changes[0].after["max_wall_minutes"] == 4320


NEW_ASSOC = """gp_ai||root|gres/gpu:a100=16|normal||16|0|
gp_vision1|alice||gres/gpu=4|gp_training|gp_training|1||2
gp_chat|alice|||gp_training|gp_training|parent||
"""
NEW_QOS = """gp_dev|1050|gp_borrow|requeue|3-00:00:00|00:01:30
gp_borrow|0||requeue||
"""


def test_the_new_columns_read_back():
    cur = parse_current(NEW_ASSOC, NEW_QOS, "", N, frozenset({A100}))
    assert (cur.accounts["gp_ai"].fairshare, cur.accounts["gp_ai"].grp_submit_jobs) == (16, 0)
    alice = cur.associations[("gp_vision1", "alice")]
    assert (alice.max_jobs, alice.limits) == (2, (("gres/gpu", 4),))
    assert cur.associations[("gp_chat", "alice")].max_jobs is None
    assert (cur.qos["gp_dev"].max_wall_minutes, cur.qos["gp_dev"].preempt_exempt_seconds) == (4320, 90)
    borrow = cur.qos["gp_borrow"]
    assert (borrow.max_wall_minutes, borrow.preempt_exempt_seconds) == (None, None)


def test_the_flat_file_carries_shares_blocks_and_caps():
    d = desired_state(state(shares=(("department", "AI", 16),), blocked=frozenset({("project", "chat")}),
                            user_caps=(("Vision1", 4, 2),)), N)
    _cluster, accounts, users = parse_flat_file(flat_file(d, "c1", N))
    assert accounts["gp_ai"][1]["Fairshare"] == "16"
    assert accounts["gp_chat"][1]["GrpSubmitJobs"] == "0"
    assert users[("gp_vision1", "alice")]["MaxJobs"] == "2"
    assert users[("gp_vision1", "alice")]["GrpTRES"] == "gres/gpu=4"
