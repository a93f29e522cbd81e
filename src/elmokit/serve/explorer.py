"""The explorer page's computations: what the four views of ``/`` show, as plain numpy.

1. Nearest occurrences in context (Peters et al. 2018, Table 4): ``NeighborIndex.query`` of
   ``elmokit.evaluation.neighbors`` (batch-invariant scores), with each hit cut to a window of
   context (``hit_context``).
2. A token-by-token cosine similarity matrix between two sentences (``cosine_matrix``).
3. The occurrences of one word in the index, projected to 2-D by PCA with a deterministic sign
   (``pca_2d``) and coloured by k-means clusters with a fixed seed (``kmeans``): the senses of
   "play" fall apart in the biLM's upper layers.
4. The learned layer weights of saved task models (``read_task_layer_weights``): softmax(w) and
   gamma of each scalar mix, ``ELMo_k = gamma * sum_j softmax(w)_j h_{k,j}`` (eq. 1).

Every function here is deterministic: the same inputs give the same numbers on any machine, up to
the last bits of float64 arithmetic (row sums are taken row by row, never by BLAS, where the order
of a row's terms could change with the number of rows).

Legend: n points (occurrences or tokens), D the representation's dim, k clusters.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elmokit.errors import UserError


class TaskModelError(UserError):
    """A ``--task-model`` folder that is not a saved tagger or classifier, or cannot be read."""


# ---- 1. nearest occurrences ----------------------------------------------------------------------


def hit_context(tokens, position: int, window: int) -> dict:
    """The matched token of a corpus sentence with ``window`` tokens of context either side:
    {"left": str, "word": str, "right": str, "cut_left": bool, "cut_right": bool}."""
    start, stop = max(0, position - window), min(len(tokens), position + window + 1)
    return {"left": " ".join(tokens[start:position]), "word": tokens[position],
            "right": " ".join(tokens[position + 1 : stop]), "cut_left": start > 0, "cut_right": stop < len(tokens)}


# ---- 2. cosine similarity ------------------------------------------------------------------------


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows of ``matrix`` (n, D) scaled to length 1 in float64; zero rows stay zero."""
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.sqrt(np.square(matrix).sum(axis=-1, keepdims=True))
    return matrix / np.where(norms == 0, 1.0, norms)


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of every row of ``a`` (n1, D) with every row of ``b`` (n2, D): (n1, n2) float64
    (0 where a row is zero). Each cell is its own elementwise product summed in a fixed order."""
    a, b = unit_rows(a), unit_rows(b)
    return np.stack([np.multiply(b, row).sum(axis=1) for row in a]) if len(a) else np.zeros((0, len(b)))


# ---- 3. projection and clusters -------------------------------------------------------------------


@dataclass(frozen=True)
class Projection:
    """2-D PCA of n points: ``coords`` (n, 2), ``components`` (2, D) (rows of unit length, or zero
    where the points span fewer dimensions), ``mean`` (D,), ``explained`` (2,) variance ratios."""

    coords: np.ndarray
    components: np.ndarray
    mean: np.ndarray
    explained: np.ndarray

    def project(self, points: np.ndarray) -> np.ndarray:
        """Other points (m, D) on the same axes: (m, 2)."""
        return (np.asarray(points, dtype=np.float64) - self.mean) @ self.components.T


def pca_2d(points: np.ndarray) -> Projection:
    """Principal components of ``points`` (n, D), the top two, by SVD of the centred points.

    Deterministic sign: each component is flipped so that its largest-magnitude coordinate is
    positive (the first such coordinate on a tie), so the same points always give the same picture.
    Fewer than two directions of variance (n <= 2, or repeated points): the missing axes are zero.
    """
    points = np.asarray(points, dtype=np.float64)
    n, dim = points.shape
    mean = points.mean(axis=0) if n else np.zeros(dim)
    centred = points - mean
    components = np.zeros((2, dim))
    explained = np.zeros(2)
    if n >= 2:
        _, singular, vt = np.linalg.svd(centred, full_matrices=False)  # singular values descending
        total = float(np.square(singular).sum())
        scale = singular[0] if len(singular) else 0.0
        for i in range(min(2, len(singular))):
            if singular[i] <= 1e-12 * max(scale, 1e-300):  # no variance along this axis
                continue
            component = vt[i]
            if component[int(np.argmax(np.abs(component)))] < 0:
                component = -component
            components[i] = component
            explained[i] = singular[i] ** 2 / total
    return Projection(centred @ components.T, components, mean, explained)


def squared_distances(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """(n, k) squared Euclidean distances, each a row-wise sum in a fixed order (no BLAS)."""
    points = np.asarray(points, dtype=np.float64)
    return np.stack([np.square(points - c).sum(axis=1) for c in centroids], axis=1)


def kmeans(points: np.ndarray, k: int, *, seed: int = 0, max_iterations: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means with k-means++ seeding from ``np.random.default_rng(seed)``: (labels (n,)
    int64, centroids (k', D) float64), k' = min(k, number of distinct points).

    Ends at a fixed point (every point is nearest to its own cluster's mean; ties go to the lower
    cluster number) or after ``max_iterations``. Clusters are then numbered by their first point in
    the given order, so cluster 0 always holds point 0 and the colours of a view never shuffle.
    """
    points = np.asarray(points, dtype=np.float64)
    n = len(points)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, points.shape[1]))
    if k < 1:
        raise ValueError(f"k-means needs k >= 1, got {k}")
    k = min(k, len(np.unique(points, axis=0)))
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(n))]
    nearest = np.square(points - points[chosen[0]]).sum(axis=1)
    while len(chosen) < k:  # k-means++: the next seed with probability proportional to D(x)^2
        total = nearest.sum()
        if total <= 0:
            break
        pick = int(rng.choice(n, p=nearest / total))
        chosen.append(pick)
        nearest = np.minimum(nearest, np.square(points - points[pick]).sum(axis=1))
    centroids = points[chosen].copy()
    labels = np.full(n, -1, dtype=np.int64)
    for _ in range(max_iterations):
        new = np.argmin(squared_distances(points, centroids), axis=1)  # argmin: ties to the lower number
        if np.array_equal(new, labels):
            break
        labels = new
        for j in range(len(centroids)):
            members = points[labels == j]
            if len(members):  # an emptied cluster keeps its centroid
                centroids[j] = members.mean(axis=0)
    used = list(dict.fromkeys(labels.tolist()))  # cluster numbers in order of first appearance
    renumber = np.zeros(len(centroids), dtype=np.int64)
    renumber[used] = np.arange(len(used))
    return renumber[labels], centroids[used]


