"""PTB anchor: train a <= 5M-parameter char-CNN biLM on Penn Treebank and report test perplexity.

    python benchmarks/ptb_lm.py --out runs/ptb --epochs 10 --eval-every-epoch
    python benchmarks/ptb_lm.py --out runs/ptb --max-steps 3000 --chunk-steps 500   # CPU budget
    python benchmarks/ptb_lm.py --out runs/ptb --evaluate-only   # the run's latest model, on test
    python benchmarks/ptb_lm.py --out runs/ptb_sgd --epochs 25 --chunk-steps 2104 --kim-recipe
    python benchmarks/ptb_lm.py --out runs/ptb_window --epochs 25 --chunk-steps 1388 --window 35

Anchor: Kim et al. 2016 ("Character-Aware Neural Language Models"), LSTM-Char-Small, 5M
parameters: 92.3 test perplexity (forward LM, 25 epochs, state carried through the test stream).

Differences that make our number *not* directly comparable (reported next to it):
* the biLM is trained with both directions, one shared softmax and token encoder, and the
  parameter count below includes both LSTM stacks and the softmax;
* every sentence (line) starts from a zero state (elmokit's stateless setting), so the first
  words of each sentence have no context; Kim et al. read the test set as one stream;
* the forward perplexity counts every word and one </S> per line (like Mikolov's <eos>).

The optimiser is bilm-tf's Adagrad unless ``--kim-recipe`` asks for Kim et al.'s: plain SGD at learning
rate 1.0, gradient norm clipped at 5, the learning rate halved after every epoch whose validation
perplexity (here the average of the two directions on the first ``--valid-sentences`` valid sentences)
does not improve on the previous epoch's by more than 1.0 (``--chunk-steps 2104`` makes a chunk one epoch of 20-sentence
batches).

``--decay-on-plateau`` applies the same halving rule to Adagrad; switched on when a run resumes, it acts from
the next validation on (the first one after the resume sets the baseline).

``--window 35`` trains as Kim et al. and Zaremba et al. do: the training text in its order, cut into 20
contiguous rows read in 35-token windows with the LSTM state carried from batch to batch (elmokit's
``TrainingConfig.window``; ``--chunk-steps 1388`` is then one epoch). Validation then also reads the
valid sentences as one stream each way (``valid_stream_forward_ppl``).

Two test numbers are reported: every sentence from a zero state (elmokit's setting, as trained), and
the forward LM reading the test set as one stream (``stream_forward_perplexity``: each sentence starts
from the state the previous one ended in), the protocol of Kim et al. and Zaremba et al.

The data is Mikolov's PTB (`../shared/data/ptb_mikolov`, LDC licence: evaluation only, never
committed). Vocabulary: the 10k training types (incl. the literal `<unk>`), plus <S> </S> <UNK>.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO.parent / "shared"))

# Kim et al.'s small char CNN (25 x width filters, widths 1-6; char embedding 15; 1 highway),
# a projected LSTM sized so that the whole biLM + softmax stays under 5M parameters.
PTB_MODEL = dict(
    char_embedding_dim=15,
    filters=[[1, 25], [2, 50], [3, 75], [4, 100], [5, 125], [6, 150]],
    n_highway=1,
    lstm_dim=384,
    projection_dim=150,
    n_layers=2,
    dropout=0.5,  # Kim et al. use 0.5 on PTB
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "runs" / "ptb"), help="run folder (default runs/ptb)")
    parser.add_argument("--max-steps", type=int, default=None, help="total optimiser steps")
    parser.add_argument("--epochs", type=int, default=None, help="or: passes over PTB train")
    parser.add_argument("--chunk-steps", type=int, default=500, help="evaluate on valid every N steps (resuming exactly)")
    parser.add_argument("--batch-size", type=int, default=20, help="sentences per batch (default 20)")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default 0.2 for Adagrad, 1.0 with --kim-recipe)")
    parser.add_argument("--kim-recipe", action="store_true",
                        help="SGD, clip 5, lr halved after a chunk whose validation gains <= 1.0 (Kim et al. 2016)")
    parser.add_argument("--decay-on-plateau", action="store_true",
                        help="with Adagrad: halve the learning rate after a chunk whose validation gains <= 1.0 "
                             "(Kim et al.'s rule; may be switched on when resuming)")
    parser.add_argument("--window", type=int, default=0,
                        help="train on 20 rows of running text in windows of N tokens, the state carried (Kim et al.: 35)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--valid-sentences", type=int, default=1000, help="valid sentences per evaluation (default 1000)")
    parser.add_argument("--test-sentences", type=int, default=None,
                        help="only the first N test sentences (a quick check; default all)")
    parser.add_argument("--evaluate-only", action="store_true",
                        help="no training: evaluate the run's latest model (OUT/model) on test, write OUT/ptb_eval.json")
    args = parser.parse_args()
    if not args.evaluate_only and (args.max_steps is None) == (args.epochs is None):
        parser.error("give exactly one of --max-steps and --epochs")

    from elmokit.bilm import BiLMConfig
    from elmokit.evaluation.perplexity import perplexity
    from elmokit.lm import LanguageModel
    from elmokit.text.corpus import Corpus
    from elmokit.text.vocab import build_vocabulary, count_tokens
    from elmokit.training.config import TrainingConfig
    from elmokit.training.trainer import read_metrics, train

    ptb = SHARED / "data" / "ptb_mikolov"
    if not (ptb / "ptb.train.txt").exists():
        print(f"needs {ptb} (Mikolov's PTB, evaluation only)", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    test_corpus = Corpus(str(ptb / "ptb.test.txt"), limit_lines=args.test_sentences)
    if args.evaluate_only:
        lm, vocabulary, info = LanguageModel.load(out / "model")
        summary = {"steps": info.get("trained_steps"), "training_tokens": info.get("trained_tokens"),
                   **test_numbers(lm, vocabulary, test_corpus)}
        (out / "ptb_eval.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(json.dumps(summary, indent=1))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    vocab_path = out.parent / (out.name + ".vocab.txt")
    if not vocab_path.exists():
        build_vocabulary(count_tokens(Corpus(str(ptb / "ptb.train.txt")))).save(vocab_path)
    model_config = BiLMConfig(**{**PTB_MODEL, "filters": tuple(map(tuple, PTB_MODEL["filters"]))})
    # the anchors read PTB train in its order; sentence batches are shuffled like bilm-tf's
    training = TrainingConfig(batch_size=args.batch_size, max_length=100, shuffle_buffer=1 if args.window else 50_000,
                              window=args.window,
                              softmax="full", seed=0, max_steps=args.max_steps, epochs=args.epochs,
                              checkpoint_every=args.chunk_steps, log_every=50, **optimizer_settings(args, ptb))
    valid = None  # read when first needed: with --kim-recipe or --window the trainer validates itself
    curve = []
    target = args.max_steps
    step = 0
    began = time.time()
    while True:
        stop = step + args.chunk_steps if target is None else min(step + args.chunk_steps, target)
        result = train(out, corpus=str(ptb / "ptb.train.txt"), vocab=vocab_path, model_config=model_config,
                       training=training.replace(max_steps=stop), resume=step > 0 or (out / "training.json").exists(),
                       command="python benchmarks/ptb_lm.py " + " ".join(sys.argv[1:]), progress=False)
        lm, vocabulary, _ = LanguageModel.load(result.model_dir)
        # the trainer validated this step itself when it schedules the learning rate on it
        logged = [e for e in result.history if e.get("step") == result.step and "valid_fwd_ppl" in e]
        if logged:
            v_forward, v_backward = logged[-1]["valid_fwd_ppl"], logged[-1]["valid_bwd_ppl"]
        else:
            valid = valid or list(Corpus(str(ptb / "ptb.valid.txt")))[: args.valid_sentences]
            v = perplexity(lm, vocabulary, valid)
            v_forward, v_backward = v.forward, v.backward
        lrs = [e["lr"] for e in read_metrics(out) if "lr" in e]  # the whole run's, not only this call's
        curve.append({"step": result.step, "tokens": result.tokens, "valid_forward_ppl": v_forward,
                      "valid_backward_ppl": v_backward, "lr": lrs[-1] if lrs else training.lr,
                      "hours": (time.time() - began) / 3600})
        if logged and "valid_stream_fwd_ppl" in logged[-1]:
            curve[-1].update(valid_stream_forward_ppl=logged[-1]["valid_stream_fwd_ppl"],
                             valid_stream_backward_ppl=logged[-1]["valid_stream_bwd_ppl"])
        print(json.dumps(curve[-1]), flush=True)
        finished = result.step < stop or (target is not None and result.step >= target)
        step = result.step
        if finished:
            break
    n_params = sum(p.numel() for p in lm.parameters())
    summary = {
        "parameters_total": n_params,
        "parameters_bilm": sum(p.numel() for p in lm.bilm.parameters()),
        **test_numbers(lm, vocabulary, test_corpus),
        "steps": step, "training_tokens": result.tokens, "wall_hours": (time.time() - began) / 3600,
        "threads": args.threads, "curve": curve,
        "anchor": "Kim et al. 2016 LSTM-Char-Small: 92.3 (5M params)",
    }
    (out / "ptb_result.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "curve"}, indent=1))
    return 0


def optimizer_settings(args, ptb: Path) -> dict:
    """bilm-tf's Adagrad (with ``--decay-on-plateau``, halved on a validation plateau), or Kim et al.'s SGD
    with the learning rate halved on a validation plateau. With ``--window`` or a plateau rule the trainer
    validates each chunk itself (with ``--window`` both zero state and stream)."""
    validate = {"valid_corpus": [str(ptb / "ptb.valid.txt")], "valid_every": args.chunk_steps,
                "valid_sentences": args.valid_sentences}
    if not args.kim_recipe:
        decay = {"lr_decay": 0.5, "lr_decay_min_gain": 1.0} if args.decay_on_plateau else {}
        return {"lr": args.lr or 0.2, **decay, **(validate if args.window or decay else {})}
    return {"optimizer": "sgd", "lr": args.lr or 1.0, "clip_norm": 5.0, "lr_decay": 0.5, "lr_decay_min_gain": 1.0,
            **validate}


def test_numbers(lm, vocabulary, test_corpus) -> dict:
    """Test perplexities: every sentence from a zero state, and the forward LM over the stream."""
    from elmokit.evaluation.perplexity import perplexity, stream_forward_perplexity

    sentences = list(test_corpus)  # read once for both
    test = perplexity(lm, vocabulary, sentences)
    stream = stream_forward_perplexity(lm, vocabulary, sentences)
    return {"test_forward_ppl": test.forward, "test_backward_ppl": test.backward, "test_average_ppl": test.average,
            "test_stream_forward_ppl": stream.forward, "test_sentences": test.num_sentences}


if __name__ == "__main__":
    sys.exit(main())
