"""The operator's last-handled state (kopf's diff base): the same essence as kopf's own, long strings digested."""

from __future__ import annotations

import kopf

from rlplace_operator.controllers.operator import KOPF_PREFIX, DigestDiffBaseStorage


def body(entrypoint: str) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "rlplace.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {
                "name": "train",
                "namespace": "ns",
                "uid": "u-1",
                "resourceVersion": "42",
                "labels": {"team": "rl"},
                "annotations": {
                    "rlplace.io/profile": "actor_cost: 1",
                    f"{KOPF_PREFIX}/last-handled-configuration": "{}",
                },
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"nodeGroups": ["a800"], "entrypoint": entrypoint},
            "status": {"phase": "Running", "placement": {"components": [{"name": "actor"}]}},
        }
    )


def test_the_essence_is_kopfs_without_status_or_system_metadata() -> None:
    ours = DigestDiffBaseStorage(prefix=KOPF_PREFIX)
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX)
    job = body("python -m train")
    assert ours.build(body=job) == kopfs.build(body=job)
    assert ours.build(body=job) == {
        "metadata": {"labels": {"team": "rl"}, "annotations": {"rlplace.io/profile": "actor_cost: 1"}},
        "spec": {"nodeGroups": ["a800"], "entrypoint": "python -m train"},
    }


def test_a_status_field_a_handler_asks_for_is_kept() -> None:
    essence = DigestDiffBaseStorage(prefix=KOPF_PREFIX).build(body=body("x"), extra_fields=["status.phase"])
    assert essence["status"] == {"phase": "Running"}


def test_long_strings_are_kept_as_their_digest() -> None:
    essence = DigestDiffBaseStorage(prefix=KOPF_PREFIX).build(body=body("x" * 1000))
    assert essence["spec"]["entrypoint"].startswith("sha256:")
    assert (
        essence["spec"]["entrypoint"]
        != DigestDiffBaseStorage(prefix=KOPF_PREFIX).build(body=body("y" * 1000))["spec"]["entrypoint"]
    )
