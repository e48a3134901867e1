"""Pipelines per source and form: the steps a submission becomes, checked when set."""

from __future__ import annotations

import pytest

from idempotency_core.execution.steps import InvalidPipelineError, pipeline_validate
from idempotency_core.intake.sources import source_pipeline_set
from tests.factories import ingest, run_pipeline


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "at least one step"),
        (["create_enquiry", "create_enquiry"], "appears twice"),
        (["send_confirmation", "create_enquiry"], "needs create_enquiry before it"),
        (["create_enquiry", "merge_duplicate"], "Unknown step"),
        (["create_enquiry", "launch_rocket"], "Unknown step"),
    ],
)
def test_a_broken_pipeline_is_refused(steps, message):
    with pytest.raises(InvalidPipelineError, match=message):
        pipeline_validate(steps)


@pytest.mark.django_db
def test_a_form_can_have_its_own_steps(sandbox, source):
    source_pipeline_set(source=source, form="callback", steps=["create_enquiry", "assign_task"])
    callback = ingest("cb-1", form="callback")
    contact = ingest("ct-1", message="Another message")
    assert list(callback.operations.order_by("position").values_list("step", flat=True)) == [
        "create_enquiry",
        "assign_task",
    ]
    assert contact.operations.count() == 3
    run_pipeline(callback)
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 0)
