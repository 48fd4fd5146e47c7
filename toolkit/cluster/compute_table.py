"""Which cloud instance type a worker gets for the accelerator its engine asks for.

A rendered Anyscale job names instance types, while a spec names an accelerator
(``engine.accelerator_type: L4``). This small table bridges the two. It holds one
sensible single-GPU (or smallest) AWS instance per accelerator; override it

* per spec with ``compute.worker_instance_type``
  (``--set compute.worker_instance_type=g6.12xlarge``),
* for every render with ``TOOLKIT_INSTANCE_TYPES="L4=g6.4xlarge,A10G=g5.4xlarge"``
  (e.g. to use your cloud's names), or
* in code by passing ``table=`` to :func:`worker_instance_type`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from toolkit.errors import SpecError

#: Accelerator (as Ray names it) -> AWS instance type with that GPU.
ACCELERATOR_INSTANCE_TYPES: dict[str, str] = {
    "L4": "g6.2xlarge",
    "A10G": "g5.2xlarge",
    "T4": "g4dn.2xlarge",
    "L40S": "g6e.2xlarge",
    "A100": "p4d.24xlarge",
    "H100": "p5.48xlarge",
}

#: Workers for a CPU-only engine (``engine.accelerator_type`` unset).
CPU_WORKER_INSTANCE_TYPE = "m5.2xlarge"

OVERRIDE_ENV_VAR = "TOOLKIT_INSTANCE_TYPES"


def instance_type_table(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The built-in table with ``$TOOLKIT_INSTANCE_TYPES`` (``ACC=type,...``) applied.

    Raises:
        SpecError: the variable is not a comma-separated list of ``ACCELERATOR=type``.
    """
    environ = os.environ if environ is None else environ
    table = dict(ACCELERATOR_INSTANCE_TYPES)
    raw = environ.get(OVERRIDE_ENV_VAR, "").strip()
    for item in filter(None, (part.strip() for part in raw.split(","))):
        accelerator, sep, instance_type = item.partition("=")
        if not sep or not accelerator.strip() or not instance_type.strip():
            raise SpecError(
                f"{OVERRIDE_ENV_VAR}: {item!r} is not of the form ACCELERATOR=instance-type.",
                hint=f'For example: {OVERRIDE_ENV_VAR}="L4=g6.4xlarge,A10G=g5.4xlarge"',
            )
        table[accelerator.strip().upper()] = instance_type.strip()
    return table


def worker_instance_type(
    accelerator: str | None,
    override: str | None = None,
    table: Mapping[str, str] | None = None,
) -> str:
    """The worker instance type for ``accelerator`` (``None``: CPU workers).

    Args:
        accelerator: ``engine.accelerator_type``, e.g. ``"L4"``; case does not matter.
        override: ``compute.worker_instance_type``; wins when set.
        table: accelerator -> instance type; defaults to :func:`instance_type_table`.

    Raises:
        SpecError: the accelerator is not in the table and no override is given.
    """
    if override:
        return override
    if accelerator is None:
        return CPU_WORKER_INSTANCE_TYPE
    table = instance_type_table() if table is None else {k.upper(): v for k, v in table.items()}
    instance_type = table.get(accelerator.upper())
    if instance_type is None:
        raise SpecError(
            f"No worker instance type is known for accelerator {accelerator!r} "
            f"(known: {', '.join(sorted(table))}).",
            hint="Name one with --set compute.worker_instance_type=<instance type>, or add "
            f'it for every render with {OVERRIDE_ENV_VAR}="{accelerator}=<instance type>".',
        )
    return instance_type