# ---- 4. layer weights of task models --------------------------------------------------------------

# parameter prefix in model.safetensors -> the mix's name as the task code calls it
_MIX_NAMES = {"input_mix": "input", "output_mix": "output", "scalar_mix": "input"}


@dataclass(frozen=True)
class TaskLayerWeights:
    """The scalar mixes of one saved task model. Each mix: {"name", "layers" (the representation's
    layer numbers it weighs), "w" (pre-softmax), "softmax_w", "gamma"}."""

    name: str
    kind: str  # "tagger" or "classifier"
    representation: str
    elmo_layers: int
    elmo_mode: str
    mixes: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "representation": self.representation,
                "elmo_layers": self.elmo_layers, "elmo_mode": self.elmo_mode, "mixes": self.mixes}


def softmax(w: np.ndarray) -> np.ndarray:
    """softmax(w) in float64, as ``ScalarMix.weights`` (eq. 1's s_j)."""
    w = np.asarray(w, dtype=np.float64)
    e = np.exp(w - w.max())
    return e / e.sum()


def read_task_layer_weights(directory: str | os.PathLike) -> TaskLayerWeights:
    """The learned layer weights of a tagger (``elmokit tag train``) or classifier (``elmokit
    classify train``) folder, read from its config.json and model.safetensors only (the task model's
    representation is not loaded). A model without a learned mix (``elmo`` "top", "none") has none."""
    from safetensors import safe_open

    directory = Path(directory)
    config_path, weights_path = directory / "config.json", directory / "model.safetensors"
    if not directory.is_dir():
        raise TaskModelError(f"--task-model {directory}: no such folder")
    if (directory / "vocab.json").is_file():
        kind = "tagger"
    elif (directory / "labels.json").is_file():
        kind = "classifier"
    else:
        raise TaskModelError(f"{directory}: not a saved tagger (no vocab.json) or classifier (no labels.json); "
                             "fix: give a folder written by `elmokit tag train` or `elmokit classify train`")
    for path in (config_path, weights_path):
        if not path.is_file():
            raise TaskModelError(f"{directory}: a {kind} folder without {path.name}; fix: train or copy it again")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise TaskModelError(f"{config_path}: not readable JSON ({error})") from None
    if not isinstance(config, dict):
        raise TaskModelError(f"{config_path}: a JSON object expected")
    try:
        with safe_open(str(weights_path), framework="np") as f:
            keys = list(f.keys())
            prefixes = sorted(k[: -len(".scalar_parameters")] for k in keys if k.endswith(".scalar_parameters"))
            arrays = {p: (f.get_tensor(p + ".scalar_parameters"), f.get_tensor(p + ".gamma")) for p in prefixes}
    except Exception as error:  # safetensors raises its own error types for a damaged file
        reason = "empty: 0 bytes" if weights_path.stat().st_size == 0 else (str(error).splitlines() or [""])[0]
        raise TaskModelError(f"{weights_path}: not a readable safetensors file of a task model ({reason})") from None
    elmo_layers = int(config.get("elmo_layers", 0) or 0)
    mixes = []
    for prefix in sorted(prefixes, key=lambda p: (p != "input_mix" and p != "scalar_mix", p)):
        w, gamma = (np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays[prefix])
        count = len(w)
        if elmo_layers and count > elmo_layers:
            raise TaskModelError(f"{weights_path}: {prefix} weighs {count} layers, but config.json says the "
                                 f"representation has {elmo_layers}")
        top = elmo_layers or count
        mixes.append({"name": _MIX_NAMES.get(prefix, prefix), "parameter": prefix,
                      "layers": list(range(top - count, top)),  # all layers, or the top ones ("mix-last-four")
                      "w": w.tolist(), "softmax_w": softmax(w).tolist(), "gamma": float(gamma[0])})
    if kind == "tagger":
        representation = str(config.get("representation_name") or "")
        mode = str(config.get("elmo", "mix"))
    else:
        representation = ""
        mode = "mix" if config.get("use_elmo", True) else "none"
    if not representation:
        spec = config.get("representation") or {}
        representation = str(spec.get("model") or spec.get("path") or spec.get("kind") or "")
    return TaskLayerWeights(directory.resolve().name, kind, representation, elmo_layers, mode, mixes)
