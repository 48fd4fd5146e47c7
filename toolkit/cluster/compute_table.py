"""Which cloud instance type a worker gets for the accelerator its engine asks for.

A rendered Anyscale job names instance types, while a spec names an accelerator
(``engine.accelerator_type: L4``). This small table bridges the two. It holds one
sensible single-GPU (or smallest) AWS instance per accelerator, and the 4- and
8-GPU instances for engine workers that span several GPUs; override it

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

#: Accelerator -> {GPUs on the instance: AWS instance type}, for engine workers that
#: need several GPUs on one node (vLLM's tensor_parallel_size x pipeline_parallel_size).
#: A worker gets the smallest instance with at least as many GPUs as it needs.
MULTI_GPU_INSTANCE_TYPES: dict[str, dict[int, str]] = {
    "L4": {4: "g6.12xlarge", 8: "g6.48xlarge"},
    "A10G": {4: "g5.12xlarge", 8: "g5.48xlarge"},
    "T4": {4: "g4dn.12xlarge", 8: "g4dn.metal"},
    "L40S": {4: "g6e.12xlarge", 8: "g6e.48xlarge"},
    "A100": {8: "p4d.24xlarge"},
    "H100": {8: "p5.48xlarge"},
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
    gpus: int = 1,
) -> str:
    """The worker instance type for ``accelerator`` (``None``: CPU workers).

    Args:
        accelerator: ``engine.accelerator_type``, e.g. ``"L4"``; case does not matter.
        override: ``compute.worker_instance_type``; wins when set.
        table: accelerator -> instance type for one-GPU workers; defaults to
            :func:`instance_type_table`.
        gpus: GPUs one engine worker needs on its node (tensor x pipeline parallel
            size); more than one picks from :data:`MULTI_GPU_INSTANCE_TYPES`.

    Raises:
        SpecError: the accelerator is not in the table and no override is given, or
            no known instance holds ``gpus`` of them.
    """
    if override:
        return override
    if accelerator is None:
        return CPU_WORKER_INSTANCE_TYPE
    if gpus > 1:
        return _multi_gpu_instance_type(accelerator, gpus)
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


def _multi_gpu_instance_type(accelerator: str, gpus: int) -> str:
    sizes = MULTI_GPU_INSTANCE_TYPES.get(accelerator.upper(), {})
    fitting = sorted(n for n in sizes if n >= gpus)
    if fitting:
        return sizes[fitting[0]]
    largest = (f"the largest known {accelerator} instance, {sizes[max(sizes)]}, has "
               f"{max(sizes)}" if sizes else f"no multi-GPU {accelerator} instance is known")
    raise SpecError(
        f"One engine worker needs {gpus} {accelerator} GPUs on one node "
        f"(engine.engine_kwargs.tensor_parallel_size x pipeline_parallel_size), and "
        f"{largest}.",
        hint="Lower tensor_parallel_size / pipeline_parallel_size, pick another "
        "engine.accelerator_type, or name an instance that holds them with "
        "--set compute.worker_instance_type=<instance type>.",
    )
