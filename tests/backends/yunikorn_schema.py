"""A test-side validator of YuniKorn's queue configuration (``queues.yaml``): the field names and
the rules YuniKorn itself rejects a configuration for, re-implemented from its source so the
tests can check what gpupool renders without running the scheduler.

Sources read (Apache-2.0):
  apache/yunikorn-core @ be3bb487298956dd70906fca15e577bbc12d23cb (master, 2026-07-02)
    pkg/common/configs/config.go            the structs; go-yaml v3 with no key in the tag uses
                                            the lower-cased field name; ParseAndValidateConfig
                                            decodes with KnownFields(true): unknown keys fail
    pkg/common/configs/configvalidator.go   Validate and the check* functions named below
    pkg/common/resources/quantity.go        ParseQuantity / ParseVCore (the `legal` regexp)
    pkg/common/resources/resources.go       FitInMaxUndef, ComponentWiseMin, IsZero
    pkg/scheduler/placement/rule.go         newRule (rule names), fixed_rule.go / tag_rule.go
                                            initialise (required values), placement.go
    pkg/scheduler/policies/nodesorting_policy.go  SortingPolicyFromString
    pkg/scheduler/objects/queue.go          setResources: a max (a guaranteed) is applied only
                                            when StrictlyGreaterThanZero (enforced_max below)
  apache/yunikorn-k8shim @ 23b6b47f9835211e7bfb82bfbd203a8a0e00958f (master, 2026-08-20)
    pkg/common/constants/constants.go       DefaultPartition "default" (the shim's only one),
                                            ConfigMapName "yunikorn-configs"
    pkg/conf/schedulerconf.go               DefaultPolicyGroup "queues" → key "queues.yaml"

What is not re-implemented is refused rather than passed: user/group ``limits`` (gpupool
renders none) raise "not checked here".
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class ConfigError(ValueError):
    """The configuration YuniKorn would reject, with the rule's source in the message."""


# -- config.go: the structs, as (yaml key → type). go-yaml v3 keys are the lower-cased field
# names (no explicit key in any yaml tag). Types: "str", "bool", "uint", "float",
# ("list", T), ("map", T) with string keys, or a struct name.
STRUCTS: dict[str, dict[str, Any]] = {
    "SchedulerConfig": {"partitions": ("list", "PartitionConfig"), "checksum": "str"},
    "PartitionConfig": {
        "name": "str",
        "queues": ("list", "QueueConfig"),
        "placementrules": ("list", "PlacementRule"),
        "limits": ("list", "Limit"),
        "preemption": "PartitionPreemptionConfig",
        "nodesortpolicy": "NodeSortingPolicy",
        "usergroupresolver": "UserGroupResolver",
    },
    "UserGroupResolver": {"type": "str"},
    "PartitionPreemptionConfig": {"enabled": "bool", "quotapreemptionenabled": "bool"},
    "QueueConfig": {
        "name": "str",
        "parent": "bool",
        "resources": "Resources",
        "maxapplications": "uint",
        "properties": ("map", "str"),
        "adminacl": "str",
        "submitacl": "str",
        "childtemplate": "ChildTemplate",
        "queues": ("list", "QueueConfig"),
        "limits": ("list", "Limit"),
    },
    "ChildTemplate": {"maxapplications": "uint", "properties": ("map", "str"), "resources": "Resources"},
    "Resources": {"guaranteed": ("map", "str"), "max": ("map", "str")},
    "PlacementRule": {
        "name": "str",
        "create": "bool",
        "filter": "Filter",
        "parent": "PlacementRule",
        "value": "str",
    },
    "Filter": {"type": "str", "users": ("list", "str"), "groups": ("list", "str")},
    "Limit": {
        "limit": "str",
        "users": ("list", "str"),
        "groups": ("list", "str"),
        "maxresources": ("map", "str"),
        "maxapplications": "uint",
    },
    "NodeSortingPolicy": {"type": "str", "resourceweights": ("map", "float")},
}

