"""Engine settings as users write them: one meaning on both engines, or refused by name."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.engines.batch_stage import actor_pool
from toolkit.errors import SpecError
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec, spec_to_yaml

JOB = load_job("text-industry")


def engine(**overrides: object):
    return load_job_spec(JOB, overrides={f"engine.{k}": v for k, v in overrides.items()}).engine


@pytest.mark.parametrize(("written", "pool"), [
    (4, (4, 4)), ("4", (4, 4)), ("1-4", (1, 4)), ([1, 4], (1, 4)), ([3, 3], (3, 3)),
])
def test_concurrency_is_a_number_or_a_range(written: object, pool: tuple[int, int]) -> None:
    config = engine(concurrency=written)
    assert config.pool_size == pool and config.concurrency == pool[1]


def test_a_range_survives_show_and_a_plain_flag_replaces_it(tmp_path) -> None:
    spec = load_job_spec(JOB, overrides={"engine.concurrency": "2-6"})
    assert "concurrency:\n  - 2\n  - 6\n" in spec_to_yaml(spec)
    shown = tmp_path / "shown.yaml"
    shown.write_text(spec_to_yaml(spec))
    assert load_job_spec(JOB, spec_file=shown).engine.pool_size == (2, 6)
    fixed = load_job_spec(JOB, spec_file=shown, overrides={"engine.concurrency": "8"})
    assert fixed.engine.pool_size == (8, 8)


@pytest.mark.parametrize(("written", "message"), [
    ("4-1", "the lower end is more than the upper end"),
    ([1, 2, 3], "is not a range; write [min, max]"),
    ("0", "greater than 0"),
])
def test_a_bad_concurrency_is_refused(written: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        engine(concurrency=written)
    assert message in str(caught.value)


def test_the_transformers_pool_is_fixed_or_autoscaling_as_written() -> None:
    fixed, scaling = actor_pool(*engine(concurrency=4).pool_size), actor_pool(1, 4)
    assert (fixed.min_size, fixed.max_size) == (4, 4)
    assert (scaling.min_size, scaling.max_size) == (1, 4)


def test_concurrency_flag_takes_a_range() -> None:
    result = CliRunner().invoke(main, ["show", "text-industry", "--concurrency", "1-4"])
    assert result.exit_code == 0, result.output
    assert "concurrency:\n  - 1\n  - 4\n" in result.output


@pytest.mark.parametrize(("overrides", "says"), [
    ({"max_concurrent_batches": 4},
     "engine.max_concurrent_batches only applies to kind: vllm, not transformers"),
    ({"engine_kwargs": {"tensor_parallel_size": 2}},
     "the transformers engine can't honour engine_kwargs.tensor_parallel_size"),
])
def test_vllm_only_settings_are_refused_for_transformers(overrides, says) -> None:
    with pytest.raises(SpecError) as caught:
        engine(kind="transformers", accelerator_type="L4", **overrides)
    assert says in str(caught.value)


def test_a_starved_vllm_engine_is_warned_about() -> None:
    assert engine().engine_warnings() == []  # 256 rows x 8 batches in flight
    (warning,) = engine(batch_size=16).engine_warnings()
    assert warning.startswith(
        "engine.batch_size 16 x max_concurrent_batches 8 = 128 rows in flight per worker, "
        "fewer than vLLM's max_num_seqs 256")
    assert engine(batch_size=16, max_concurrent_batches=16).engine_warnings() == []
    assert engine(batch_size=16, engine_kwargs={"max_model_len": 256, "max_num_seqs": 64}
                  ).engine_warnings() == []


def test_chat_template_kwargs_reach_the_transformers_template(tiny_chat_model) -> None:
    from toolkit.engines.transformers.chat_engine import TransformersChatEngine

    # The tiny model's template ignores unknown variables, so the probe is a template
    # of our own that prints one.
    plain = TransformersChatEngine(str(tiny_chat_model), {"max_model_len": 256})
    probed = TransformersChatEngine(str(tiny_chat_model), {"max_model_len": 256},
                                    chat_template_kwargs={"probe": "xyzzy"})
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ probe | default('') }}"
    for one in (plain, probed):
        one.tokenizer.chat_template = template
    chat = [{"role": "user", "content": "hi"}]
    decode = lambda e: e.tokenizer.decode(e._prepare_prompts([chat])[0])  # noqa: E731
    assert decode(plain) == "hi" and decode(probed) == "hixyzzy"
