"""ERNIE 1.0's dialogue LM: quoted dialogue extracted from hand-made paragraphs, the three-turn sequences and
their roles by hand, the fake rate and the source mix by binomial bounds, the loss's parts against a
re-statement, exact resume, and a tiny run through the CLI."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from pretraining_testkit import assert_proportion, need_transformers

from elmokit.pretraining.corpus import SpecialIds
from elmokit.pretraining.dialogue import (
    DialoguePool,
    EncodedTurn,
    Q,
    R,
    SourceMix,
    Turn,
    dialogue_sequence,
    dlm_windows,
    extract_dialogues,
    is_utterance,
    parse_mix,
    quote_style,
    role_pattern,
    scan_quotes,
)

# ------------------------------------------------------------------ extraction


def _texts(dialogue):
    return [(t.text, t.speaker) for t in dialogue]


def test_quotes_with_narration_make_turns_and_narration_ends_the_dialogue():
    paragraphs = [
        "It was a dark night. The wind blew.",
        '"Where are you going?" asked Tom.',
        '"To the mill," said Mary, buttoning her coat. "I have work there."',
        '"At this hour?"',
        "She did not answer, and the door closed behind her.",
        '"Is she gone?" said the old man from his chair.',
        '"Gone," said Tom.',
    ]
    dialogues = extract_dialogues(paragraphs)
    assert [_texts(d) for d in dialogues] == [
        [("Where are you going?", 0), ("To the mill,", 1), ("I have work there.", 1), ("At this hour?", 0)],
        [("Is she gone?", 0), ("Gone,", 1)],
    ]
    assert [t.paragraph for t in dialogues[0]] == [1, 2, 2, 3]
    # a sentence broken by its tag is one utterance; a new sentence after the tag is a new turn
    assert _texts(extract_dialogues(['"To the mill," said Mary, "where I work."', '"Why," he asked, "at night?"',
                                     '"Because," she said. "It pays."'])[0]) == [
        ("To the mill, where I work.", 0), ("Why, at night?", 1), ("Because,", 0), ("It pays.", 0)]


def test_nested_quotes_stay_inside_the_utterance_in_both_styles():
    double = ['"Father said \'never after dark\' to you," she said.', "\u201cHe said \u2018go\u2019 and I went.\u201d"]
    assert _texts(extract_dialogues(double)[0]) == [("Father said 'never after dark' to you,", 0),
                                                    ("He said \u2018go\u2019 and I went.", 1)]
    single = ["\u2018He cried \u201cFire!\u201d and ran,\u2019 she said.", "\u2018Don\u2019t be silly. It\u2019s "
              "only the \u2019tween-deck lamp.\u2019", "\u2018Well, I never.\u2019"]
    assert quote_style(single) == "single"
    assert _texts(extract_dialogues(single)[0]) == [
        ("He cried \u201cFire!\u201d and ran,", 0),
        ("Don\u2019t be silly. It\u2019s only the \u2019tween-deck lamp.", 1),  # apostrophes are not quotes
        ("Well, I never.", 0)]


def test_a_quote_spanning_paragraphs_is_one_utterance_of_one_speaker():
    paragraphs = ['"I was born in a small town by the sea.',  # left open: the speech runs on
                  '"My father kept the light there for forty years.',
                  '"And then he died." She looked away.',
                  '"I am sorry," said he.',
                  '"You need not be."']
    dialogue = extract_dialogues(paragraphs)[0]
    assert _texts(dialogue) == [
        ("I was born in a small town by the sea. My father kept the light there for forty years. And then he died.", 0),
        ("I am sorry,", 1), ("You need not be.", 0)]
    assert role_pattern(dialogue) == "QRQ" and dlm_windows(dialogue) == [0]


def test_unmatched_quotes_are_dropped_and_scare_quotes_are_not_speech():
    paragraphs = ['He read the "Times" over breakfast.',  # a title: narration
                  '"Is it late?" she asked.',
                  'He said "perhaps and',  # open, not at a sentence end: unmatched, dropped
                  '"Yes.',  # opens but never closes, and nothing continues it
                  "The clock struck.",
                  '"Fine," she said.', '"Good."']
    assert [_texts(d) for d in extract_dialogues(paragraphs)] == [[("Fine,", 0), ("Good.", 1)]]
    assert scan_quotes('He said "perhaps and', "double").open_tail is None
    assert scan_quotes('"Yes, we went.', "double").open_tail == "Yes, we went."
    assert is_utterance("No!") and is_utterance("gentleman, you know") and not is_utterance("Times")
    # a story that quotes: narration longer than 30 words and than the speech in it is not a turn
    story = ("Soon after this the sexton came to the house on a visit, and the father bewailed his trouble, and told "
             "him how his younger son was so backward in every respect that he knew nothing and learnt nothing, and "
             'then he said to him: "Come with me."')
    assert extract_dialogues(['"Is it late?" she asked.', story, '"Yes, very late."']) == []
    assert _texts(extract_dialogues(['"Is it late?" she asked.', story[-60:], '"Yes, very late."'])[0]) == [
        ("Is it late?", 0), ("Come with me.", 1), ("Yes, very late.", 0)]
    # two speakers in one paragraph (quotes with nothing between): against the convention, so narration
    assert extract_dialogues(['"Is it late?" she asked.', '"Whither away, Hans?" "To Gretel."', '"Yes, very late."']) == []
    # one speaker alone is no exchange
    assert extract_dialogues(['"Hello there, friend."', "He waited."]) == []


# ------------------------------------------------------------------ sequences

SPECIAL = SpecialIds(cls=2, sep=3)


def _toy_dialogue():
    """Five turns: A, B, B, A, A (speaker by paragraph); turn k's tokens are 10k+1, 10k+2, ..."""
    speakers = [0, 1, 1, 0, 0]
    turns = [Turn(f"t{k}", s, k) for k, s in enumerate(speakers)]
    encoded = [EncodedTurn([10 * k + j + 1 for j in range(k + 1)], list(range(k + 1))) for k in range(5)]
    return turns, encoded