# configvalidator.go
ROOT, DEFAULT_PARTITION = "root", "default"
QUEUE_NAME = re.compile(r"^[a-zA-Z0-9_:#/@-]{1,64}$")  # QueueNameRegExp
USER = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:#/_.@-]*[$]?$")  # UserRegExp
GROUP = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:_.-]*$")  # GroupRegExp
SPECIAL = re.compile(r"[\^$*+?()\[{}|]")  # SpecialRegExp
RULE_NAME = re.compile(r"^[_a-zA-Z][a-zA-Z0-9_]*$")  # RuleNameRegExp
# quantity.go: `legal`; the suffix multipliers; "m" only for vcore (ParseVCore)
QUANTITY = re.compile(r"^(?P<n>[0-9]+)\s*(?P<s>([mkKMGTPE]i?)?)$")
MULTIPLIERS = {
    "": 1,
    "m": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
INT64_MAX = 2**63 - 1
# placement/rule.go newRule: the rules a configuration may name ("recovery" is refused there,
# "test" is for YuniKorn's own tests only)
RULES = {"user", "fixed", "provided", "tag"}
NODE_SORTING = {"", "fair", "binpacking"}  # nodesorting_policy.go SortingPolicyFromString


def validate(config: str | dict) -> dict:
    """Raise :class:`ConfigError` where YuniKorn would reject ``config`` (YAML text or parsed)."""
    parsed = yaml.safe_load(config) if isinstance(config, str) else config
    if parsed is None:
        parsed = {}
    check_fields(parsed, "SchedulerConfig", "")
    names: set[str] = set()
    for partition in parsed.get("partitions") or []:
        _validate_partition(partition, names)
    return parsed


# -- strict decoding (config.go + ParseAndValidateConfig's KnownFields(true))


def check_fields(value: Any, kind: Any, where: str) -> None:
    if isinstance(kind, tuple):
        container, inner = kind
        if container == "list":
            _expect(isinstance(value, list), where, "a list")
            for i, item in enumerate(value):
                check_fields(item, inner, f"{where}[{i}]")
        else:
            _expect(isinstance(value, dict), where, "a map")
            for key, item in value.items():
                _expect(isinstance(key, str), f"{where}.{key}", "a string key")
                check_fields(item, inner, f"{where}.{key}")
        return
    if kind in STRUCTS:
        _expect(isinstance(value, dict), where, f"a {kind}")
        for key, item in value.items():
            if key not in STRUCTS[kind]:
                raise ConfigError(
                    f"{where}: field {key} not found in type configs.{kind} (config.go, KnownFields)"
                )
            check_fields(item, STRUCTS[kind][key], f"{where}.{key}")
        return
    ok = {
        "str": isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)),
        "bool": isinstance(value, bool),
        "uint": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "float": isinstance(value, int | float) and not isinstance(value, bool),
    }[kind]
    _expect(ok, where, kind)


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise ConfigError(f"{where or 'config'}: cannot decode into {what} (config.go)")


# -- Validate (configvalidator.go)


def _validate_partition(partition: dict, names: set[str]) -> None:
    name = (partition.get("name") or DEFAULT_PARTITION).lower()
    if name in names:
        raise ConfigError(f"duplicate partition name found with name {name} (Validate)")
    names.add(name)
    if name != DEFAULT_PARTITION:  # k8shim constants.DefaultPartition: the shim schedules only it
        raise ConfigError(f"partition {name}: the Kubernetes shim uses only partition 'default'")
    root = _queues_structure(partition)
    if partition.get("limits") or _has_limits(root):
        raise ConfigError("limits: not checked here (checkLimits / checkLimitResource not re-implemented)")
    _check_queues(root, 1)
    check_queue_resource(root, None)
    _check_placement_rules(partition, root)
    policy = (partition.get("nodesortpolicy") or {}).get("type", "")
    if policy not in NODE_SORTING:
        raise ConfigError(f"undefined policy: {policy} (SortingPolicyFromString)")
    _check_max_applications(root)


