"""Spot workers: ``compute.market_type`` (``--spot``) in the rendered job.yaml, checked
with anyscale's own models; the notice on a Ray cluster, which has no such field; and
``toolkit plan`` pricing spot beside on demand, with a deadline's workers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from toolkit.cli.main import main
from toolkit.cluster.estimate.markets import parse_duration
from toolkit.cluster.price_table import HOURS_PER_MONTH, INSTANCE_PRICES
from toolkit.cluster.render import prepare_submission
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec
from toolkit.spec.models import ComputeConfig

JOB = load_job("text-industry")
L4 = INSTANCE_PRICES["g6.2xlarge"]
HEAD_PRICE = INSTANCE_PRICES["m5.2xlarge"].usd_per_hour


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    print(result.output)
    return result


def rendered(tmp_path: Path, *flags: str) -> dict:
    result = invoke("render", "text-industry", "--rows", "1000", "--output", "s3://b/out",
                    "--accelerator", "L4", "--working-dir", str(tmp_path), *flags)
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.stdout)


def anyscale_compute_config(config: dict):
    from anyscale.compute_config.models import ComputeConfig as AnyscaleComputeConfig

    return AnyscaleComputeConfig.from_dict(config["compute_config"])


def test_render_spot_gives_spot_workers_and_an_on_demand_head(tmp_path: Path) -> None:
    from anyscale.compute_config.models import HeadNodeConfig, MarketType

    config = rendered(tmp_path, "--spot")

    compute = anyscale_compute_config(config)
    (workers,) = compute.worker_nodes
    assert workers.market_type == MarketType.SPOT
    assert workers.instance_type == "g6.2xlarge"
    # anyscale's head node has no market: it is always on demand.
    assert "market_type" not in {f.name for f in HeadNodeConfig.__dataclass_fields__.values()}
    assert config["compute_config"]["head_node"] == {"instance_type": "m5.2xlarge"}


def test_prefer_spot_is_written_as_anyscale_spells_it(tmp_path: Path) -> None:
    from anyscale.compute_config.models import MarketType

    config = rendered(tmp_path, "--set", "compute.market_type=prefer-spot")

    (workers,) = anyscale_compute_config(config).worker_nodes
    assert workers.market_type == MarketType.PREFER_SPOT
    assert config["compute_config"]["worker_nodes"][0]["market_type"] == "PREFER_SPOT"


def test_on_demand_renders_as_before_and_keeps_the_specs_hash(tmp_path: Path) -> None:
    from anyscale.compute_config.models import MarketType

    plain = rendered(tmp_path)
    assert "market_type" not in plain["compute_config"]["worker_nodes"][0]
    (workers,) = anyscale_compute_config(plain).worker_nodes
    assert workers.market_type == MarketType.ON_DEMAND
    # A spec that doesn't set it dumps as before (its staged spec.json, its hashes).
    assert "market_type" not in ComputeConfig().model_dump()
    assert ComputeConfig(market_type="ON_DEMAND").model_dump() == ComputeConfig().model_dump()
    assert rendered(tmp_path, "--set", "compute.market_type=ON_DEMAND") == plain


def test_an_unknown_market_is_refused() -> None:
    result = invoke("render", "text-industry", "--set", "compute.market_type=cheap")
    assert result.exit_code == 2
    assert "compute.market_type" in result.output
    assert "'ON_DEMAND', 'SPOT' or 'PREFER_SPOT'" in result.output


def test_a_ray_cluster_is_told_it_has_no_market(tmp_path: Path) -> None:
    spec = load_job_spec(JOB, overrides={"data.output": "s3://b/out",
                                         "compute.market_type": "SPOT"}, smoke=True)
    notice = ("compute.market_type SPOT is for Anyscale's worker groups; a Ray cluster runs "
              "the job on the nodes it has (spot or not is set where the cluster is "
              "configured), so it is not sent.")

    assert notice in prepare_submission(JOB, spec, target="ray", working_dir=tmp_path).notes
    assert notice not in prepare_submission(JOB, spec, target="anyscale",
                                            working_dir=tmp_path).notes
    on_demand = spec.model_copy(update={"compute": ComputeConfig()})
    assert not any("market_type" in note for note in prepare_submission(
        JOB, on_demand, target="ray", working_dir=tmp_path).notes)


def plan_json(*args: str) -> dict:
    result = invoke("plan", "text-industry", "--rows", "1M", "--accelerator", "L4",
                    "--set", "data.partitions=100", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_without_spot_or_deadline_prints_no_markets() -> None:
    assert "markets" not in plan_json()
    result = invoke("plan", "text-industry", "--rows", "1M", "--accelerator", "L4")
    assert "Markets" not in result.output


def test_plan_spot_prices_both_markets_with_the_interruptions_redone() -> None:
    payload = plan_json("--spot")
    markets = payload["markets"]
    assert markets["market_type"] == "SPOT"
    (rate,) = markets["spot_rates"]
    spot_price = round(L4.usd_per_hour * (1 - L4.spot.discount), 4)
    assert rate["price_per_hour"]["value"] == spot_price
    per_hour = -math.log(1 - L4.spot.monthly_share) / HOURS_PER_MONTH
    assert rate["interruptions_per_instance_hour"]["value"] == round(per_hour, 6)
    assert "Spot Instance Advisor" in rate["price_per_hour"]["detail"]
    lost = markets["rows_lost_per_interruption"]["value"]
    assert lost == 1_000_000 / 100 / 2  # half a block of rows / data.partitions

    on_demand, spot = markets["on_demand"], markets["spot"]
    assert on_demand["workers"]["value"] == spot["workers"]["value"] == 4
    # On demand is the plan's own figures.
    assert on_demand["wall_seconds"]["value"] == payload["wall_seconds"]["value"]
    assert on_demand["cost_usd"]["value"] == payload["cost_usd"]["value"]
    # Spot: each worker loses `lost` rows per interruption, at `per_hour` per instance.
    per_worker = payload["rows_per_second_per_worker"]["value"]
    wall = 1_000_000 / (4 * (per_worker - per_hour / 3600 * lost))
    assert spot["wall_seconds"]["value"] == pytest.approx(wall, abs=0.1)
    assert spot["cost_usd"]["value"] == pytest.approx(
        wall / 3600 * (4 * spot_price + HEAD_PRICE), abs=0.01)
    assert spot["interruptions"]["value"] == pytest.approx(4 * per_hour * wall / 3600,
                                                           rel=0.05)
    assert spot["rows_redone"]["value"] == round(4 * per_hour * wall / 3600 * lost)
    assert spot["cost_usd"]["value"] < on_demand["cost_usd"]["value"] / 2


def test_plan_deadline_gives_each_markets_workers_in_time() -> None:
    payload = plan_json("--deadline", "6h")
    markets = payload["markets"]
    assert markets["deadline_seconds"] == 6 * 3600
    per_worker = payload["rows_per_second_per_worker"]["value"]
    fewest = math.ceil(1_000_000 / (per_worker * 6 * 3600))
    assert markets["on_demand"]["workers"]["value"] == fewest
    for market in ("on_demand", "spot"):
        assert markets[market]["in_time"] is True
        assert markets[market]["wall_seconds"]["value"] <= 6 * 3600
    # One worker fewer would be late.
    assert 1_000_000 / (per_worker * (fewest - 1)) > 6 * 3600


def test_plan_spot_deadline_text_names_both_markets() -> None:
    result = invoke("plan", "text-industry", "--rows", "1M", "--accelerator", "L4", "--spot",
                    "--deadline", "6h")
    assert result.exit_code == 0, result.output
    text = result.output
    assert ("Markets: worker nodes on demand and on spot (the head node stays on demand), "
            "the fewest workers that finish in 6h 00m:") in text
    assert "  spot price/hour:    $0.3910 per instance   table: g6.2xlarge: 60% off on demand" \
        in text
    assert "\n  on demand:          " in text
    assert "\n  spot (yours):       " in text
    assert "rows redone" in text


@pytest.mark.parametrize(("text", "seconds"), [
    ("6h", 21600), ("90m", 5400), ("1h30m", 5400), ("2d", 172800), ("45s", 45),
    ("1.5h", 5400)])
def test_deadlines_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bad_deadline_is_a_usage_error() -> None:
    result = invoke("plan", "text-industry", "--deadline", "soon")
    assert result.exit_code == 2
    assert "'soon' is not a duration such as 6h, 90m or 1h30m" in result.output