def test_windows_roles_and_the_sequence_by_hand():
    turns, encoded = _toy_dialogue()
    assert dlm_windows(turns) == [0, 1, 2]  # (3, 4, ...) would need a sixth turn; none is all one speaker's
    assert [role_pattern(turns[i:i + 3]) for i in range(3)] == ["QRR", "QQR", "QRR"]
    assert role_pattern(turns[2:5]) == "QRR" and dlm_windows([Turn("a", 0, 0)] * 3) == []
    row = dialogue_sequence(encoded[1:4], [Q, Q, R], special=SPECIAL, max_tokens=32)
    # [CLS] 11 12 [SEP] 21 22 23 [SEP] 31 32 33 34 [SEP]
    assert row["input_ids"].tolist() == [2, 11, 12, 3, 21, 22, 23, 3, 31, 32, 33, 34, 3]
    assert row["token_type_ids"].tolist() == [Q, Q, Q, Q, Q, Q, Q, Q, R, R, R, R, R]
    assert row["word_ids"] == [None, 0, 1, None, 2, 3, 4, None, 5, 6, 7, 8, None]
    # too long: the longest turn loses tokens from its end first (13 tokens into 10)
    short = dialogue_sequence(encoded[1:4], [Q, R, Q], special=SPECIAL, max_tokens=10)
    assert short["input_ids"].tolist() == [2, 11, 12, 3, 21, 22, 3, 31, 32, 3]
    assert short["token_type_ids"].tolist() == [Q, Q, Q, Q, R, R, R, Q, Q, Q]


def _pool(n_dialogues=6):
    """A pool over hand-encoded turns (no tokenizer): dialogue d's turn k is [100 d + k]."""
    pool = DialoguePool.__new__(DialoguePool)
    speakers = [[0, 1, 0, 1], [0, 1, 1], [0, 0, 1, 0], [0, 1, 0], [0, 1, 1, 0], [0, 1, 0, 1, 0]][:n_dialogues]
    pool.turns = [[EncodedTurn([100 * d + k], [0]) for k in range(len(s))] for d, s in enumerate(speakers)]
    pool.speakers = speakers
    dialogues = [[Turn("", sp, k) for k, sp in enumerate(s)] for s in speakers]
    pool.windows = [(d, i) for d, dialogue in enumerate(dialogues) for i in dlm_windows(dialogue)]
    pool.utterances = [(d, k) for d, s in enumerate(speakers) for k in range(len(s))]
    return pool