def _queues_structure(partition: dict) -> dict:
    """checkQueuesStructure + checkLimitsStructure: one root (inserted above several top
    queues or a top queue not named root), a parent, without resources."""
    queues = partition.get("queues")
    if queues is None:
        raise ConfigError("queue config is not set (checkQueuesStructure)")
    if len(queues) == 1 and str(queues[0].get("name", "")).lower() == ROOT:
        root = {**queues[0], "parent": True}
    else:
        root = {"name": ROOT, "parent": True, "queues": queues}
    resources = root.get("resources") or {}
    if resources.get("guaranteed") is not None or resources.get("max") is not None:
        raise ConfigError("root queue must not have resource limits set (checkQueuesStructure)")
    return root


def _has_limits(queue: dict) -> bool:
    return bool(queue.get("limits")) or any(_has_limits(q) for q in queue.get("queues") or [])


def _check_queues(queue: dict, level: int) -> None:
    """checkQueues: ACLs, then each child's name (IsQueueNameValid) and uniqueness (case
    ignored) at this level, then the children."""
    for acl in ("adminacl", "submitacl"):
        _check_acl(queue.get(acl, ""))
    seen: set[str] = set()
    for child in queue.get("queues") or []:
        name = str(child.get("name", ""))
        if not QUEUE_NAME.match(name):
            raise ConfigError(f"invalid queue name {name!r} (IsQueueNameValid: {QUEUE_NAME.pattern})")
        if name.lower() in seen:
            raise ConfigError(f"duplicate child name found with name '{name}', level {level} (checkQueues)")
        seen.add(name.lower())
    for child in queue.get("queues") or []:
        _check_queues(child, level + 1)


def _check_acl(acl: str) -> None:
    """checkACL: empty, '*', or 'users groups' (no more than two fields)."""
    acl = acl.strip()
    if acl and acl != "*" and len(acl.split()) > 2:
        raise ConfigError(f"multiple spaces found in ACL: '{acl}' (checkACL)")


# -- resources (checkQueueResource / checkResourceConfig and resources.go)

Resource = dict[str, int] | None  # None: nil resource


def parse_quantity(key: str, value: Any) -> int:
    """resources.NewResourceFromConf: ParseVCore for "vcore", ParseQuantity otherwise."""
    found = QUANTITY.match(str(value).strip())
    if not found:
        raise ConfigError(f"{key}: invalid quantity {value!r} (quantity.go)")
    suffix, vcore = found["s"], key == "vcore"
    if suffix not in MULTIPLIERS or (suffix == "m" and not vcore):
        raise ConfigError(f"{key}: invalid suffix in {value!r} (quantity.go)")
    result = int(found["n"]) * MULTIPLIERS[suffix] * (1000 if vcore and suffix != "m" else 1)
    if result > INT64_MAX:
        raise ConfigError(f"{key}: invalid quantity: overflow (quantity.go)")
    return result


def _resource(conf: dict | None) -> dict[str, int]:
    # NewResourceFromConf returns an empty (not nil) resource for a missing map.
    return {k: parse_quantity(k, v) for k, v in (conf or {}).items()}


def fit_in_max_undef(larger: Resource, smaller: Resource) -> bool:
    """resources.go FitInMaxUndef: types undefined in ``larger`` fit; negatives count as 0."""
    if smaller is None:
        return True
    larger = larger or {}
    return all(k not in larger or v <= max(0, larger[k]) for k, v in smaller.items())


def component_wise_min(left: Resource, right: Resource) -> Resource:
    """resources.go ComponentWiseMin: a type missing on one side takes the other's value."""
    if left is None or right is None:
        return right if left is None else left
    return {k: min(v for v in (left.get(k), right.get(k)) if v is not None) for k in {*left, *right}}


