"""An independent NumPy statement of ELMo (spec §3.3-3.8), used as the tests' oracle.

It reads the weights in the original TensorFlow layout, by hdf5 dataset name, and computes in
float64 one sentence at a time with the textbook per-timestep recurrence on ``[x, h] @ W_0``.
It shares no code with elmokit: not the char ids, not the adapter table, not the model.
"""

from __future__ import annotations

import numpy as np

BOW, EOW, PAD, BOS_C, EOS_C = 258, 259, 260, 256, 257


def char_ids(token: str) -> np.ndarray:
    if token in ("<S>", "</S>"):
        raw = [BOW, BOS_C if token == "<S>" else EOS_C, EOW]
    else:
        raw = [BOW] + list(token.encode("utf-8", "ignore")[:48]) + [EOW]
    raw = raw + [PAD] * (50 - len(raw))
    return np.array(raw) + 1


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class NumpyELMo:
    """``weights``: dict dataset name -> array (TF layout); ``options``: the options.json dict."""

    def __init__(self, options: dict, weights: dict):
        self.o = options
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        lstm = options["lstm"]
        self.L = lstm.get("n_layers", 1)
        self.cell_clip = lstm.get("cell_clip") or None
        self.proj_clip = lstm.get("proj_clip") or None
        self.skip = lstm.get("use_skip_connections", False)
        self.state = {}  # (direction, layer, row) -> (h, c) in stateful use

    def token_vector(self, token: str) -> np.ndarray:
        cnn = self.o["char_cnn"]
        table = self.w["char_embed"]
        table = np.vstack([np.zeros((1, table.shape[1])), table])  # shifted ids, row 0 = padding
        x = table[char_ids(token)]  # (50, E)
        pooled = []
        for i, (width, _num) in enumerate(cnn["filters"]):
            W = self.w[f"CNN/W_cnn_{i}"][0]  # (width, E, n)
            conv = np.stack([np.einsum("ke,ken->n", x[t : t + width], W) for t in range(50 - width + 1)])
            conv = conv + self.w[f"CNN/b_cnn_{i}"]
            act = np.tanh if cnn.get("activation", "relu") == "tanh" else (lambda v: np.maximum(v, 0))
            pooled.append(act(conv).max(axis=0))
        h = np.concatenate(pooled)
        for k in range(cnn.get("n_highway") or 0):
            t = sigmoid(h @ self.w[f"CNN_high_{k}/W_carry"] + self.w[f"CNN_high_{k}/b_carry"])
            g = np.maximum(h @ self.w[f"CNN_high_{k}/W_transform"] + self.w[f"CNN_high_{k}/b_transform"], 0)
            h = t * g + (1 - t) * h
        if "CNN_proj/W_proj" in self.w:
            h = h @ self.w["CNN_proj/W_proj"] + self.w["CNN_proj/b_proj"]
        return h

    def cell(self, direction: int, layer: int, x, h, c):
        name = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
        z = np.concatenate([x, h]) @ self.w[f"{name}/W_0"] + self.w[f"{name}/B"]
        i, j, f, o = np.split(z, 4)
        c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)
        if self.cell_clip:
            c = np.clip(c, -self.cell_clip, self.cell_clip)
        h = (sigmoid(o) * np.tanh(c)) @ self.w[f"{name}/W_P_0"]
        if self.proj_clip:
            h = np.clip(h, -self.proj_clip, self.proj_clip)
        return h, c

    def sentence(self, tokens, row: int | None = None) -> np.ndarray:
        """All layers (L+1, n+2, 2P) with boundaries; ``row`` carries state like the reference."""
        seq = ["<S>"] + list(tokens) + ["</S>"]
        x0 = np.stack([self.token_vector(t) for t in seq])  # (n+2, P)
        P = x0.shape[1]
        D = self.w["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"].shape[0]
        layers = [np.concatenate([x0, x0], axis=1)]
        inputs = {0: x0, 1: x0[::-1]}
        for layer in range(self.L):
            outs = {}
            for d in (0, 1):
                zeros = (np.zeros(P), np.zeros(D))
                h, c = self.state.get((d, layer, row), zeros) if row is not None else zeros
                out = []
                for x in inputs[d]:
                    h, c = self.cell(d, layer, x, h, c)
                    out.append(h)
                if row is not None:
                    self.state[(d, layer, row)] = (h, c)
                out = np.stack(out)
                if layer > 0 and self.skip:
                    out = out + inputs[d]
                outs[d] = out
            inputs = outs
            layers.append(np.concatenate([outs[0], outs[1][::-1]], axis=1))
        return np.stack(layers)
