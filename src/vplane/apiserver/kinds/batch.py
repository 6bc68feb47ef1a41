"""batch/v1: Jobs and CronJobs.

A Job without ``manualSelector`` gets upstream's generated selector and template labels
(``batch.kubernetes.io/controller-uid`` and ``job-name``, plus the legacy unprefixed pair), so a Job
controller can find its pods; a selector a user sets without ``manualSelector`` is refused as upstream
does. CronJob schedules are parsed like robfig/cron's standard parser, time zones against the system's
zone database.
"""

from __future__ import annotations

import zoneinfo
from typing import Any

from vplane.apiserver.kinds.common import (
    GenerationStrategy,
    d,
    non_negative,
    rt,
    validate_enum,
)
from vplane.apiserver.registry import ResourceType
from vplane.kube import cron, errors, labels, podspec, validation
from vplane.kube.errors import Cause
from vplane.kube.objects import Obj

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
JOB_RESTART_POLICIES = ["OnFailure", "Never"]
CRONJOB_NAME_MAX = 52
"""CronJob names leave room for the 11-character suffix of the Jobs they create."""
# Upstream's limits (pkg/apis/batch/validation).
MAX_PARALLELISM_INDEXED = 100_000
MAX_FAILED_INDEXES = 100_000
COMPLETIONS_SOFT_LIMIT = 100_000
HIGH_COMPLETIONS_LIMIT = 10_000
MAX_POLICY_RULES = 20
MAX_EXIT_CODE_VALUES = 255
MAX_CONDITION_PATTERNS = 20
MAX_SUCCEEDED_INDEXES_LENGTH = 64 * 1024
POLICY_ACTIONS = ["Count", "FailIndex", "FailJob", "Ignore"]
EXIT_CODE_OPERATORS = ["In", "NotIn"]
CONDITION_STATUSES = ["False", "True", "Unknown"]