def test_fake_sequences_replace_one_turn_by_another_dialogues_utterance_at_the_fake_rate():
    pool = _pool()
    rng = np.random.default_rng(5)
    n, fakes, replaced_turns = 4000, 0, [0, 0, 0]
    for _ in range(n):
        drawn = pool.draw(rng, 0.3)
        row = pool.sequence(drawn, special=SPECIAL, max_tokens=16)
        d, start, turn, other = drawn
        tokens = row["input_ids"].tolist()[1::2]  # one token a turn: [CLS] t [SEP] t [SEP] t [SEP]
        expected = [100 * d + start + j for j in range(3)]
        speakers = pool.speakers[d][start:start + 3]
        assert row["token_type_ids"].tolist()[1::2] == [Q if s == speakers[0] else R for s in speakers]
        if turn is None:
            assert tokens == expected and row["dialogue_label"] == 0
            continue
        fakes += 1
        replaced_turns[turn] += 1
        assert row["dialogue_label"] == 1 and other[0] != d
        assert [t for j, t in enumerate(tokens) if j != turn] == [t for j, t in enumerate(expected) if j != turn]
        assert tokens[turn] == 100 * other[0] + other[1]
    assert_proportion(fakes, n, 0.3, "fake rate")
    for count in replaced_turns:
        assert_proportion(count, fakes, 1 / 3, "replaced turn")


def test_the_source_mix_is_a_function_of_the_step_with_the_given_proportions():
    mix = SourceMix(parse_mix("text=5,bible=2,dialogue=3"), seed=7)
    assert dict(mix.weights) == {"text": 0.5, "bible": 0.2, "dialogue": 0.3}
    counts = {"text": 0, "bible": 0, "dialogue": 0}
    for k in range(300):
        sources, _ = mix.sources(k, 16)
        assert sources == mix.sources(k, 16)[0]  # the same step gives the same rows, whatever came before
        for s in sources:
            counts[s] += 1
    for name, p in mix.weights.items():
        assert_proportion(counts[name], 300 * 16, p, name)
    assert SourceMix(mix.weights, seed=8).sources(0, 16)[0] != mix.sources(0, 16)[0]
    for bad in ("text", "text=-1", "text=1,text=2", "text=0", "text=nan"):
        with pytest.raises(ValueError):
            parse_mix(bad)


# ------------------------------------------------------------------ the objective on a model and through the CLI

DIALOGUE_LINES = [
    ('"Where are you going tonight?" asked {a}.', '"To the old mill by the river," said {b}.',
     '"At this hour? It is dark."', '"I know. I promised {a} I would come."'),
    ('"Have you seen the ship?" said {a}.', '"No, but I heard the bell ring twice," said {b}. "It must be in."',
     '"Then we must go down to the harbour."'),
]
NAMES = ["Anna", "Boris", "Clara", "David", "Emma", "Felix"]


def _write_novels(path, *, books=3, seed=3):
    rng = random.Random(seed)
    lines = []
    for _ in range(books):
        for _ in range(10):
            lines.append(" ".join(rng.choice(["The night was long.", "Rain fell on the roofs of the town.",
                                              "Nobody came to the door.", "A dog barked far away."]) for _ in range(3)))
            a, b = rng.sample(NAMES, 2)
            lines += [line.format(a=a, b=b) for line in rng.choice(DIALOGUE_LINES)]
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def novels(tmp_path_factory):
    path = tmp_path_factory.mktemp("novels") / "novels.txt"
    _write_novels(path)
    return path


