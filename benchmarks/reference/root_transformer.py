"""PyTorch reference of the ROOT-Transformer (docs/root-transformer.md): writes weights, expected
logits and one training step's gradients for the batch of ../shared/fixtures/model_inputs.npz, the
parity data of crates/models/root_transformer's tests.

    python benchmarks/reference/root_transformer.py ../shared/fixtures/model_inputs.npz \
        crates/models/root_transformer/tests/data

For each of binary (1 output) and multiclass (12 outputs), with and without the pair bias, a small
model (d_model 16, 2 heads, 2 layers, 2-layer embedding blocks) seeded from its variant writes
`<variant>.safetensors` (PyTorch state-dict names), `<variant>_expected.npz` (`logits` in f32,
`logits_f64` from the same weights in f64, `labels`, `weights`, `loss`) and
`<variant>_grads.safetensors` (the gradient of the weighted loss Σ wᵢℓᵢ / Σ|wᵢ| for every
parameter). Dropout is 0 and the layers run in training mode, so no fused fast path is taken.
Needs torch and numpy only (safetensors is written by hand: an 8-byte header length, a JSON
header, the little-endian tensors).

    python benchmarks/reference/root_transformer.py --time BATCH.npz [REPS] [default|part]

times the default model (d_model 64, 4 heads, 4 layers, pair bias, 12 outputs), or with `part` the
ParT-like size (d_model 128, 8 heads, 8 layers), on a batch that
`benchmark_transformer --dump-batch` wrote: inference (eval mode, no autograd) and a training step
(forward, weighted loss, backward, Adam with eps 1e-8), medians of REPS (default 10) after 2
warm-up runs, with torch's default threads, and the peak RSS.
"""
import json
import struct
import sys

import numpy as np
import torch
from torch import nn


def mlp_block(d_in, d, n_layers, dropout):
    """[Linear → ReLU → Dropout] × n_layers, then LayerNorm: the Edge_Network's encoder block."""
    layers = []
    for k in range(n_layers):
        layers += [nn.Linear(d_in if k == 0 else d, d), nn.ReLU(), nn.Dropout(dropout)]
    layers.append(nn.LayerNorm(d))
    return nn.Sequential(*layers)


class RootTransformer(nn.Module):
    def __init__(self, n_out, d_model=16, n_heads=2, n_layers=2, embed_layers=2, pair_hidden=8,
                 pair_bias=True, dropout=0.0, d_node=7, d_global=2, d_pair=3):
        super().__init__()
        self.n_heads = n_heads
        self.pair_bias = pair_bias
        self.token_embed = mlp_block(d_node, d_model, embed_layers, dropout)
        self.global_embed = mlp_block(d_global, d_model, embed_layers, dropout)
        if pair_bias:
            self.pair_embed = nn.Sequential(
                nn.Linear(d_pair, pair_hidden), nn.ReLU(), nn.Linear(pair_hidden, n_heads))
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model,
                                       dropout=dropout, activation="gelu", norm_first=True,
                                       batch_first=True)
            for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.classify = nn.Linear(d_model, n_out)

    def forward(self, tokens, padding, globals_, pair):
        """tokens [B, L, 7], padding [B, L] (True: no object), globals_ [B, 2], pair [B, L, L, 3]
        (pair[b, i, j]: the edge j → i's (Δη, Δφ, ΔR)) → logits [B, n_out]."""
        b, n, _ = tokens.shape
        x = torch.cat([self.global_embed(globals_)[:, None, :], self.token_embed(tokens)], 1)
        pad = torch.cat([torch.zeros(b, 1, dtype=torch.bool), padding], 1)  # [B, 1 + L]
        mask = torch.zeros(b, self.n_heads, n + 1, n + 1, dtype=x.dtype)
        if self.pair_bias:
            bias = self.pair_embed(pair).permute(0, 3, 1, 2)  # [B, heads, L, L]
            eye = torch.eye(n, dtype=torch.bool)
            valid = ~(padding[:, :, None] | padding[:, None, :]) & ~eye  # real pairs i ≠ j
            mask[:, :, 1:, 1:] = bias * valid[:, None].to(x.dtype)
        mask = mask.masked_fill(pad[:, None, None, :], float("-inf"))
        mask = mask.reshape(b * self.n_heads, n + 1, n + 1)
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        return self.classify(self.norm(x[:, 0]))


