"""SQuAD v1.1 span extraction for any representation (a DrQA-style reader on frozen features) or any
transformer encoder folder (BERT's start/end head, fine-tuned), scored by the official EM and F1.

Only the official dev set is public here: it is split by article (``elmokit.tasks.squad_data``:
every 4th of its 48 articles is the test set, 12 articles; of the other 36, every 6th is the dev set
for early stopping; 30 train). Numbers are therefore not comparable with the SQuAD leaderboard's
(trained on the 87,599 training questions); they compare representations with one another.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from elmokit.data_paths import shared_data
from elmokit.features import feature_source
from elmokit.tasks.metrics import squad_scores
from elmokit.tasks.span_reader import SquadFeatures, train_reader
from elmokit.tasks.squad_data import SquadData, read_squad, split_by_article, squad_examples
from elmokit.transfer.finetune import FineTuneOptions
from elmokit.transfer.finetune_span import finetune_span

SQUAD_FILE = "dev-v1.1.json.xz"


def squad_splits(data_dir: str | os.PathLike | None = None, *, max_train: int | None = None,
                 max_eval: int | None = None) -> dict[str, SquadData]:
    """{"train", "dev", "test"} of the official dev file in ``data_dir`` (default: the shared squad_v1.1 folder);
    ``max_train`` / ``max_eval``: only the first N questions of train / of dev and test."""
    folder = Path(data_dir) if data_dir is not None else shared_data("squad_v1.1")
    path = next((folder / name for name in (SQUAD_FILE, "dev-v1.1.json") if (folder / name).is_file()), None)
    if path is None:
        raise FileNotFoundError(f"{folder / SQUAD_FILE}: no such file; fix: pass --data-dir (the folder with "
                                "dev-v1.1.json[.xz]) or set ELMOKIT_SHARED")
    splits = {name: squad_examples(articles, str(path)) for name, articles in split_by_article(read_squad(path)).items()}
    return {name: data.head(max_train if name == "train" else max_eval) for name, data in splits.items()}


def run_feature_squad(rep, splits: dict[str, SquadData], *, seed: int, cache_dir, log=None, **train_options) -> dict:
    features = {name: SquadFeatures(data, feature_source(rep, [p.words for p in data.paragraphs], cache_dir),
                                    feature_source(rep, [q.words for q in data.questions], cache_dir))
                for name, data in splits.items()}
    reader, result = train_reader(features["train"], features["dev"], num_layers=rep.num_layers, dim=rep.dim, seed=seed,
                                  log=log, **train_options)
    return {"dev": squad_scores(reader.predict(features["dev"]), splits["dev"].gold()),
            "test": squad_scores(reader.predict(features["test"]), splits["test"].gold()),
            "best_epoch": result.best_epoch, "epochs_run": len(result.history), "stopped_early": result.stopped_early,
            "history": result.history}


def run_finetune_squad(folder, splits: dict[str, SquadData], *, seed: int, options=None, patience: int | None = None,
                       max_answer_words: int = 30, log=None) -> dict:
    options = dataclasses.replace(options or FineTuneOptions(), seed=seed)
    tuned, result = finetune_span(folder, splits["train"], splits["dev"], options=options, patience=patience,
                                  max_answer_words=max_answer_words, log=log)
    return {"dev": squad_scores(tuned.predict(splits["dev"]), splits["dev"].gold()),
            "test": squad_scores(tuned.predict(splits["test"]), splits["test"].gold()),
            "best_epoch": result.best_epoch, "epochs_run": len(result.history), "stopped_early": result.stopped_early,
            "options": dataclasses.asdict(options), "history": result.history}


def format_squad_table(rows: list[dict]) -> str:
    """rows: {"representation", "summary": glue.summarize(...)} -> EM and F1 (± the spread of F1 over seeds)."""
    width = max([len("representation")] + [len(r["representation"]) for r in rows])
    lines = [f"{'representation':<{width}}  {'EM':>6}  {'F1':>11}"]
    for row in rows:
        mean, std, seeds = row["summary"]["mean"], row["summary"]["std"], row["summary"]["seeds"]
        f1 = f"{mean['f1']:.1f}" + (f"±{std['f1']:.1f}" if seeds > 1 else "")
        lines.append(f"{row['representation']:<{width}}  {mean['exact_match']:>6.1f}  {f1:>11}")
    return "\n".join(lines)