def test_loss_is_mlm_plus_real_fake_cross_entropy_on_the_dialogue_rows(novels, hand_tokenizer):
    need_transformers()
    import torch

    from elmokit.pretraining.dialogue import dialogue_from_options
    from elmokit.pretraining.knowledge import ernie_from_options
    from elmokit.pretraining.models import build_model

    tokenizer = hand_tokenizer
    model = build_model("bert-mlm", "tiny", vocab_size=len(tokenizer), seed=0).eval()
    options = {"max_tokens": 24, "seed": 1, "corpus_files": [str(novels)], "dlm_mix": "text=1,dialogue=1",
               "ernie_stage_batches": 2}
    objective = dialogue_from_options(tokenizer, model, options, ernie_from_options(tokenizer, options))
    assert len(objective.dialogues) == 60  # 30 dialogues of four turns (QRQR or QRRQ): two windows each
    examples = [{"input_ids": np.array([2, 5, 6, 11, 3]), "word_ids": [None, 0, 1, 2, None]}] * 8
    batch = next(objective.batches(examples, batch_size=8, rng=np.random.default_rng(0)))
    is_dialogue = batch["dialogue_label"] != -100
    assert 0 < int(is_dialogue.sum()) < 8 and int(batch["stage"]) == 0
    assert (batch["token_type_ids"][~is_dialogue] == 0).all() and (batch["token_type_ids"][is_dialogue] == 1).any()
    with torch.no_grad():
        out = objective.loss(model, batch)
        hidden = model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            token_type_ids=batch["token_type_ids"]).last_hidden_state
        logits = model.cls(hidden)  # the stock head on every position; the oracle takes the labelled ones
        labels = batch["labels"]
        mlm = torch.nn.functional.cross_entropy(logits[labels != -100], labels[labels != -100])
        pooled = torch.tanh(objective.head.dense(hidden[:, 0]))
        dlm_logits = objective.head.classifier(pooled)[is_dialogue].numpy()
    y = batch["dialogue_label"][is_dialogue].numpy()
    log_softmax = dlm_logits - np.log(np.exp(dlm_logits).sum(-1, keepdims=True))
    dlm = -log_softmax[np.arange(len(y)), y].mean()
    assert out.parts["dlm"] == pytest.approx(float(dlm), rel=1e-5)
    assert float(out.loss) == pytest.approx(float(mlm) + float(dlm), rel=1e-5)


def test_resume_is_bit_identical_and_the_cli_trains(tmp_path, novels, capsys):
    need_transformers()
    import torch
    from safetensors.torch import load_file
    from train_helpers import one_thread

    from elmokit.cli.main import main
    from elmokit.engine.run_folder import read_metrics
    from elmokit.pretraining.run import PretrainConfig, pretrain

    def run(out, steps, *extra):
        with one_thread():
            return main(["pretrain", "--objective", "ernie-dlm", "--corpus", str(novels), "--out", str(out),
                         "--preset", "tiny", "--max-steps", str(steps), "--batch-size", "6", "--vocab-size", "200",
                         "--max-tokens", "32", "--lr", "2e-3", "--log-every", "1", "--checkpoint-every", "3",
                         "--dlm-mix", "text=1,dialogue=1", "--ernie-stage-batches", "2", "--threads", "1", *extra])

    assert run(tmp_path / "straight", 6) == 0, capsys.readouterr().err
    # the same run stopped after 3 steps (its schedule still the 6-step one) and resumed through the CLI
    saved = json.loads((tmp_path / "straight" / "training.json").read_text())["pretraining"]
    config = PretrainConfig.from_dict(saved).replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))
    with one_thread():
        pretrain(tmp_path / "split", corpus=str(novels), config=config.replace(max_steps=3), command="test", progress=False)
        assert main(["pretrain", "--out", str(tmp_path / "split"), "--resume", "--max-steps", "6", "--threads", "1"]) == 0
    untimed = [{k: v for k, v in e.items() if k not in ("tokens_per_s", "elapsed_s", "cpu_s")}
               for e in read_metrics(tmp_path / "straight")]
    assert untimed == [{k: v for k, v in e.items() if k not in ("tokens_per_s", "elapsed_s", "cpu_s")}
                       for e in read_metrics(tmp_path / "split")]
    assert {"mlm", "dlm", "stage", "dialogue_rows"} <= set(untimed[-1]) and [e["stage"] for e in untimed] == [0, 0, 1, 1, 2, 2]
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000006" / name))
        b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000006" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert any(k.startswith("dialogue_head.") for k in load_file(
        str(tmp_path / "split" / "checkpoints" / "step_00000006" / "model.safetensors")))
    record = json.loads((tmp_path / "split" / "training.json").read_text())
    assert record["pretraining"]["dlm_mix"] == "text=1,dialogue=1"


