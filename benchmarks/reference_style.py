"""A straightforward per-timestep ELMo forward pass: the reference implementation's algorithm.

This restates what allennlp's ``_ElmoBiLm`` does on a CPU, for the speed comparison in
``bench_inference.py`` (it is not part of the package, and it is checked there to give the same
numbers as elmokit):

* the char CNN runs ``conv1d`` on every token slot of the padded batch, padding included, and
  the highway is one linear map to 2F split into the nonlinear part and the gate;
* each LSTM step does its input matmul and its recurrent matmul separately (nothing hoisted out
  of the time loop), on the rows still active: the batch is sorted by length and shrinks;
* the backward direction walks time backwards over the same sorted batch;
* the state tensors are cloned every step, as the reference does to keep autograd correct.

Weights come from an elmokit state dict (our layout) and are rearranged into TF's: one
``[input; h] @ W_0`` kernel per cell.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ReferenceStyleELMo:
    def __init__(self, config, state: dict[str, torch.Tensor]) -> None:
        self.config = config
        s = {k: v.float() for k, v in state.items()}
        self.char_embedding = s["token_encoder.char_embedding.weight"]
        self.convs = [
            (s[f"token_encoder.convs.{i}.weight"], s[f"token_encoder.convs.{i}.bias"]) for i in range(len(config.filters))
        ]
        self.highway = []
        for h in range(config.n_highway):
            # one Linear(F, 2F): rows [transform; -carry] so that gate = sigmoid(-(x W_c + b_c)) = 1 - t
            w = torch.cat([s[f"token_encoder.highway.transform.{h}.weight"], -s[f"token_encoder.highway.carry.{h}.weight"]])
            b = torch.cat([s[f"token_encoder.highway.transform.{h}.bias"], -s[f"token_encoder.highway.carry.{h}.bias"]])
            self.highway.append((w, b))
        self.projection = (s["token_encoder.projection.weight"], s["token_encoder.projection.bias"])
        self.cells = {}
        for direction, stack in ((0, "forward_lstm"), (1, "backward_lstm")):
            for layer in range(config.n_layers):
                p = f"{stack}.{layer}"
                self.cells[direction, layer] = (
                    s[f"{p}.input_linear.weight"], s[f"{p}.hidden_linear.weight"],
                    s[f"{p}.input_linear.bias"], s[f"{p}.projection.weight"],
                )

    def token_encoder(self, ids: torch.Tensor) -> torch.Tensor:
        B, T, C = ids.shape
        x = F.embedding(ids.view(-1, C), self.char_embedding).transpose(1, 2)  # (B*T, E, C)
        pooled = [torch.relu(F.conv1d(x, w, b).max(dim=-1).values) for w, b in self.convs]
        h = torch.cat(pooled, dim=-1)
        for w, b in self.highway:
            projected = F.linear(h, w, b)
            nonlinear, gate = projected.chunk(2, dim=-1)
            gate = torch.sigmoid(gate)
            h = gate * h + (1 - gate) * torch.relu(nonlinear)
        return F.linear(h, *self.projection).view(B, T, -1)

    def lstm(self, direction, layer, inputs, lengths):
        """inputs (B, T, P) sorted by length (descending)."""
        w_x, w_h, bias, w_p = self.cells[direction, layer]
        B, T, _ = inputs.shape
        D, P = w_p.shape[1], w_p.shape[0]
        out = inputs.new_zeros(B, T, P)
        h = inputs.new_zeros(B, P)
        c = inputs.new_zeros(B, D)
        clip_c, clip_h = self.config.cell_clip, self.config.proj_clip
        active = B
        for step in range(T):
            t = step if direction == 0 else T - 1 - step
            if direction == 0:
                while active > 0 and lengths[active - 1] <= t:
                    active -= 1
            else:
                active = int((lengths > t).sum())
            h_prev, c_prev = h.clone(), c.clone()
            x_t = inputs[:active, t]
            gates = F.linear(x_t, w_x) + F.linear(h_prev[:active], w_h, bias)
            i, j, f, o = gates.chunk(4, dim=-1)
            new_c = torch.sigmoid(f + 1.0) * c_prev[:active] + torch.sigmoid(i) * torch.tanh(j)
            new_c = new_c.clamp(-clip_c, clip_c)
            new_h = F.linear(torch.sigmoid(o) * torch.tanh(new_c), w_p).clamp(-clip_h, clip_h)
            h, c = h_prev, c_prev
            h[:active], c[:active] = new_h, new_c
            out[:active, t] = new_h
        return out

    @torch.no_grad()
    def __call__(self, char_ids_with_boundaries: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """char ids with <S>/</S> already added (B, T2, 50), lengths (B,) -> layers (L+1, B, T2, 2P)."""
        order = torch.argsort(lengths, descending=True)
        ids, lens = char_ids_with_boundaries[order], lengths[order]
        mask = (torch.arange(ids.shape[1]).unsqueeze(0) < lens.unsqueeze(1)).unsqueeze(-1).float()
        tokens = self.token_encoder(ids) * mask
        layers = [torch.cat([tokens, tokens], -1)]
        fwd_in = bwd_in = tokens
        for layer in range(self.config.n_layers):
            fwd = self.lstm(0, layer, fwd_in, lens)
            bwd = self.lstm(1, layer, bwd_in, lens)
            if layer > 0 and self.config.use_skip_connections:
                fwd, bwd = fwd + fwd_in, bwd + bwd_in
            layers.append(torch.cat([fwd, bwd], -1))
            fwd_in, bwd_in = fwd, bwd
        restore = torch.argsort(order)
        return torch.stack(layers)[:, restore]