def default_job_spec(spec: Obj) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault(
        "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    for rule in d(spec.get("podFailurePolicy")).get("rules") or ():
        for pattern in d(rule).get("onPodConditions") or ():
            if isinstance(pattern, dict) and not pattern.get("status"):
                pattern["status"] = "True"
    podspec.default_template(spec.get("template"))


def validate_job_spec(spec: Any, path: str, *, generated_selector: bool) -> list[Cause]:
    if not isinstance(spec, dict):
        return [errors.field_required(path)]
    causes: list[Cause] = []
    for field in (
        "parallelism",
        "completions",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
    ):
        value = spec.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            causes.append(
                errors.field_invalid(f"{path}.{field}", value, "must be greater than or equal to 0")
            )
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline <= 0:
        causes.append(
            errors.field_invalid(f"{path}.activeDeadlineSeconds", deadline, "must be greater than 0")
        )
    causes += [
        {**c, "field": f"{path}.completionMode"}
        for c in validate_enum(spec, "completionMode", ["NonIndexed", "Indexed"])
    ]
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        causes.append(errors.field_required(f"{path}.completions", 'when completion mode is "Indexed"'))
    causes += _validate_failure_limits(spec, path)
    if spec.get("podFailurePolicy") is not None:
        causes += _validate_pod_failure_policy(spec, f"{path}.podFailurePolicy")
    if spec.get("successPolicy") is not None:
        if spec.get("completionMode") != "Indexed":
            causes.append(
                errors.field_invalid_omitted(
                    f"{path}.successPolicy", "requires indexed completion mode", "batch.SuccessPolicy{...}"
                )
            )
        else:
            causes += _validate_success_policy(spec, f"{path}.successPolicy")
    replacement = spec.get("podReplacementPolicy")
    if isinstance(replacement, str):
        allowed = (
            ["Failed"] if spec.get("podFailurePolicy") is not None else ["Failed", "TerminatingOrFailed"]
        )
        if replacement not in allowed:
            causes.append(errors.field_not_supported(f"{path}.podReplacementPolicy", replacement, allowed))
    selector = spec.get("selector")
    template = d(spec.get("template"))
    template_labels = d(d(template.get("metadata")).get("labels"))
    if isinstance(selector, dict):
        causes += validation.validate_label_selector(selector, f"{path}.selector")
        if not causes:
            try:
                matches = labels.from_label_selector(selector).matches(template_labels)
            except errors.StatusError:
                matches = True
            if not matches:
                causes.append(
                    errors.field_invalid(
                        f"{path}.template.metadata.labels",
                        template_labels,
                        "`selector` does not match template `labels`",
                    )
                )
    elif not generated_selector:
        causes.append(errors.field_required(f"{path}.selector"))
    causes += podspec.validate_template(spec.get("template"), f"{path}.template")
    policy = d(template.get("spec")).get("restartPolicy")
    if policy not in JOB_RESTART_POLICIES:
        causes = [c for c in causes if c.get("field") != f"{path}.template.spec.restartPolicy"]
        causes.append(
            errors.field_required(f"{path}.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"')
        )
    elif spec.get("podFailurePolicy") is not None and policy != "Never":
        causes.append(
            errors.field_invalid(
                f"{path}.template.spec.restartPolicy",
                policy,
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    return causes


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _validate_failure_limits(spec: Obj, path: str) -> list[Cause]:
    """``backoffLimitPerIndex``/``maxFailedIndexes`` and the size limits of Indexed Jobs."""
    causes: list[Cause] = []
    per_index, most = _int(spec.get("backoffLimitPerIndex")), _int(spec.get("maxFailedIndexes"))
    completions, parallelism = _int(spec.get("completions")), _int(spec.get("parallelism"))
    if most is not None:
        if most < 0:
            causes.append(
                errors.field_invalid(f"{path}.maxFailedIndexes", most, "must be greater than or equal to 0")
            )
        if per_index is None:
            causes.append(
                errors.field_required(f"{path}.backoffLimitPerIndex", "when maxFailedIndexes is specified")
            )
    if spec.get("completionMode") == "Indexed":
        if parallelism is not None and parallelism > MAX_PARALLELISM_INDEXED:
            causes.append(
                errors.field_invalid(
                    f"{path}.parallelism",
                    parallelism,
                    f"must be less than or equal to {MAX_PARALLELISM_INDEXED} when completion mode is Indexed",
                )
            )
        if completions is not None and most is not None and most > completions:
            causes.append(
                errors.field_invalid(
                    f"{path}.maxFailedIndexes", most, "must be less than or equal to completions"
                )
            )
        if most is not None and most > MAX_FAILED_INDEXES:
            causes.append(
                errors.field_invalid(
                    f"{path}.maxFailedIndexes", most, f"must be less than or equal to {MAX_FAILED_INDEXES}"
                )
            )
        if completions is not None and completions > COMPLETIONS_SOFT_LIMIT and per_index is not None:
            high = (
                f"when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
            )
            if most is None:
                causes.append(
                    errors.field_required(
                        f"{path}.maxFailedIndexes",
                        f"must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}",
                    )
                )
            if parallelism is not None and parallelism > HIGH_COMPLETIONS_LIMIT:
                causes.append(
                    errors.field_invalid(
                        f"{path}.parallelism",
                        parallelism,
                        f"must be less than or equal to {HIGH_COMPLETIONS_LIMIT} {high}",
                    )
                )
            if most is not None and most > HIGH_COMPLETIONS_LIMIT:
                causes.append(
                    errors.field_invalid(
                        f"{path}.maxFailedIndexes",
                        most,
                        f"must be less than or equal to {HIGH_COMPLETIONS_LIMIT} {high}",
                    )
                )
    else:
        for name, value in (("backoffLimitPerIndex", per_index), ("maxFailedIndexes", most)):
            if value is not None:
                causes.append(
                    errors.field_invalid(f"{path}.{name}", value, "requires indexed completion mode")
                )
    return causes


def _go_quoted_list(values: list[str]) -> str:
    """Go's ``%q`` of a ``[]string``."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _validate_pod_failure_policy(spec: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    rules = d(spec.get("podFailurePolicy")).get("rules")
    rules = rules if isinstance(rules, list) else []
    if len(rules) > MAX_POLICY_RULES:
        causes.append(errors.field_too_many(f"{path}.rules", len(rules), MAX_POLICY_RULES))
    template_spec = d(d(spec.get("template")).get("spec"))
    names = {
        str(d(c).get("name"))
        for key in ("containers", "initContainers")
        for c in template_spec.get(key) or ()
    }
    for i, raw in enumerate(rules):
        rule, rule_path = d(raw), f"{path}.rules[{i}]"
        action = rule.get("action")
        if not action:
            causes.append(
                errors.field_required(
                    f"{rule_path}.action", f"valid values: {_go_quoted_list(POLICY_ACTIONS)}"
                )
            )
        elif action == "FailIndex":
            if spec.get("backoffLimitPerIndex") is None:
                causes.append(
                    errors.field_invalid(
                        f"{rule_path}.action", action, "requires the backoffLimitPerIndex to be set"
                    )
                )
        elif action not in POLICY_ACTIONS:
            causes.append(errors.field_not_supported(f"{rule_path}.action", action, POLICY_ACTIONS))
        on_codes, on_conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if on_codes is not None:
            causes += _validate_on_exit_codes(d(on_codes), f"{rule_path}.onExitCodes", names)
        if on_conditions:
            causes += _validate_on_pod_conditions(on_conditions, f"{rule_path}.onPodConditions")
        if on_codes is not None and on_conditions:
            causes.append(
                errors.field_invalid_omitted(
                    rule_path, "specifying both OnExitCodes and OnPodConditions is not supported"
                )
            )
        if on_codes is None and not on_conditions:
            causes.append(
                errors.field_invalid_omitted(
                    rule_path, "specifying one of OnExitCodes and OnPodConditions is required"
                )
            )
    return causes


def _validate_on_exit_codes(req: Obj, path: str, container_names: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    operator = req.get("operator")
    if not operator:
        causes.append(
            errors.field_required(f"{path}.operator", f"valid values: {_go_quoted_list(EXIT_CODE_OPERATORS)}")
        )
    elif operator not in EXIT_CODE_OPERATORS:
        causes.append(errors.field_not_supported(f"{path}.operator", operator, EXIT_CODE_OPERATORS))
    container = req.get("containerName")
    if container is not None and container not in container_names:
        causes.append(
            errors.field_invalid(
                f"{path}.containerName",
                container,
                "must be one of the container or initContainer names in the pod template",
            )
        )
    values = [v for v in req.get("values") or () if _int(v) is not None]
    shown = "[]int32{" + ", ".join(str(v) for v in values) + "}"
    if not values:
        causes.append(errors.field_invalid_omitted(f"{path}.values", "at least one value is required", shown))
    elif len(values) > MAX_EXIT_CODE_VALUES:
        causes.append(errors.field_too_many(f"{path}.values", len(values), MAX_EXIT_CODE_VALUES))
    seen: set[int] = set()
    for j, value in enumerate(values):
        if operator == "In" and value == 0:
            causes.append(
                errors.field_invalid(f"{path}.values[{j}]", value, "must not be 0 for the In operator")
            )
        if value in seen:
            causes.append(errors.field_duplicate(f"{path}.values[{j}]", value))
        seen.add(value)
    if any(a > b for a, b in zip(values, values[1:], strict=False)):
        causes.append(errors.field_invalid_omitted(f"{path}.values", "must be ordered", shown))
    return causes


def _validate_on_pod_conditions(patterns: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    patterns = patterns if isinstance(patterns, list) else []
    if len(patterns) > MAX_CONDITION_PATTERNS:
        causes.append(errors.field_too_many(path, len(patterns), MAX_CONDITION_PATTERNS))
    for j, raw in enumerate(patterns):
        pattern = d(raw)
        kind = str(pattern.get("type") or "")
        causes += [
            errors.field_invalid(f"{path}[{j}].type", kind, m) for m in validation.qualified_name(kind)
        ]
        status = pattern.get("status")
        if not status:
            causes.append(
                errors.field_required(
                    f"{path}[{j}].status", f"valid values: {_go_quoted_list(CONDITION_STATUSES)}"
                )
            )
        elif status not in CONDITION_STATUSES:
            causes.append(errors.field_not_supported(f"{path}[{j}].status", status, CONDITION_STATUSES))
    return causes


def indexes_format_error(text: str, completions: int) -> tuple[int, str | None]:
    """``validateIndexesFormat``: how many indexes ``1,3-5`` names, or upstream's parse error."""
    if not text:
        return 0, None
    last: int | None = None
    total = 0
    for part in text.split(","):
        limits = part.split("-")
        if len(limits) > 2:
            return 0, (
                f'the fragment "{part}" violates the requirement that an index interval can have at most two '
                "parts separated by '-'"
            )
        bounds: list[int] = []
        for limit in limits:
            try:
                value = int(limit)
            except ValueError:
                return 0, f'cannot convert string to integer for index: "{limit}"'
            if value >= completions:
                return 0, f'too large index: "{limit}"'
            bounds.append(value)
        first, end = bounds[0], bounds[-1]
        if len(bounds) == 2 and first >= end:
            return 0, f"non-increasing order, previous: {first}, current: {end}"
        if last is not None and last >= first:
            return 0, f"non-increasing order, previous: {last}, current: {first}"
        total += end - first + 1
        last = end
    return total, None


def _validate_success_policy(spec: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    rules = d(spec.get("successPolicy")).get("rules")
    rules = rules if isinstance(rules, list) else []
    if not rules:
        causes.append(
            errors.field_required(
                f"{path}.rules", "at least one rules must be specified when the successPolicy is specified"
            )
        )
    if len(rules) > MAX_POLICY_RULES:
        causes.append(errors.field_too_many(f"{path}.rules", len(rules), MAX_POLICY_RULES))
    completions = _int(spec.get("completions")) or 0
    for i, raw in enumerate(rules):
        rule, rule_path = d(raw), f"{path}.rules[{i}]"
        count, indexes = _int(rule.get("succeededCount")), rule.get("succeededIndexes")
        if count is None and indexes is None:
            causes.append(
                errors.field_required(
                    rule_path, "at least one of succeededCount or succeededIndexes must be specified"
                )
            )
        total = 0
        if isinstance(indexes, str):
            if len(indexes) > MAX_SUCCEEDED_INDEXES_LENGTH:
                causes.append(
                    errors.field_too_long(f"{rule_path}.succeededIndexes", MAX_SUCCEEDED_INDEXES_LENGTH)
                )
            total, error = indexes_format_error(indexes, completions)
            if error is not None:
                causes.append(
                    errors.field_invalid(
                        f"{rule_path}.succeededIndexes", indexes, f"error parsing succeededIndexes: {error}"
                    )
                )
        if count is not None:
            count_path = f"{rule_path}.succeededCount"
            if count < 0:
                causes.append(errors.field_invalid(count_path, count, "must be greater than or equal to 0"))
            if count > completions:
                causes.append(
                    errors.field_invalid(
                        count_path,
                        count,
                        f"must be less than or equal to {completions} (the number of specified completions)",
                    )
                )
            if indexes is not None and count > total:
                causes.append(
                    errors.field_invalid(
                        count_path,
                        count,
                        f"must be less than or equal to {total} (the number of indexes in the specified "
                        "succeededIndexes field)",
                    )
                )
    return causes


class JobStrategy(GenerationStrategy):
    supported_field_labels = frozenset({"status.successful"})

    def prepare_for_create(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict) or spec.get("manualSelector") is True:
            return
        meta = d(obj.get("metadata"))
        uid, name = str(meta.get("uid", "")), str(meta.get("name", ""))
        if spec.get("selector") is not None:
            return  # refused in validation: a selector without manualSelector
        spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
        template = spec.setdefault("template", {})
        if not isinstance(template, dict):
            return
        template_meta = template.setdefault("metadata", {})
        if isinstance(template_meta, dict):
            template_labels = template_meta.setdefault("labels", {})
            if isinstance(template_labels, dict):
                template_labels.update(
                    {CONTROLLER_UID: uid, JOB_NAME: name, LEGACY_CONTROLLER_UID: uid, LEGACY_JOB_NAME: name}
                )

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_job_spec(spec)

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = d(obj.get("spec"))
        manual = spec.get("manualSelector") is True
        causes = validate_job_spec(obj.get("spec"), "spec", generated_selector=not manual)
        uid = str(d(obj.get("metadata")).get("uid", ""))
        selector = d(spec.get("selector"))
        if not manual and old is None and selector and selector != {"matchLabels": {CONTROLLER_UID: uid}}:
            causes.append(errors.field_invalid("spec.selector", selector, "`selector` not auto-generated"))
        if old is not None:
            old_spec = d(old.get("spec"))
            if spec.get("selector") != old_spec.get("selector"):
                causes.append(
                    errors.field_invalid("spec.selector", spec.get("selector"), "field is immutable")
                )
            if spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
                causes.append(
                    errors.field_invalid("spec.template", spec.get("template"), "field is immutable")
                )
            if (
                spec.get("completions") != old_spec.get("completions")
                and spec.get("completionMode") != "Indexed"
            ):
                causes.append(
                    errors.field_invalid("spec.completions", spec.get("completions"), "field is immutable")
                )
            if spec.get("completionMode") != old_spec.get("completionMode"):
                causes.append(
                    errors.field_invalid(
                        "spec.completionMode", spec.get("completionMode"), "field is immutable"
                    )
                )
            for field in ("podFailurePolicy", "backoffLimitPerIndex", "successPolicy"):
                if spec.get(field) != old_spec.get(field):
                    causes.append(
                        errors.field_invalid(f"spec.{field}", spec.get(field), "field is immutable")
                    )
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"status.successful": str(d(obj.get("status")).get("succeeded", 0))}

    def field_label_error(self, label: str) -> str:
        return f'field label "{label}" not supported for "Job"'


def _time_zone_error(zone: str) -> str | None:
    if zone.strip() != zone or zone == "" or zone.lower() == "local":
        return f"unknown time zone {zone}"
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {zone}"
    return None


class CronJobStrategy(GenerationStrategy):
    supported_field_labels = frozenset({"status.successful"})

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        job_spec = d(spec.get("jobTemplate")).get("spec")
        if isinstance(job_spec, dict):
            podspec.default_template(job_spec.get("template"))

    def validate(self, obj: Obj, old: Obj | None) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [errors.field_required("spec")]
        causes: list[Cause] = []
        name = d(obj.get("metadata")).get("name")
        if isinstance(name, str) and len(name) > CRONJOB_NAME_MAX:
            causes.append(
                errors.field_invalid(
                    "metadata.name", name, f"must be no more than {CRONJOB_NAME_MAX} characters"
                )
            )
        schedule = spec.get("schedule")
        if not schedule:
            causes.append(errors.field_required("spec.schedule"))
        elif isinstance(schedule, str):
            if "TZ" in schedule:
                causes.append(
                    errors.field_invalid(
                        "spec.schedule",
                        schedule,
                        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                    )
                )
            else:
                error = cron.parse_error(schedule)
                if error is not None:
                    causes.append(errors.field_invalid("spec.schedule", schedule, error))
        zone = spec.get("timeZone")
        if isinstance(zone, str):
            error = _time_zone_error(zone)
            if error is not None:
                causes.append(errors.field_invalid("spec.timeZone", zone, error))
        causes += [
            {**c, "field": "spec.concurrencyPolicy"}
            for c in validate_enum(spec, "concurrencyPolicy", ["Allow", "Forbid", "Replace"], required=True)
        ]
        for field in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
            causes += non_negative(obj, f"spec.{field}")
        job_spec = d(spec.get("jobTemplate")).get("spec")
        causes += validate_job_spec(
            job_spec, "spec.jobTemplate.spec", generated_selector=not d(job_spec).get("manualSelector")
        )
        return causes

    def field_labels(self, obj: Obj) -> dict[str, str]:
        return {"status.successful": ""}

    def field_label_error(self, label: str) -> str:
        return f'field label "{label}" not supported for "CronJob"'


def types() -> list[ResourceType]:
    return [
        rt(
            "batch",
            "v1",
            "cronjobs",
            "CronJob",
            True,
            short_names=("cj",),
            categories=("all",),
            strategy=CronJobStrategy(),
            status=True,
        ),
        rt("batch", "v1", "jobs", "Job", True, categories=("all",), strategy=JobStrategy(), status=True),
    ]
