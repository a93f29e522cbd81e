"""The CRF against brute-force enumeration of every label sequence on tiny lattices."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from elmokit.tasks.crf import ConditionalRandomField, allowed_transitions

torch.set_num_threads(1)


def _random_crf(num_labels: int, seed: int, constraints=None, dtype=torch.float64) -> ConditionalRandomField:
    torch.manual_seed(seed)
    crf = ConditionalRandomField(num_labels, constraints=constraints).to(dtype)
    with torch.no_grad():
        crf.transitions.normal_()
        crf.start_transitions.normal_()
        crf.end_transitions.normal_()
    return crf


def _brute_force(crf, emissions, length, allowed=None):
    """(log Z, best path, best score) by enumerating all sequences, in plain Python floats."""
    n = crf.num_labels
    A = crf.transitions.tolist()
    start, end = crf.start_transitions.tolist(), crf.end_transitions.tolist()
    e = emissions.tolist()
    scores = {}
    for path in itertools.product(range(n), repeat=length):
        if allowed is not None:
            steps = [(n, path[0])] + list(zip(path, path[1:])) + [(path[-1], n + 1)]
            if not all(allowed[i][j] for i, j in steps):
                continue  # forbidden sequence: no probability mass at all
        s = start[path[0]] + end[path[-1]] + sum(e[t][path[t]] for t in range(length))
        s += sum(A[a][b] for a, b in zip(path, path[1:]))
        scores[path] = s
    peak = max(scores.values())
    log_z = peak + math.log(sum(math.exp(s - peak) for s in scores.values()))
    best = max(scores, key=scores.get)
    return log_z, list(best), scores


def _batch(lengths, steps, n, seed):
    g = torch.Generator().manual_seed(seed)
    emissions = torch.randn(len(lengths), steps, n, generator=g, dtype=torch.float64) * 2
    mask = torch.arange(steps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return emissions, mask


def test_log_partition_score_and_viterbi_match_brute_force_with_mixed_lengths():
    crf = _random_crf(3, seed=0)
    lengths = [4, 2, 1, 3]
    emissions, mask = _batch(lengths, 4, 3, seed=1)
    # garbage on padding must not matter
    emissions = emissions.masked_fill(~mask.unsqueeze(2), 1e3)
    log_z = crf.log_partition(emissions, mask)
    decoded = crf.viterbi_decode(emissions, mask)
    g = torch.Generator().manual_seed(2)
    tags = torch.randint(0, 3, (4, 4), generator=g)
    scores = crf.path_score(emissions, tags, mask)
    nll = crf.neg_log_likelihood(emissions, tags, mask)
    for b, length in enumerate(lengths):
        z, best, all_scores = _brute_force(crf, emissions[b, :length], length)
        assert log_z[b].item() == pytest.approx(z, abs=1e-10)
        assert decoded[b] == best
        gold = tuple(tags[b, :length].tolist())
        assert scores[b].item() == pytest.approx(all_scores[gold], abs=1e-10)
        assert nll[b].item() == pytest.approx(z - all_scores[gold], abs=1e-10)


def test_probabilities_sum_to_one():
    crf = _random_crf(3, seed=3)
    emissions, mask = _batch([3], 3, 3, seed=4)
    total = 0.0
    for path in itertools.product(range(3), repeat=3):
        tags = torch.tensor([path])
        total += math.exp(-crf.neg_log_likelihood(emissions, tags, mask).item())
    assert total == pytest.approx(1.0, abs=1e-12)


def _steps_of(path, n):
    return [(n, path[0])] + list(zip(path, path[1:])) + [(path[-1], n + 1)]


BIO = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
BIOES = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "S-LOC"]
IOB1 = ["O", "I-PER", "B-PER", "I-LOC"]


def test_allowed_transitions_bio_by_hand():
    allowed = allowed_transitions(BIO, "BIO")
    n = len(BIO)
    ix = {label: i for i, label in enumerate(BIO)}
    forbidden = [("O", "I-PER"), ("O", "I-LOC"), ("B-PER", "I-LOC"), ("I-LOC", "I-PER"), ("B-LOC", "I-PER")]
    for a, b in forbidden:
        assert not allowed[ix[a], ix[b]], (a, b)
    for a, b in [("O", "B-PER"), ("B-PER", "I-PER"), ("I-PER", "I-PER"), ("I-PER", "B-LOC"), ("I-LOC", "O")]:
        assert allowed[ix[a], ix[b]], (a, b)
    assert allowed[n].tolist()[:n] == [True, True, False, True, False]  # start -> I-x forbidden
    assert allowed[:n, n + 1].all()  # any label may end a sentence
    # exactly the forbidden pairs: I-x after O, B-other or I-other, for each of the 2 types
    assert int((~allowed[:n, :n]).sum()) == 2 * 3


def test_allowed_transitions_bioes_and_iob1_by_hand():
    allowed = allowed_transitions(BIOES, "BIOES")
    ix = {label: i for i, label in enumerate(BIOES)}
    n = len(BIOES)
    assert not allowed[ix["B-PER"], ix["O"]] and not allowed[ix["I-PER"], ix["S-LOC"]]
    assert allowed[ix["B-PER"], ix["E-PER"]] and allowed[ix["E-PER"], ix["S-LOC"]]
    assert not allowed[n, ix["I-PER"]] and not allowed[n, ix["E-PER"]] and allowed[n, ix["S-PER"]]
    assert not allowed[ix["B-PER"], n + 1] and not allowed[ix["I-PER"], n + 1] and allowed[ix["E-PER"], n + 1]
    allowed = allowed_transitions(IOB1, "IOB1")
    ix = {label: i for i, label in enumerate(IOB1)}
    assert allowed[ix["O"], ix["I-PER"]] and allowed[len(IOB1), ix["I-PER"]]
    assert allowed[ix["I-PER"], ix["B-PER"]] and not allowed[ix["O"], ix["B-PER"]]
    assert not allowed[len(IOB1), ix["B-PER"]] and not allowed[ix["I-LOC"], ix["B-PER"]]


def test_bad_labels_and_schemes_are_named():
    with pytest.raises(ValueError, match="'E-PER'.*BIO"):
        allowed_transitions(["O", "E-PER"], "BIO")
    with pytest.raises(ValueError, match="'PER'"):
        allowed_transitions(["O", "PER"], "BIOES")
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        allowed_transitions(["O"], "BILOU")


@pytest.mark.parametrize("labels,scheme", [(BIO, "BIO"), (BIOES, "BIOES"), (IOB1, "IOB1")])
def test_constrained_crf_matches_brute_force_over_allowed_sequences(labels, scheme):
    allowed = allowed_transitions(labels, scheme)
    n = len(labels)
    crf = _random_crf(n, seed=5, constraints=allowed)
    lengths = [4, 1, 3, 2]
    emissions, mask = _batch(lengths, 4, n, seed=6)
    # push emissions towards forbidden labels so an unconstrained decoder would emit them
    tempting = "B" if scheme == "IOB1" else "IE"
    emissions[:, :, [i for i, label in enumerate(labels) if label[0] in tempting]] += 3.0
    log_z = crf.log_partition(emissions, mask)
    decoded = crf.viterbi_decode(emissions, mask)
    allowed_list = allowed.tolist()
    for b, length in enumerate(lengths):
        z, best, _ = _brute_force(crf, emissions[b, :length], length, allowed=allowed_list)
        assert log_z[b].item() == pytest.approx(z, abs=1e-9)
        assert decoded[b] == best
        assert all(allowed_list[i][j] for i, j in _steps_of(decoded[b], n)), [labels[i] for i in decoded[b]]
    # and the unconstrained CRF with the same weights does decode something forbidden here
    free = _random_crf(n, seed=5)
    free_paths = free.viterbi_decode(emissions, mask)
    assert any(not all(allowed_list[i][j] for i, j in _steps_of(p, n)) for p in free_paths)


def test_gradcheck_nll():
    crf = _random_crf(3, seed=7, constraints=allowed_transitions(["O", "B-X", "I-X"], "BIO"))
    emissions, mask = _batch([4, 2, 3], 4, 3, seed=8)
    tags = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 0], [0, 0, 1, 0]])

    def nll(e, transitions, start, end):
        parameters = {"transitions": transitions, "start_transitions": start, "end_transitions": end}
        return torch.func.functional_call(crf, parameters, (e, tags, mask))

    inputs = (emissions.requires_grad_(True),) + tuple(
        p.detach().clone().requires_grad_(True) for p in (crf.transitions, crf.start_transitions, crf.end_transitions)
    )
    assert torch.autograd.gradcheck(nll, inputs, eps=1e-6, atol=1e-6)


def test_mask_must_start_with_a_token():
    crf = _random_crf(2, seed=0)
    with pytest.raises(ValueError, match="at least one token"):
        crf.log_partition(torch.zeros(2, 3, 2, dtype=torch.float64), torch.tensor([[1, 1, 0], [0, 0, 0]]).bool())
