"""Hourly prices of the instance types the compute table names, on demand and spot,
for ``toolkit plan``.

On demand: AWS, Linux, us-east-1, as listed in mid-2025 (:data:`PRICES_AS_OF`).
Prices change and differ by region and by discount (spot, savings plans,
Anyscale's own rates): treat them as rough and pass ``--price-per-hour`` for
the price you actually pay.

Sources:

- AWS EC2 On-Demand pricing, https://aws.amazon.com/ec2/pricing/on-demand/
  (g4dn, g5, g6, g6e, m5 rows; us-east-1, Linux);
- AWS News Blog, 2025-06-05, "Announcing up to 45% price reduction for Amazon
  EC2 NVIDIA GPU-accelerated instances",
  https://aws.amazon.com/blogs/aws/announcing-up-to-45-price-reduction-for-amazon-ec2-nvidia-gpu-accelerated-instances/
  (P4d and P5 on-demand prices after the June 2025 cut; before it p4d.24xlarge
  was $32.77/h and p5.48xlarge $98.32/h);
- a searchable mirror of the same list: https://instances.vantage.sh/

Spot (:class:`SpotFigures`, :data:`SPOT_AS_OF`): each type's savings over on demand
and its frequency of interruption, as the AWS Spot Instance Advisor
(https://aws.amazon.com/ec2/spot/instance-advisor/, us-east-1, Linux) publishes
them: the savings as a trailing-month average, the interruptions as a bucket of the
share of spot instances AWS took back in the trailing month (<5%, 5-10%, 10-15%,
15-20%, >20%). The figures below are that published page's as we knew them in
2025, rounded to 5%, not fetched (nothing here reaches the network): both change
month to month and by region, so check the Advisor before relying on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: When the prices below were read.
PRICES_AS_OF = "2025-06 (AWS on-demand, Linux, us-east-1)"
#: Where and when the spot figures below come from.
SPOT_AS_OF = "AWS Spot Instance Advisor, us-east-1, Linux, 2025 (approximate)"
#: Hours in the Advisor's month (AWS bills a month as 730 hours).
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class SpotFigures:
    """What the Spot Instance Advisor says of one instance type (see the module's doc)."""

    #: Savings over the on-demand price, 0-1 (0.6: a spot hour costs 40% of on demand).
    discount: float
    #: The Advisor's frequency-of-interruption bucket: ``<5%`` ... ``>20%``.
    interruptions: str

    @property
    def monthly_share(self) -> float:
        """The share of instances taken back in a month: the bucket's upper edge (its
        worse end), and 20% for ``>20%``, which is then a lower bound."""
        edge = self.interruptions.rstrip("%").lstrip("<>").split("-")[-1]
        return float(edge) / 100

    @property
    def per_instance_hour(self) -> float:
        """Expected interruptions of one instance per hour: a constant rate that takes
        back :attr:`monthly_share` of the instances within a month."""
        return -math.log(1 - self.monthly_share) / HOURS_PER_MONTH


@dataclass(frozen=True)
class InstancePrice:
    """One instance type: its on-demand price, what it holds and its spot figures."""

    usd_per_hour: float
    gpus: int
    vcpus: int
    spot: SpotFigures | None = None

    def workers_per_instance(self, gpus_per_worker: int, cpus_per_worker: float) -> int:
        """How many workers of that size one instance holds (0: not even one)."""
        if gpus_per_worker:
            return self.gpus // gpus_per_worker
        return int(self.vcpus // cpus_per_worker)


#: Instance type -> price. Every type in :mod:`toolkit.cluster.compute_table`,
#: plus the default head node.
#: Spot: savings over on demand, then the Advisor's interruption bucket (:data:`SPOT_AS_OF`).
INSTANCE_PRICES: dict[str, InstancePrice] = {
    "g6.2xlarge": InstancePrice(0.9776, gpus=1, vcpus=8,       # 1 x L4 24 GB
                                spot=SpotFigures(0.60, "10-15%")),
    "g5.2xlarge": InstancePrice(1.212, gpus=1, vcpus=8,        # 1 x A10G 24 GB
                                spot=SpotFigures(0.65, "15-20%")),
    "g4dn.2xlarge": InstancePrice(0.752, gpus=1, vcpus=8,      # 1 x T4 16 GB
                                  spot=SpotFigures(0.65, "5-10%")),
    "g6e.2xlarge": InstancePrice(2.24208, gpus=1, vcpus=8,     # 1 x L40S 48 GB
                                 spot=SpotFigures(0.55, "10-15%")),
    "p4d.24xlarge": InstancePrice(21.96, gpus=8, vcpus=96,     # 8 x A100 40 GB
                                  spot=SpotFigures(0.60, ">20%")),
    "p5.48xlarge": InstancePrice(55.04, gpus=8, vcpus=192,     # 8 x H100 80 GB
                                 spot=SpotFigures(0.55, ">20%")),
    "m5.2xlarge": InstancePrice(0.384, gpus=0, vcpus=8,        # CPU workers, head node
                                spot=SpotFigures(0.60, "<5%")),
}


def instance_price(instance_type: str | None) -> InstancePrice | None:
    """The table's entry for ``instance_type``, or None when it isn't listed."""
    return INSTANCE_PRICES.get(instance_type or "")
