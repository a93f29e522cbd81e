"""XLNet's permutation LM: perm_mask against its definition by brute force, the two streams by
perturbation (bit for bit), memory carried row by row, a few steps lower the loss."""

from __future__ import annotations

import numpy as np
import pytest
from pretraining_testkit import HAND_VOCAB, need_transformers

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining.models import build_model, preset  # noqa: E402
from elmokit.pretraining.permutation import (  # noqa: E402
    PermutationLMObjective,
    batchified_streams,
    compact_targets,
    contiguous_streams,
)
from elmokit.text.subword_tokenizers import wordpiece_from_vocab  # noqa: E402

T = 12


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    tokenizer = wordpiece_from_vocab(HAND_VOCAB)
    objective = PermutationLMObjective(tokenizer, segment_length=T, plm_probability=1 / 3, max_span_length=2)
    model = build_model("xlnet", preset("tiny", dropout=0.0, hidden=20, heads=2, intermediate=36), vocab_size=len(tokenizer),
                        seed=0, pad_id=0).eval()
    rng = np.random.default_rng(0)
    documents = [list(rng.integers(5, 20, size=int(rng.integers(7, 30)))) for _ in range(30)]
    batches = list(objective.batches(documents, batch_size=3, rng=np.random.default_rng(1)))
    return tokenizer, objective, model, documents, batches


