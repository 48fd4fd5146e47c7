"""The seeds' batch-inference pattern, as users copy it today: the baseline of
``bench/vs_seed_pattern.py``.

read_parquet -> ``map_batches`` with a class UDF that loads
``pipeline("text-generation")`` once per actor and calls it on each batch ->
write_parquet, on a local Ray, with the same chat messages the toolkit's
text-industry job sends (greedy, ``max_new_tokens`` new tokens, no constraint:
the pattern has none). The pipeline is called with ``batch_size`` = the Ray
batch, left-padded: a stronger baseline than the seeds' literal code, which
leaves the pipeline at one row at a time.

Usage:
    python bench/seed_pattern.py --input rows.parquet --model DIR --output DIR
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


class TextGenerationPredictor:
    """The seeds' HuggingFacePredictor, on chat messages."""

    def __init__(self, model: str, max_new_tokens: int) -> None:
        started = time.monotonic()
        from transformers import pipeline

        self.pipe = pipeline("text-generation", model=model, device="cpu")
        self.pipe.tokenizer.padding_side = "left"
        if self.pipe.tokenizer.pad_token_id is None:
            self.pipe.tokenizer.pad_token = self.pipe.tokenizer.eos_token
        self.max_new_tokens = max_new_tokens
        self.load_seconds: float | None = time.monotonic() - started

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        from toolkit.engines.transformers.chat_engine import log_first_batch
        from toolkit.spec.jobs.catalog import load_job
        from toolkit.spec.loading import load_job_spec

        if self.load_seconds is not None:  # the line the toolkit's engine logs too
            log_first_batch(len(batch["Company"]), self.load_seconds)
            self.load_seconds = None

        job = load_job("text-industry")
        options = job.options_of(load_job_spec(job))
        preprocess = job.main_stage.preprocess
        chats = [preprocess({"Company": c}, options)["messages"] for c in batch["Company"]]
        outputs = self.pipe(chats, max_new_tokens=self.max_new_tokens, do_sample=False,
                            batch_size=len(chats), return_full_text=False)
        batch["generated_text"] = [out[0]["generated_text"] for out in outputs]
        return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-cpus", type=float, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()

    import ray

    ray.init()
    ds = ray.data.read_parquet(args.input)
    ds = ds.map_batches(
        TextGenerationPredictor,
        fn_constructor_kwargs={"model": args.model, "max_new_tokens": args.max_new_tokens},
        batch_size=args.batch_size,
        num_cpus=args.num_cpus,
        compute=ray.data.ActorPoolStrategy(size=1),
    )
    ds.write_parquet(args.output)


if __name__ == "__main__":
    main()