def batch(z, dtype):
    """The padded batch of model_inputs.npz."""
    n_nodes = z["n_nodes"]
    b, n = len(n_nodes), int(n_nodes.max())
    tokens = np.zeros((b, n, 7), np.float64)
    padding = np.ones((b, n), bool)
    pair = np.zeros((b, n, n, 3), np.float64)
    start = np.concatenate([[0], np.cumsum(n_nodes)])
    graph_of = np.repeat(np.arange(b), n_nodes)
    for g in range(b):
        tokens[g, : n_nodes[g]] = z["node_features"][start[g]:start[g + 1]]
        padding[g, : n_nodes[g]] = False
    for src, dst, f in zip(z["edge_src"], z["edge_dst"], z["edge_features"]):
        g = graph_of[src]
        pair[g, dst - start[g], src - start[g]] = f
    t = lambda a: torch.tensor(a, dtype=dtype)  # noqa: E731
    return t(tokens), torch.tensor(padding), t(z["global_features"]), t(pair)


def write_safetensors(path, tensors):
    header, data, offset = {}, b"", 0
    for name, value in sorted(tensors.items()):
        raw = value.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    inputs, out = sys.argv[1], sys.argv[2]
    z = np.load(inputs)
    n_events = len(z["n_nodes"])
    weights = np.linspace(0.5, 1.5, n_events).astype(np.float32)
    weights[2] = -0.7
    for n_out, task in [(1, "binary"), (12, "multiclass")]:
        labels = (np.arange(n_events) * 5 % max(n_out, 2)).astype(np.int64)
        for pair_bias in (True, False):
            variant = f"{task}_{'pair' if pair_bias else 'nopair'}"
            torch.manual_seed(1000 + 10 * n_out + int(pair_bias))
            model = RootTransformer(n_out, pair_bias=pair_bias)
            # Non-trivial LayerNorm affine parameters, so a mix-up of weight and bias shows.
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "norm" in name:
                        p.add_(0.1 * torch.randn_like(p))
            model.train()
            tokens, padding, globals_, pair = batch(z, torch.float32)
            logits = model(tokens, padding, globals_, pair)
            w = torch.tensor(weights)
            if n_out == 1:
                per_event = nn.functional.binary_cross_entropy_with_logits(
                    logits[:, 0], torch.tensor(labels, dtype=torch.float32), reduction="none")
            else:
                per_event = nn.functional.cross_entropy(logits, torch.tensor(labels),
                                                        reduction="none")
            loss = (w * per_event).sum() / w.abs().sum()
            loss.backward()
            grads = {n: p.grad for n, p in model.named_parameters()}
            model64 = RootTransformer(n_out, pair_bias=pair_bias).double()
            model64.load_state_dict(model.state_dict())
            model64.train()
            with torch.no_grad():
                logits64 = model64(*batch(z, torch.float64))
            write_safetensors(f"{out}/{variant}.safetensors", dict(model.state_dict()))
            write_safetensors(f"{out}/{variant}_grads.safetensors", grads)
            np.savez(f"{out}/{variant}_expected.npz", logits=logits.detach().numpy(),
                     logits_f64=logits64.numpy(), labels=labels, weights=weights,
                     loss=np.float64(loss.item()))
            n_params = sum(p.numel() for p in model.parameters())
            print(f"{variant}: {n_params} parameters, loss {loss.item():.6f}, "
                  f"|logits - logits_f64| max {np.abs(logits.detach().numpy() - logits64.numpy()).max():.2e}")


SIZES = {"default": (64, 4, 4), "part": (128, 8, 8)}


def time_batch(path, reps, size="default"):
    import resource
    import statistics
    import time
    z = np.load(path)
    tokens, padding, globals_, pair = batch(z, torch.float32)
    labels = torch.tensor(z["labels"] % 12)
    w = torch.tensor(z["weights"])
    n = len(labels)
    torch.manual_seed(1)
    d_model, n_heads, n_layers = SIZES[size]
    model = RootTransformer(12, d_model=d_model, n_heads=n_heads, n_layers=n_layers, pair_hidden=16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-8)

    def infer():
        model.eval()
        with torch.no_grad():
            model(tokens, padding, globals_, pair)

    def step():
        model.train()
        opt.zero_grad()
        per_event = nn.functional.cross_entropy(model(tokens, padding, globals_, pair), labels,
                                                reduction="none")
        ((w * per_event).sum() / w.abs().sum()).backward()
        opt.step()

    for name, f in [("inference (forward)", infer), ("training step", step)]:
        for _ in range(2):
            f()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        print(json.dumps({"measure": name, "size": size, "median_s": med, "events_per_s": n / med,
                          "torch": torch.__version__, "threads": torch.get_num_threads()}))
        print(f"| {name} | {med:.4f} | {n / med:.0f} |")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    if sys.argv[1] == "--time":
        time_batch(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 10,
                   sys.argv[4] if len(sys.argv) > 4 else "default")
    else:
        main()