def test_perm_mask_is_a_factorisation_order(setup):
    """Brute force: there is an order in which non-targets come first, the targets of the first half
    precede those of the second, and i may not see j exactly when j is a target not before i."""
    _, _, _, _, batches = setup
    for batch in batches[:4]:
        for b in range(batch["input_ids"].shape[0]):
            mask = batch["perm_mask"][b].bool().numpy()
            targets = (batch["labels"][b] != -100).numpy()
            assert targets.any() and not targets.all()
            assert not mask[:, ~targets].any()  # non-targets are seen by everyone
            tpos = np.flatnonzero(targets)
            # the order among targets: j before i iff i may see j; a strict total order (acyclic, complete)
            before = {(i, j) for i in tpos for j in tpos if not mask[i, j]}
            assert all((j, i) not in before for i, j in before) and all((i, i) not in before for i in tpos)
            rank = {i: sum((i, j) in before for j in tpos) for i in tpos}
            assert sorted(rank.values()) == list(range(len(tpos)))
            assert all((rank[i] > rank[j]) == (not mask[i, j]) for i in tpos for j in tpos if i != j)
            assert all(rank[i] < rank[j] for i in tpos for j in tpos if i < T // 2 <= j)
            assert mask[tpos, tpos].all()  # a target never sees itself (query stream)


def test_inputs_keep_the_original_tokens_and_targets_compact(setup):
    _, _, _, documents, batches = setup
    for batch in batches:
        assert not (batch["input_ids"] == 4).any()  # no [MASK] in the content stream (XLNet's inputs_k)
        mapping, labels = compact_targets(batch["labels"])
        assert torch.equal(mapping, batch["target_mapping"]) and torch.equal(labels, batch["target_labels"])
        for b in range(mapping.shape[0]):
            n = int((batch["labels"][b] != -100).sum())
            positions = mapping[b, :n].argmax(-1)
            assert torch.equal(batch["input_ids"][b, positions], labels[b, :n]) and (labels[b, n:] == -100).all()


def test_rows_continue_their_stream(setup):
    """Row i of batch k+1 starts where row i of batch k ended, in a stream made of whole documents."""
    _, objective, _, documents, batches = setup
    rows = [torch.cat([batch["input_ids"][i] for batch in batches]).tolist() for i in range(3)]
    flat = [t for d in documents for t in d]
    sep = objective.separator_id
    for row in rows:
        pieces = [p for p in " ".join(map(str, row)).split(f" {sep} ")]
        for piece in pieces[1:-1]:  # whole documents between separators, in the corpus
            assert [int(x) for x in piece.split()] in documents
        assert len(row) == len(batches) * T and set(row) - {sep} <= set(flat)
    assert [int(b["segment_index"]) for b in batches] == list(range(len(batches)))
    direct = list(contiguous_streams(documents, 3, T, separator_id=sep))
    assert all(torch.equal(torch.from_numpy(d), b["input_ids"]) for d, b in zip(direct, batches))


def _query(model, ids, batch, mems=None):
    with torch.no_grad():
        return model.transformer(input_ids=ids, perm_mask=batch["perm_mask"].float(),
                                 target_mapping=batch["target_mapping"].float(), mems=mems, use_mems=True)


def test_two_streams_see_only_what_perm_mask_allows(setup):
    """Perturbing a token a position may not see leaves that position's output unchanged bit for bit;
    perturbing one it sees changes it (content stream: perm_mask + itself; query stream: perm_mask)."""
    _, _, model, _, batches = setup
    batch = batches[1]
    ids = batch["input_ids"]
    with torch.no_grad():
        content = model.transformer(input_ids=ids, perm_mask=batch["perm_mask"].float()).last_hidden_state  # (B, T, H)
    query = _query(model, ids, batch).last_hidden_state  # (B, P, H)
    b = 0
    mask = batch["perm_mask"][b].bool()
    n = int((batch["target_labels"][b] != -100).sum())
    targets = batch["target_mapping"][b, :n].argmax(-1).tolist()
    changed_any = False
    for j in range(T):
        perturbed = ids.clone()
        perturbed[b, j] = 5 if ids[b, j] != 5 else 6
        with torch.no_grad():
            c2 = model.transformer(input_ids=perturbed, perm_mask=batch["perm_mask"].float()).last_hidden_state
        q2 = _query(model, perturbed, batch).last_hidden_state
        for i in range(T):
            same = torch.equal(c2[b, i], content[b, i])
            if mask[i, j] and i != j:
                assert same, (i, j)
            elif not same:
                changed_any = True
        for m, i in enumerate(targets):
            same = torch.equal(q2[b, m], query[b, m])
            if mask[i, j]:
                assert same, ("query", i, j)
            else:
                assert not same, ("query sees", i, j)
        assert torch.equal(c2[1:], content[1:]) and torch.equal(q2[1:], query[1:])  # other rows untouched
    assert changed_any


def test_memory_carries_over_row_by_row(setup):
    """With the previous segment's mems, a change in row 0 of segment k changes row 0 of segment k+1's
    outputs only; the objective keeps the mems between calls and drops them at segment 0."""
    _, objective, model, _, batches = setup
    first, second = batches[0], batches[1]
    mems = _query(model, first["input_ids"], first).mems
    perturbed = first["input_ids"].clone()
    perturbed[0, 3] = 5 if perturbed[0, 3] != 5 else 6
    mems2 = _query(model, perturbed, first).mems
    out = _query(model, second["input_ids"], second, mems).last_hidden_state
    out2 = _query(model, second["input_ids"], second, mems2).last_hidden_state
    fresh = _query(model, second["input_ids"], second).last_hidden_state
    assert not torch.equal(out[0], out2[0]) and torch.equal(out[1:], out2[1:])
    assert not torch.allclose(out, fresh)
    objective.reset()
    objective.loss(model, first)
    assert objective.mems is not None and objective.mems[0].shape[:2] == (T, 3)
    carried = [m.clone() for m in objective.mems]
    loss_with = objective.loss(model, second).loss
    objective.mems = carried
    zeroed = dict(second, segment_index=torch.tensor(0))
    loss_without = objective.loss(model, zeroed).loss
    assert float(loss_with.detach()) != float(loss_without.detach())


def test_a_few_steps_lower_the_loss(setup):
    _, objective, model, _, batches = setup
    model = build_model("xlnet", preset("tiny", dropout=0.0), vocab_size=model.config.vocab_size, seed=1, pad_id=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    fixed = batches[:3]
    losses = []
    for _ in range(8):
        objective.reset()
        total = 0.0
        for batch in fixed:
            optimizer.zero_grad()
            out = objective.loss(model, batch)
            out.loss.backward()
            optimizer.step()
            total += float(out.loss.detach())
        losses.append(total)
    assert losses[-1] < 0.85 * losses[0] and all(b < a for a, b in zip(losses, losses[1:])), losses


def test_the_run_stream_reads_whole_shards_as_continuing_rows(tmp_path):
    """`elmokit pretrain --objective xlnet` used to train on each batch's first segment only (the rest of
    its documents dropped). The stream now deals a shard's documents onto `rows` streams and emits them
    segment by segment: each `rows` examples are one segment, row i continues row i, and everything but
    each row's last partial segment is read. Oracle: the shuffled documents joined by [SEP] and cut into
    `rows` equal rows by numpy's reshape."""
    from pretraining_testkit import write_document_corpus

    from elmokit.pretraining.corpus import ExampleStream, encode_document, read_documents
    from elmokit.text.subword_tokenizers import load_tokenizer, train_wordpiece

    corpus = tmp_path / "docs.txt"
    write_document_corpus(corpus, documents=8)
    train_wordpiece(corpus.read_text(encoding="utf-8").splitlines(), tmp_path / "tok", vocab_size=300, model_max_length=16)
    tokenizer = load_tokenizer(tmp_path / "tok")
    rows, T = 3, 16
    stream = ExampleStream(str(corpus), tokenizer=tokenizer, reader="segment_rows", max_tokens=T, seed=0, rows=rows)
    examples = stream.shard_examples(0, 0, corpus)
    assert len(examples) % rows == 0 and len(examples) > rows  # more than one segment per shard
    for k in range(len(examples) // rows):
        assert {e["segment_index"] for e in examples[k * rows:(k + 1) * rows]} == {k}
    documents = [encode_document(tokenizer, d) for d in read_documents(corpus)]
    order = np.random.default_rng([0, 0, 1]).permutation(len(documents))  # the shard's rng, as the stream draws it
    streams = [np.asarray([t for s in documents[i].ids for t in s]) for i in order]
    joined = np.concatenate([np.concatenate([[tokenizer.sep_token_id], s]) if i else s for i, s in enumerate(streams)])
    length = len(joined) // rows
    table = joined[: rows * length].reshape(rows, length)
    expected = [table[:, k * T:(k + 1) * T] for k in range(length // T)]
    got = [np.stack([e["input_ids"] for e in examples[k * rows:(k + 1) * rows]]) for k in range(len(expected))]
    assert len(got) * rows == len(examples)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert len(joined) - len(examples) * T < rows * T + rows  # only each row's last partial segment is left
    objective = PermutationLMObjective(tokenizer, segment_length=T)
    batch = next(objective.batches(examples[rows:2 * rows], batch_size=rows, rng=np.random.default_rng(0)))
    assert int(batch["segment_index"]) == 1 and torch.equal(batch["input_ids"], torch.from_numpy(got[1]))
    with pytest.raises(ValueError, match="rows of one segment"):
        next(objective.batches(examples[rows - 1:2 * rows - 1], batch_size=rows, rng=np.random.default_rng(0)))


def test_pretrain_steps_through_the_segments(tmp_path):
    """`elmokit pretrain --objective xlnet`: each step is the next segment of the same rows (the data
    position advances by the batch size, every step feeds batch x --max-tokens tokens), and the model
    is written. Before, each step took 4 new documents and kept their first segment only."""
    import json

    from pretraining_testkit import write_document_corpus
    from train_helpers import one_thread

    from elmokit.pretraining.run import PretrainConfig, pretrain

    corpus = tmp_path / "docs.txt"
    write_document_corpus(corpus, documents=4)
    config = PretrainConfig(objective="xlnet", preset="tiny", max_steps=3, batch_size=2, vocab_size=300, max_tokens=16,
                            log_every=1, checkpoint_every=3, lr=2e-3)
    with one_thread():
        result = pretrain(tmp_path / "run", corpus=str(corpus), config=config, command="test", progress=False)
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_00000003" / "state.json").read_text())
    assert result.step == 3 and result.tokens == 3 * 2 * 16
    assert state["position"] == {**state["position"], "epoch": 0, "shard": 0, "offset": 6}  # 3 segments x 2 rows
    assert (result.model_dir / "config.json").exists()


def test_batchified_streams_fill_every_row_from_fewer_documents_than_rows():
    """Two long documents and 4 rows (the family study's shard of 2 books at batch 32): every row is a
    contiguous quarter of the joined stream, read T at a time; `contiguous_streams` (whole documents
    per row) would give no segment at all."""
    documents = [np.arange(1, 41), np.arange(100, 130)]  # 40 + 30 tokens, separator 0 between them
    segments = batchified_streams(documents, 4, 5, separator_id=0)
    joined = list(range(1, 41)) + [0] + list(range(100, 130))  # 71 tokens -> 4 rows of 17 -> 3 segments of 5
    assert len(segments) == 3
    for k, segment in enumerate(segments):
        assert segment.shape == (4, 5)
        for i in range(4):
            assert segment[i].tolist() == joined[i * 17 + k * 5: i * 17 + (k + 1) * 5]
    assert list(contiguous_streams(documents, 4, 5, separator_id=0)) == []
