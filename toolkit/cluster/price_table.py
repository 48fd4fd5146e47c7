"""On-demand hourly prices of the instance types the compute table names, for ``toolkit plan``.

AWS, Linux, us-east-1, on-demand, as listed in mid-2025 (:data:`PRICES_AS_OF`).
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
"""

from __future__ import annotations

from dataclasses import dataclass

#: When the prices below were read.
PRICES_AS_OF = "2025-06 (AWS on-demand, Linux, us-east-1)"


@dataclass(frozen=True)
class InstancePrice:
    """One instance type: its on-demand price and what it holds."""

    usd_per_hour: float
    gpus: int
    vcpus: int


#: Instance type -> price. Every type in :mod:`toolkit.cluster.compute_table`,
#: plus the default head node.
INSTANCE_PRICES: dict[str, InstancePrice] = {
    "g6.2xlarge": InstancePrice(0.9776, gpus=1, vcpus=8),      # 1 x L4 24 GB
    "g5.2xlarge": InstancePrice(1.212, gpus=1, vcpus=8),       # 1 x A10G 24 GB
    "g4dn.2xlarge": InstancePrice(0.752, gpus=1, vcpus=8),     # 1 x T4 16 GB
    "g6e.2xlarge": InstancePrice(2.24208, gpus=1, vcpus=8),    # 1 x L40S 48 GB
    "p4d.24xlarge": InstancePrice(21.96, gpus=8, vcpus=96),    # 8 x A100 40 GB
    "p5.48xlarge": InstancePrice(55.04, gpus=8, vcpus=192),    # 8 x H100 80 GB
    "m5.2xlarge": InstancePrice(0.384, gpus=0, vcpus=8),       # CPU workers, head node
}


def instance_price(instance_type: str | None) -> InstancePrice | None:
    """The table's entry for ``instance_type``, or None when it isn't listed."""
    return INSTANCE_PRICES.get(instance_type or "")