def check_queue_resource(queue: dict, parent_max: Resource) -> dict[str, int]:
    """checkQueueResource (recursive): guaranteed ≤ max (checkResourceConfig), the parent's max
    ≥ this max, Σ children's guaranteed ≤ this guaranteed and ≤ this max (the max capped by the
    parent's). Returns this queue's guaranteed, or its children's sum when it has none."""
    name = queue.get("name")
    resources = queue.get("resources") or {}
    guaranteed, maximum = _resource(resources.get("guaranteed")), _resource(resources.get("max"))
    if not fit_in_max_undef(maximum, guaranteed):
        raise ConfigError(
            f"guaranteed resource {guaranteed} is larger than maximum resource {maximum} for queue {name}"
            " (checkResourceConfig)"
        )
    if not fit_in_max_undef(parent_max, maximum):
        raise ConfigError(
            f"max resource of parent {parent_max} is smaller than maximum resource {maximum} for queue {name}"
            " (checkQueueResource)"
        )
    maximum = component_wise_min(maximum, parent_max) or {}
    total: dict[str, int] = {}
    for child in queue.get("queues") or []:
        for k, v in check_queue_resource(child, maximum).items():
            total[k] = total.get(k, 0) + v
    if not fit_in_max_undef(guaranteed, total):
        raise ConfigError(
            f"guaranteed resource of parent {guaranteed} is smaller than sum of guaranteed resources {total}"
            f" of the children for queue {name} (checkQueueResource)"
        )
    if not fit_in_max_undef(maximum, total):
        raise ConfigError(
            f"max resource {maximum} is smaller than sum of guaranteed resources {total} of the children"
            f" for queue {name} (checkQueueResource)"
        )
    return total if all(v == 0 for v in guaranteed.values()) else guaranteed


def strictly_greater_than_zero(resource: Resource) -> bool:
    """resources.go StrictlyGreaterThanZero: no quantity below 0 and at least one above."""
    values = list((resource or {}).values())
    return all(v >= 0 for v in values) and any(v > 0 for v in values)


def enforced_max(config: dict, path: str) -> dict[str, int]:
    """What YuniKorn holds the queue at ``path`` to (not a configuration rule: the scheduler's
    behaviour once the configuration is accepted): each queue on the path applies its max only
    when it is strictly greater than zero (queue.go setResources; an all-zero max is dropped),
    and a queue's usage is bounded by every ancestor's max (a type missing from one max is
    bounded by the others: ComponentWiseMinPermissive). Types absent from the result are not
    limited."""
    names = path.split(".")
    queue = {"queues": config["partitions"][0]["queues"]}
    out: dict[str, int] = {}
    for name in names:
        queue = next(q for q in queue.get("queues") or [] if q["name"] == name)
        own = _resource((queue.get("resources") or {}).get("max"))
        if strictly_greater_than_zero(own):
            out = {k: min(v for v in (out.get(k), own.get(k)) if v is not None) for k in {*out, *own}}
    return out


def _check_max_applications(queue: dict) -> None:
    """checkQueueMaxApplications: a parent's maxapplications bounds its children's."""
    own = queue.get("maxapplications", 0)
    for child in queue.get("queues") or []:
        theirs = child.get("maxapplications", 0)
        if own and own < theirs:
            raise ConfigError("parent maxApplications must be larger than child maxApplications")
        if own and not theirs:
            raise ConfigError(
                "maxApplications is either undefined or zero, which is not allowed when parent"
                " queue's maxApplications is defined"
            )
        _check_max_applications(child)


# -- placement rules (checkPlacementRules and the rules' initialise)


def _check_placement_rules(partition: dict, root: dict) -> None:
    for number, rule in enumerate(partition.get("placementrules") or []):
        _check_rule(rule)
        path, chain, dynamic = _longest_static_path(rule)
        if not path.startswith(ROOT):
            continue  # getLongestPlacementPaths: only paths starting at root are checked
        problem = _hierarchy_for_placement(path.lower().split("."), bool(rule.get("create")), dynamic, [root])
        if problem:
            raise ConfigError(
                f"placement rule no. #{number} ({chain}) {problem} ({path}) (checkPlacementRules)"
            )


