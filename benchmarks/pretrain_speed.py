"""Pretraining speed of every `elmokit pretrain` objective: input and predicted tokens per CPU-second of
training steps, and the masked-positions-only MLM head against transformers' stock head (issue 12).

    python benchmarks/pretrain_speed.py                        # presets mini and tiny, every objective (~5 CPU-min)
    python benchmarks/pretrain_speed.py --presets tiny --objectives bert,bert-stock --repeats 9
    python benchmarks/pretrain_speed.py --smoke                # seconds: tiny corpus, 3 variants, to a temp dir

What a step is. Exactly `elmokit pretrain`'s: the library's own run object (``pretraining.run._PretrainRun``)
is built for each objective and its ``_step`` is called, i.e. draw the batch's masks, forward, loss,
backward, gradient clipping and the AdamW update; the time is the run's own CPU-second count of its steps
(``time.process_time``, the clock of ``--max-seconds``), so reading and tokenising the corpus, training
the tokenizer and building the model are outside it. One torch thread.

Same input for all. One corpus slice (the first ``--corpus-words`` words of gutenberg_en ``train.00``, cut
into documents of ``--doc-paragraphs`` paragraphs, ``--docs-per-shard`` a shard), one tokenizer of each
kind trained once on it (WordPiece 8,000 for the BERT family, XLNet, UniLM and MASS; byte-level BPE for
RoBERTa, GPT and GPT-2), batches of ``--batch-size`` examples of at most ``--max-tokens`` subword tokens,
seed 0. Each objective's examples are its own (NSP pairs, FULL-SENTENCES packs, single segments,
contiguous windows, documents: ``pretraining/corpus.py``), so a batch's real token count differs a little
between objectives; it is reported.

Repeats. All variants of a preset are built first; then round after round each variant runs
``--steps`` steps (the first ``--warmup`` rounds are not counted), the variants' order rotating every
round, so that the load of other processes falls on all alike. Reported: the median over rounds of input
tokens (non-padding, as `elmokit pretrain` counts them) and of predicted tokens (the loss's targets) per
CPU-second, and the stock head's slowdown as the ratio of the two variants' median step times (with the
median of the per-round ratios beside it).

Variants beyond the objectives: ``bert-stock`` is BERT with transformers' ``BertForPreTraining`` loss
(its head scores all B x T positions; ``heads.py``), ``spanbert-sbo`` is ``--objective spanbert --sbo``.
``xlnet`` is XLNet as `elmokit pretrain` runs it today: its segments are the preset's positions
(``mem_len``: 512 at ``mini``, 128 at ``tiny``) whatever ``--max-tokens`` says, so its batch is 32 x 512
at ``mini``; ``xlnet-t128`` cuts the segments at ``--max-tokens`` (the objective's ``segment_length``),
the batch shape of the others. In both, every step starts new streams (the loop builds one segment from
each batch of documents), so the memory is never used. ERNIE is measured in its phrase stage (the
content-word phrase heuristic; its stages differ only in the masks drawn). ``NAME-no-onednn`` (GPT-2,
RoBERTa, XLNet at 128 tokens, MASS; only when named) is the objective with its linear layers' products by
torch's own ops (MKL) instead of oneDNN (``pretraining/fused.py``): the oneDNN lever's share.

Results: a JSON file (``--out``) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import lzma
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO.parent / "shared"))
SOURCE = SHARED / "data" / "gutenberg_en" / "train.00.txt.xz"

from bench_training import cpu_busy_seconds  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


@dataclass(frozen=True)
class Variant:
    name: str
    objective: str
    sbo: bool = False
    stock_head: bool = False  # transformers' own loss over all positions instead of heads.masked_lm_loss
    segment_to_max_tokens: bool = False  # XLNet: segments of --max-tokens instead of the preset's positions
    onednn: bool = True  # False: the linear layers' products by torch's own ops (MKL), not fused.linear's oneDNN


VARIANTS = {v.name: v for v in (
    Variant("gpt", "gpt"), Variant("gpt2", "gpt2"), Variant("bert", "bert"),
    Variant("bert-stock", "bert", stock_head=True), Variant("roberta", "roberta"), Variant("wwm", "wwm"),
    Variant("spanbert", "spanbert"), Variant("spanbert-sbo", "spanbert", sbo=True), Variant("ernie", "ernie"),
    Variant("xlnet", "xlnet"), Variant("xlnet-t128", "xlnet", segment_to_max_tokens=True), Variant("unilm", "unilm"),
    Variant("mass", "mass"),
    Variant("gpt2-no-onednn", "gpt2", onednn=False), Variant("roberta-no-onednn", "roberta", onednn=False),
    Variant("xlnet-t128-no-onednn", "xlnet", segment_to_max_tokens=True, onednn=False),
    Variant("mass-no-onednn", "mass", onednn=False),
)}


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


# ---- inputs ---------------------------------------------------------------------------------------


def build_corpus(target: Path, source: Path, words: int, doc_paragraphs: int, docs_per_shard: int) -> dict:
    """The first ``words`` words of ``source`` (one paragraph a line) as documents of ``doc_paragraphs``
    paragraphs, ``docs_per_shard`` documents a file (BERT's NSP needs two documents a shard)."""
    target.mkdir(parents=True, exist_ok=True)
    documents, document, count = [], [], 0
    with lzma.open(source, "rt", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            document.append(line.strip())
            count += len(line.split())
            if len(document) == doc_paragraphs:
                documents.append(document)
                document = []
            if count >= words:
                break
    if document:
        documents.append(document)
    shards = [documents[i:i + docs_per_shard] for i in range(0, len(documents), docs_per_shard)]
    if len(shards) > 1 and len(shards[-1]) < 2:
        last = shards.pop()  # not `shards[-2] += shards.pop()`: -2 would be read before the pop, set after
        shards[-1] += last
    for k, shard in enumerate(shards):
        (target / f"part.{k:02d}.txt").write_text("\n\n".join("\n".join(d) for d in shard) + "\n", encoding="utf-8")
    return {"source": os.path.relpath(source, REPO), "words": count, "documents": len(documents), "shards": len(shards),
            "doc_paragraphs": doc_paragraphs}


def train_tokenizers(kinds: set[str], corpus: Path, target: Path, vocab_size: int, max_tokens: int) -> dict[str, Path]:
    """One tokenizer folder per kind, trained once on the slice with the lines `elmokit pretrain` uses."""
    from elmokit.pretraining.run import TOKENIZER_TEMPLATES, _tokenizer_lines
    from elmokit.text.subword_tokenizers import train_byte_bpe, train_wordpiece

    files = sorted(corpus.glob("part.*.txt"))
    folders = {}
    for kind in sorted(kinds):
        folder = target / kind
        lines = _tokenizer_lines(files, 1_000_000)
        if kind == "wordpiece":
            train_wordpiece(lines, folder, vocab_size=vocab_size, model_max_length=max_tokens)
        else:
            train_byte_bpe(lines, folder, vocab_size=vocab_size, template=TOKENIZER_TEMPLATES[kind],
                           model_max_length=max_tokens)
        folders[kind] = folder
    return folders


# ---- the runs --------------------------------------------------------------------------------------


def stock_bert_loss(model, batch):
    """BERT's loss as transformers computes it: ``BertForPreTraining``'s MLM head on all B x T positions
    (then -100 ignored) plus NSP; equal to ``MaskedLMObjective.loss`` up to rounding (tests/pretraining/
    test_pretraining_heads.py)."""
    from elmokit.pretraining.batching import ObjectiveLoss

    names = ("input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label")
    loss = model(**{k: batch[k] for k in names if k in batch}).loss
    return ObjectiveLoss(loss, {"loss": float(loss.detach())}, int((batch["labels"] != -100).sum()),
                         int(batch["attention_mask"].sum()))


class Timed:
    """One variant's `elmokit pretrain` run object, stepped a few steps at a time."""

    def __init__(self, variant: Variant, preset: str, corpus: Path, tokenizers: dict[str, Path], args, run_dir: Path):
        from elmokit.engine.distributed import DistributedContext
        from elmokit.engine.run_folder import RunFolder
        from elmokit.pretraining.registry import OBJECTIVES
        from elmokit.pretraining.run import RUN_KIND, PretrainConfig, _PretrainRun

        self.variant = variant
        spec = OBJECTIVES[variant.objective]
        config = PretrainConfig(objective=variant.objective, preset=preset, sbo=variant.sbo, max_tokens=args.max_tokens,
                                tokenizer_dir=str(tokenizers[spec.tokenizer]), batch_size=args.batch_size,
                                seed=args.seed, max_steps=1_000_000, warmup_steps=10, log_every=1_000_000)
        folder = RunFolder.open(run_dir, kind=RUN_KIND, resume=False)
        self.run = _PretrainRun(folder, [str(corpus / "part.*.txt")], config, "benchmarks/pretrain_speed.py",
                                torch.device("cpu"), False, DistributedContext())
        # the first step (a warm-up round's) also counts one forward + backward's FLOPs (torch.utils.flop_counter)
        self.run.need_flops = True
        if variant.stock_head:
            self.run.objective.loss = stock_bert_loss
        if variant.segment_to_max_tokens:
            self.run.objective.segment_length = args.max_tokens
        if variant.objective == "ernie":  # to the phrase stage
            self.run.objective.load_state_dict({"batches_done": self.run.objective.schedule.basic_batches})
        self.run.model.train()
        for module in self.run.modules.values():
            module.train()
        self.batches = self.run._global_batches()
        self.step = 0
        self.rounds: list[dict] = []
        self.parameters = sum(p.numel() for p in self.run.parameters)

    def steps(self, n: int) -> dict:
        """``n`` training steps: their CPU-seconds (the run's own count), wall seconds, tokens, targets."""
        from elmokit.pretraining.fused import ONEDNN

        ONEDNN["enabled"] = self.variant.onednn  # the run's linear layers were switched to fused.linear at its build
        cpu, wall, tokens, targets, losses = 0.0, 0.0, 0, 0, []
        for _ in range(n):
            item, _epoch = next(self.batches)  # example building (corpus tokenising) is not a step
            self.step += 1
            before_cpu, before_wall = self.run.cpu_s, time.perf_counter()
            outcome = self.run._step(item, self.step)
            wall += time.perf_counter() - before_wall
            cpu += self.run.cpu_s - before_cpu
            tokens += outcome.tokens
            targets += outcome.extra["targets"]
            losses.append(outcome.loss)
        return {"steps": n, "cpu_s": cpu, "wall_s": wall, "tokens": tokens, "targets": targets, "loss": losses[-1]}


def summarise(rounds: list[dict]) -> dict:
    def median(key):
        return statistics.median(r[key] for r in rounds)

    per_round = [{"tokens_per_cpu_s": r["tokens"] / r["cpu_s"], "targets_per_cpu_s": r["targets"] / r["cpu_s"],
                  "step_cpu_s": r["cpu_s"] / r["steps"], "tokens_per_wall_s": r["tokens"] / r["wall_s"]} for r in rounds]
    steps = sum(r["steps"] for r in rounds)
    return {
        "tokens_per_cpu_s": statistics.median(x["tokens_per_cpu_s"] for x in per_round),
        "targets_per_cpu_s": statistics.median(x["targets_per_cpu_s"] for x in per_round),
        "step_cpu_s": statistics.median(x["step_cpu_s"] for x in per_round),
        "step_cpu_s_min": min(x["step_cpu_s"] for x in per_round),
        "step_cpu_s_max": max(x["step_cpu_s"] for x in per_round),
        "tokens_per_wall_s": statistics.median(x["tokens_per_wall_s"] for x in per_round),
        "tokens_per_batch": sum(r["tokens"] for r in rounds) / steps,
        "targets_per_batch": sum(r["targets"] for r in rounds) / steps,
        "last_loss": rounds[-1]["loss"], "rounds": len(rounds), "steps_per_round": rounds[0]["steps"],
        "cpu_s_total": median("cpu_s") * len(rounds),
    }


def measure_preset(preset: str, names: list[str], corpus: Path, tokenizers: dict[str, Path], args, work: Path) -> dict:
    timed = []
    for name in names:
        log(f"{preset}: building {name}")
        timed.append(Timed(VARIANTS[name], preset, corpus, tokenizers, args, work / "runs" / preset / name))
    busy_before, own_before, wall_before = cpu_busy_seconds(), time.process_time(), time.perf_counter()
    for round_ in range(args.warmup + args.repeats):
        order = timed[round_ % len(timed):] + timed[:round_ % len(timed)]
        for t in order:
            result = t.steps(args.steps)
            if round_ >= args.warmup:
                t.rounds.append(result)
        log(f"{preset}: round {round_ + 1}/{args.warmup + args.repeats}"
            + (" (warm-up)" if round_ < args.warmup else ""))
    wall = time.perf_counter() - wall_before
    others = (cpu_busy_seconds() - busy_before - (time.process_time() - own_before)) / wall
    results = {t.variant.name: {**summarise(t.rounds), "parameters": t.parameters,
                                "model": type(t.run.model).__name__, "rounds_raw": t.rounds,
                                "segment_tokens": getattr(t.run.objective, "segment_length", None)} for t in timed}
    for t in timed:  # model FLOP/s: the first batch's FLOPs per token x tokens per batch, over the wall time of a step
        r, flops = results[t.variant.name], t.run.record.get("flops")
        if flops:
            r["flops_per_step"] = flops["per_token"] * r["tokens_per_batch"]
            r["model_gflop_per_wall_s"] = flops["per_token"] * r["tokens_per_wall_s"] / 1e9
    if "bert" in results and "bert-stock" in results:
        fast = {t.variant.name: t for t in timed}
        paired = [s["cpu_s"] / m["cpu_s"] for s, m in zip(fast["bert-stock"].rounds, fast["bert"].rounds)]
        results["_stock_head_slowdown"] = {
            "ratio_of_median_step_times": results["bert-stock"]["step_cpu_s"] / results["bert"]["step_cpu_s"],
            "median_of_paired_round_ratios": statistics.median(paired), "paired_round_ratios": paired}
    return {"variants": results, "other_processes_cpus": others, "wall_s": wall}


def markdown(report: dict) -> str:
    lines = []
    for preset, measured in report["presets"].items():
        variants = measured["variants"]
        lines += [f"Preset `{preset}` (other processes kept {measured['other_processes_cpus']:.2f} of the 2 CPUs busy):", "",
                  "| variant | model | parameters | input tokens / batch | predicted / batch | step (CPU-s, median; min-max) "
                  "| input tokens / CPU-s | predicted tokens / CPU-s | input tokens / wall s | share of the mm rate |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r in variants.items():
            if name.startswith("_"):
                continue
            lines.append(f"| {name} | {r['model']} | {r['parameters']:,} | {r['tokens_per_batch']:,.0f} | "
                         f"{r['targets_per_batch']:,.0f} | {r['step_cpu_s']:.3f} ({r['step_cpu_s_min']:.3f}-"
                         f"{r['step_cpu_s_max']:.3f}) | {r['tokens_per_cpu_s']:,.0f} | {r['targets_per_cpu_s']:,.0f} | "
                         f"{r['tokens_per_wall_s']:,.0f} | "
                         + (f"{100 * r['fraction_of_matmul_rate']:.0f}% |" if "fraction_of_matmul_rate" in r else "— |"))
        slow = variants.get("_stock_head_slowdown")
        if slow:
            lines += ["", f"Stock head / masked-only head, BERT `{preset}`: {slow['ratio_of_median_step_times']:.2f}x "
                          f"(ratio of median step times; median of the per-round ratios "
                          f"{slow['median_of_paired_round_ratios']:.2f}x, rounds "
                          + ", ".join(f"{x:.2f}" for x in slow["paired_round_ratios"]) + ")"]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="mini,tiny", help="comma-separated model presets (tiny, mini, small)")
    parser.add_argument("--objectives", default=",".join(n for n in VARIANTS if not n.endswith("-no-onednn")),
                        help=f"comma-separated variants, of: {', '.join(VARIANTS)} (the -no-onednn ones only when named)")
    parser.add_argument("--batch-size", type=int, default=32, help="examples a batch")
    parser.add_argument("--max-tokens", type=int, default=128, help="longest example in subword tokens")
    parser.add_argument("--vocab-size", type=int, default=8000, help="tokenizer vocabulary (every kind)")
    parser.add_argument("--corpus-words", type=int, default=150_000, help="words of the gutenberg_en slice")
    parser.add_argument("--doc-paragraphs", type=int, default=40, help="paragraphs a document of the slice")
    parser.add_argument("--docs-per-shard", type=int, default=6, help="documents a corpus file of the slice")
    parser.add_argument("--warmup", type=int, default=1, help="rounds not counted (first steps: allocation, caches)")
    parser.add_argument("--repeats", type=int, default=5, help="counted rounds (the median is reported)")
    parser.add_argument("--steps", type=int, default=3, help="steps of each variant per round")
    parser.add_argument("--seed", type=int, default=0, help="run seed (weights, masks, examples)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--work-dir", default=None, help="where the slice, tokenizers and run folders go "
                                                         "(default: a temporary folder, removed after)")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "pretrain_speed.json"),
                        help="the JSON report")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: preset tiny, gpt2/bert/bert-stock, a small slice, 2 rounds; report to the work dir")
    args = parser.parse_args(argv)
    if args.smoke:
        args.presets, args.objectives, args.corpus_words, args.vocab_size = "tiny", "gpt2,bert,bert-stock", 20_000, 1000
        args.warmup, args.repeats, args.steps, args.batch_size = 1, 2, 1, 8
    names = [n for n in args.objectives.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if not SOURCE.exists():
        sys.exit(f"{SOURCE}: not found; the benchmark reads the gutenberg_en corpus of the shared data folder "
                 "(set ELMOKIT_SHARED)")
    torch.set_num_threads(args.threads)
    from elmokit.io import atomic_path
    from elmokit.pretraining.registry import OBJECTIVES

    with tempfile.TemporaryDirectory(prefix="pretrain_speed_") as tmp:
        work = Path(args.work_dir) if args.work_dir else Path(tmp)
        if args.smoke and args.out == parser.get_default("out"):
            args.out = str(work / "pretrain_speed.json")
        started = time.perf_counter()
        corpus = build_corpus(work / "corpus", SOURCE, args.corpus_words, args.doc_paragraphs, args.docs_per_shard)
        log("corpus:", corpus)
        kinds = {OBJECTIVES[VARIANTS[n].objective].tokenizer for n in names}
        tokenizers = train_tokenizers(kinds, work / "corpus", work / "tokenizers", args.vocab_size, args.max_tokens)
        presets = {}
        from bench_training import matmul_gflops

        gemm_before = matmul_gflops(args.threads)
        for preset in args.presets.split(","):
            presets[preset] = measure_preset(preset, names, work / "corpus", tokenizers, args, work)
        gemm_after = matmul_gflops(args.threads)
        gemm = (gemm_before + gemm_after) / 2
        for measured in presets.values():
            for r in measured["variants"].values():
                if "model_gflop_per_wall_s" in r:
                    r["fraction_of_matmul_rate"] = r["model_gflop_per_wall_s"] / gemm
        import transformers

        given = list(argv if argv is not None else sys.argv[1:])
        if "--work-dir" in given[:-1]:  # a scratch folder of this machine: not part of the record
            given[given.index("--work-dir") + 1] = "DIR"
        report = {
            "command": "python " + " ".join([os.path.relpath(__file__, REPO), *given]),
            "date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "corpus": corpus,
            "batch": {"examples": args.batch_size, "max_tokens": args.max_tokens},
            "rounds": {"warmup": args.warmup, "counted": args.repeats, "steps_each": args.steps},
            "clock": "time.process_time of the training steps (the run's cpu_s, all threads summed) and their wall time",
            "matmul_gflop_per_s": gemm, "matmul_gflop_per_s_before_after": [gemm_before, gemm_after],
            "presets": presets, "total_wall_s": time.perf_counter() - started,
            "process_cpu_s": sum(getattr(resource.getrusage(resource.RUSAGE_SELF), f) for f in ("ru_utime", "ru_stime")),
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp_out:
            Path(tmp_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(markdown(report))
        log(f"wrote {out}")


if __name__ == "__main__":
    main()
