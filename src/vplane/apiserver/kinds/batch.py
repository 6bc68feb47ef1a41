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
