"""Transformers engine throughput: ours vs the seed's pipeline("text-generation") pattern,
and what each of our shortcuts gives on its own.

Everything runs in this process on CPU over the same text-industry prompts, without
Ray, so the figures compare the engines and not the cluster. Prints rows/s for:

- baseline: a ``pipeline("text-generation")`` predictor called on the batch's
  prompts, as the seed notebooks do (free text, max_tokens new tokens, batched);
- ours with no shortcuts (whole prompts left-padded, every row computed);
- ours with only the shared prompt head cached (``enable_prefix_caching``);
- ours with only identical greedy prompts answered once (``dedupe``);
- ours with only rows ordered by length into calls of ``--rows-per-call``;
- ours as it runs (all of the above but the per-call cut unless given).

All of ours are choice-constrained (what text-industry runs: the grammar's token mask,
which also stops a row once its choice is complete).

Usage:
    python bench/engine_throughput.py [--model PATH_OR_ID] [--rows 512] [--batch-size 64]
    python bench/engine_throughput.py --random-model 512x8   # hidden 512, 8 layers (~25M)

``--random-model`` builds a random-weight Llama of that size (with the tiny model's
tokenizer) so the forward pass, not Python overhead, dominates, as with real
models; its answers are noise, but the work per token is real.
"""

from __future__ import annotations

import argparse
import time

from toolkit.engines.transformers.chat_engine import TransformersChatEngine, generate_texts
from toolkit.run.row_steps import engine_sampling_params
from toolkit.samples.customers import customers_batch
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec


def build_random_model(size: str) -> str:
    """A random-weight Llama of ``HIDDENxLAYERS`` in a temp dir, sharing the tiny tokenizer."""
    import tempfile

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from toolkit.samples.tiny_model import tiny_chat_model_path

    hidden, layers = (int(x) for x in size.lower().split("x"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_chat_model_path())
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 3,
        num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 256), max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, initializer_range=0.1,
    )
    torch.manual_seed(0)
    directory = tempfile.mkdtemp(prefix=f"bench-llama-{size}-")
    model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"random Llama {size}: {params:.1f}M parameters in {directory}")
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sample:tiny-chat")
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows-per-call", type=int, default=16,
                        help="generate() call size for the length-ordering variant")
    parser.add_argument("--random-model", metavar="HIDDENxLAYERS",
                        help="benchmark a random Llama of this size instead of --model")
    args = parser.parse_args()
    if args.random_model:
        args.model = build_random_model(args.random_model)

    import torch
    from transformers import pipeline

    from toolkit.engines.model_source import ModelLocation
    from toolkit.samples.provider import SAMPLES

    torch.set_num_threads(args.threads)
    job = load_job("text-industry")
    spec = load_job_spec(job)
    options = job.options_of(spec)
    companies = customers_batch(0, args.rows).column("Company").to_pylist()
    stage = job.main_stage
    messages = [stage.preprocess({"Company": c}, options)["messages"] for c in companies]
    warmup = [stage.preprocess({"Company": f"Warm-up {i}"}, options)["messages"] for i in range(8)]
    constrained = engine_sampling_params(spec.sampling, stage.structured_output(options))

    path = ModelLocation(args.model, SAMPLES).path()
    generator = pipeline("text-generation", model=path, device="cpu")
    generator.tokenizer.padding_side = "left"
    if generator.tokenizer.pad_token_id is None:
        generator.tokenizer.pad_token = generator.tokenizer.eos_token

    def baseline(batch: list) -> None:
        generator(batch, max_new_tokens=spec.sampling.max_tokens, do_sample=False,
                  batch_size=len(batch), return_full_text=False)

    def ours(prefix: bool, dedupe: bool, rows_per_call: int | None = None) -> callable:
        engine = TransformersChatEngine(
            args.model, {"max_model_len": 256, "enable_prefix_caching": prefix},
            num_threads=args.threads, samples=SAMPLES, dedupe=dedupe,
            rows_per_call=rows_per_call)

        def run(batch: list) -> None:
            generate_texts(engine, [{"messages": m, "sampling_params": constrained}
                                    for m in batch])
        return run

    print(f"model={args.model} rows={args.rows} batch_size={args.batch_size} "
          f"threads={args.threads} distinct prompts={len(set(map(str, messages)))}")
    variants = [
        ("baseline pipeline('text-generation')", baseline),
        ("ours, no shortcuts", ours(prefix=False, dedupe=False)),
        ("ours, prefix cache only", ours(prefix=True, dedupe=False)),
        ("ours, answer once only", ours(prefix=False, dedupe=True)),
        (f"ours, length order in {args.rows_per_call}s only",
         ours(prefix=False, dedupe=False, rows_per_call=args.rows_per_call)),
        ("ours, as it runs", ours(prefix=True, dedupe=True)),
    ]
    baseline_seconds = None
    for name, fn in variants:
        # Warm-up on other rows, so no variant starts with answers in memory.
        fn(warmup[: min(8, args.rows)])
        started = time.perf_counter()
        for i in range(0, args.rows, args.batch_size):
            fn(messages[i: i + args.batch_size])
        seconds = time.perf_counter() - started
        baseline_seconds = baseline_seconds or seconds
        print(f"{name:40s} {args.rows / seconds:9.1f} rows/s  ({seconds:6.2f} s, "
              f"{baseline_seconds / seconds:4.1f}x)")


if __name__ == "__main__":
    main()