def _check_rule(rule: dict) -> None:
    """checkPlacementRule (name regexp, parent, filter) and newRule / initialise."""
    name = str(rule.get("name", ""))
    if not RULE_NAME.match(name):
        raise ConfigError(f"invalid rule name {name}, a name must be a valid identifier (checkPlacementRule)")
    if name.lower() not in RULES:
        raise ConfigError(
            f"unknown rule name specified {name}, failing placement rule config (rule.go newRule)"
        )
    value = str(rule.get("value", "")).lower()
    if name.lower() in ("tag", "fixed") and not value:
        raise ConfigError(f"a {name} rule must have a value set ({name}_rule.go initialise)")
    if name.lower() == "fixed":
        for part in value.split("."):
            if not QUEUE_NAME.match(part):
                raise ConfigError(f"fixed rule: invalid queue name {part!r} (fixed_rule.go initialise)")
        if value.startswith(ROOT) and rule.get("parent"):
            raise ConfigError("cannot have a fixed queue rule with qualified queue name and a parent rule")
    if rule.get("parent"):
        _check_rule(rule["parent"])
    _check_filter(rule.get("filter") or {})


def _check_filter(filter_: dict) -> None:
    """checkPlacementFilter: type '', allow or deny; a one-entry list is a name or a regexp."""
    kind = str(filter_.get("type", ""))
    if kind and kind.lower() not in ("allow", "deny"):
        raise ConfigError(f"invalid rule filter type {kind} (checkPlacementFilter)")
    for key, pattern in (("users", USER), ("groups", GROUP)):
        entries = filter_.get(key) or []
        if len(entries) == 1 and not pattern.match(entries[0]):
            try:
                re.compile(entries[0])
            except re.error:
                raise ConfigError(f"invalid rule filter {key}: {entries} (checkPlacementFilter)") from None
            if not SPECIAL.search(entries[0]):
                raise ConfigError(f"invalid rule filter {key}: {entries} (checkPlacementFilter)")


def _longest_static_path(rule: dict) -> tuple[str, str, bool]:
    """getLongestStaticPath: the fixed prefix of a rule chain (parents first)."""
    chain: list[dict] = []
    node: dict | None = rule
    while node:
        chain.insert(0, node)
        node = node.get("parent")
    path, dynamic = "", False
    for r in chain:
        if dynamic:
            continue
        if r["name"] != "fixed":
            path, dynamic = path or "<dynamic>", True
            continue
        value = r.get("value", "")
        if value.startswith(ROOT):
            if path:
                raise ConfigError(
                    f"illegal fully qualified 'fixed' rule with value {value} (getLongestStaticPath)"
                )
            path = value
            continue
        path = f"{path or ROOT}.{value}"
    return path, "->".join(r["name"] for r in chain), dynamic


def _hierarchy_for_placement(
    path: list[str], create: bool, dynamic: bool, level: list[dict], parent: dict | None = None
) -> str | None:
    """checkQueueHierarchyForPlacement: the static path must exist (or be creatable) and end in
    a leaf — or in a parent when a dynamic rule adds the last part."""
    if not level:
        if parent is not None and not parent.get("parent"):
            return "references non-existing queues which cannot be created because the last queue is a leaf"
        return None if create else "references non-existing queues and create is 'false'"
    found = next((q for q in level if q.get("name") == path[0]), None)
    if found is None:
        return None if create else "references non-existing queues and create is 'false'"
    if len(path) == 1:
        if dynamic:
            return None if found.get("parent") else "references a queue which is not a leaf"
        return "references a queue which is not a leaf" if found.get("parent") else None
    return _hierarchy_for_placement(path[1:], create, dynamic, found.get("queues") or [], found)
