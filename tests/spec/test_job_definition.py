"""A job is its model stages, the main one (``engine``) last; a one-stage job may give
that stage's hooks to ``JobDefinition`` directly, and a job file written that way before
(earlier ``stages=`` plus the main stage's hooks) still means the same job."""

from __future__ import annotations

import pytest

from toolkit.spec.job_definition import JobDefinition, JobSpec, StageDefinition


def label_inputs(row, options):
    return {"prompt": row["review"]}


def label_columns(row, options):
    return {"label": row["label"]}


def reply_messages(row, options):
    return {"messages": [{"role": "user", "content": row["review"]}]}


def reply_columns(row, options):
    return {"reply": row["generated_text"]}


LABEL = StageDefinition(name="label", preprocess=label_inputs, postprocess=label_columns,
                        result_columns=lambda options: {"label": "string"})
REPLY = StageDefinition(name="engine", preprocess=reply_messages, postprocess=reply_columns,
                        result_columns=lambda options: {"reply": "string"})


def test_a_job_is_its_stages_with_the_main_one_last():
    job = JobDefinition(name="triage", description="d", spec_model=JobSpec,
                        stages=(LABEL, REPLY))

    assert [stage.name for stage in job.stages] == ["label", "engine"]
    assert job.main_stage is REPLY and job.earlier_stages == (LABEL,)


def test_the_main_stages_hooks_as_keywords_make_the_engine_stage():
    one = JobDefinition(name="reply", description="d", spec_model=JobSpec,
                        preprocess=reply_messages, postprocess=reply_columns,
                        result_columns=lambda options: {"reply": "string"},
                        required_columns=lambda options: ["review"])
    [main] = one.stages
    assert (main.name, main.preprocess, main.required_columns(None)) == \
        ("engine", reply_messages, ["review"])

    # The form multi-stage job files had before: earlier stages, then the main hooks.
    two = JobDefinition(name="triage", description="d", spec_model=JobSpec, stages=(LABEL,),
                        preprocess=reply_messages, postprocess=reply_columns,
                        result_columns=lambda options: {"reply": "string"})
    assert [stage.name for stage in two.stages] == ["label", "engine"]


@pytest.mark.parametrize("stages, problem", [
    ((LABEL,), "its last stage must be the main one, named 'engine'"),
    ((), "its last stage must be the main one"),
    ((REPLY, REPLY), "stage names must differ"),
])
def test_a_job_without_its_main_stage_last_is_refused_naming_the_stages(stages, problem):
    with pytest.raises(ValueError, match=problem):
        JobDefinition(name="triage", description="d", spec_model=JobSpec, stages=stages)


def test_half_a_main_stage_is_refused():
    with pytest.raises(ValueError, match="preprocess, postprocess and result_columns together"):
        JobDefinition(name="reply", description="d", spec_model=JobSpec,
                      preprocess=reply_messages)