def test_bad_mix_settings_are_refused_in_one_line_before_anything_is_written(tmp_path, novels, capsys):
    need_transformers()
    from elmokit.cli.main import main

    base = ["pretrain", "--objective", "ernie-dlm", "--corpus", str(novels), "--max-steps", "2"]
    cases = [(["--dlm-mix", "text=1,bible=1"], "bible is neither text, dialogue nor a --dlm-text pool"),
             (["--dlm-mix", "text=1,dialogue=-1"], "give NAME=WEIGHT pairs"),
             (["--dlm-fake-rate", "1.5"], "dlm_fake_rate must be in [0, 1]"),
             (["--objective", "bert", "--dlm-mix", "text=1"], "dlm_mix go with --objective ernie-dlm")]
    for k, (extra, message) in enumerate(cases):
        out = tmp_path / f"run{k}"
        assert main([*base, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        assert not out.exists() or not any(out.iterdir())


def test_resume_refuses_changed_dialogue_files(tmp_path, novels, capsys):
    need_transformers()
    from train_helpers import one_thread

    from elmokit.cli.main import main

    dialogues = tmp_path / "dialogues.txt"
    _write_novels(dialogues, books=2, seed=4)
    out = tmp_path / "run"
    with one_thread():
        assert main(["pretrain", "--objective", "ernie-dlm", "--corpus", str(novels), "--out", str(out), "--preset", "tiny",
                     "--max-steps", "4", "--batch-size", "4", "--vocab-size", "200", "--max-tokens", "32",
                     "--checkpoint-every", "2", "--dlm-dialogues", str(dialogues), "--threads", "1"]) == 0
        state = json.loads((out / "checkpoints" / "step_00000004" / "state.json").read_text())
        assert state["objective_state"]["batches_done"] == 4 and len(state["objective_state"]["pools_sha256"]) == 64
        _write_novels(dialogues, books=2, seed=5)  # other dialogue
        assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "6", "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "the dialogue files or text pools differ from the run's" in err and "Traceback" not in err


@pytest.mark.slow  # two fresh processes import transformers: ~20 s
def test_two_processes_run_it_and_their_mlm_part_is_one_processs(tmp_path, novels, monkeypatch):
    """The parts are summed over ranks, so every rank must report the same ones (a rank without dialogue rows
    included); the MLM mean is target-weighted, so on the first step it equals one process's. Dropout off."""
    need_transformers()
    from pretraining_testkit import pretrain_ddp_worker
    from testkit import run_two_ranks
    from train_helpers import one_thread

    from elmokit.engine.run_folder import read_metrics
    from elmokit.pretraining.run import PretrainConfig, pretrain

    config = PretrainConfig(objective="ernie-dlm", preset="tiny", max_steps=4, batch_size=6, vocab_size=200, max_tokens=32,
                            log_every=1, checkpoint_every=100, dropout=0.0, dlm_mix="text=2,dialogue=1")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with one_thread():
        single = pretrain(tmp_path / "single", corpus=str(novels), config=config, command="test", progress=False)
    config = config.replace(tokenizer_dir=str(tmp_path / "single" / "tokenizer"))
    run_two_ranks(pretrain_ddp_worker, (2, f"file://{tmp_path / 'rendezvous'}", str(tmp_path / "ddp"), str(novels),
                                        config.to_dict()))
    ddp = [e for e in read_metrics(tmp_path / "ddp") if "loss" in e]
    assert len(ddp) == 4 and [e["tokens"] for e in ddp] == [e["tokens"] for e in single.history]
    # step 1 (same weights): the MLM mean is one process's; later the target-weighted DLM term has moved the
    # weights a little differently (module docstring), so the MLM means stay close, not equal
    assert ddp[0]["mlm"] == pytest.approx(single.history[0]["mlm"], rel=1e-5)
    np.testing.assert_allclose([e["mlm"] for e in ddp], [e["mlm"] for e in single.history], rtol=1e-3)
