"""PyTorch (and, when installed, DGL) reference for benchmark_model / benchmark_training: the same
Edge_Network (contract §5) on the same batch, timed the same way.

    cargo run --release -p gnn4c-benchmarks --bin benchmark_training -- 512 10 --dump-batch /tmp/batch.npz
    python benchmarks/reference/train_torch.py /tmp/batch.npz [REPS]

Times, per batch, on the CPU with torch's default threads (all cores): forward without autograd,
and a training step (forward + weighted loss, backward, Adam step, eps 1e-8) for multiclass
pretraining (12 outputs), binary fine-tuning with a frozen backbone and with the full backbone.
Aggregation is `index_add_` (what DGL's `update_all(copy_e, sum)` computes); with DGL installed the
edge-to-node sum also runs through DGL's `update_all` and is reported as a second variant.
Prints a table and JSON lines (medians of REPS, default 10, after 2 warm-up runs).
"""
import json
import resource
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

try:
    import dgl
    import dgl.function as fn
except Exception:  # noqa: BLE001 - DGL is optional: it rarely installs beside a current torch
    dgl = None


def mlp(d_in, d_out, h=64, n_layers=4):
    layers = []
    for k in range(n_layers):
        i = d_in if k == 0 else h
        o = d_out if k == n_layers - 1 else h
        layers += [nn.Linear(i, o), nn.ReLU(), nn.Dropout(0.0)]
    layers.append(nn.LayerNorm(d_out, eps=1e-5))
    return nn.Sequential(*layers)


class EdgeNetwork(nn.Module):
    def __init__(self, n_out, h=64, steps=4):
        super().__init__()
        self.steps = steps
        self.node_encoder = mlp(7, h)
        self.edge_encoder = mlp(3, h)
        self.global_encoder = mlp(2, h)
        self.edge_update = mlp(4 * h, h)
        self.node_update = mlp(3 * h, h)
        self.global_update = mlp(3 * h, h)
        self.global_decoder = mlp(h, h)
        self.classify = nn.Linear(h, n_out)

    def forward(self, b, graph=None):
        h = self.node_encoder(b["x"])
        e = self.edge_encoder(b["ea"])
        u = self.global_encoder(b["u"])
        src, dst, ng, eg = b["src"], b["dst"], b["node_graph"], b["edge_graph"]
        n_nodes, n_graphs = h.shape[0], u.shape[0]
        for _ in range(self.steps):
            e = self.edge_update(torch.cat([e, h[src], h[dst], u[eg]], 1))
            if graph is not None:
                graph.edata["e"] = e
                graph.update_all(fn.copy_e("e", "m"), fn.sum("m", "a"))
                a = graph.ndata.pop("a")
            else:
                a = torch.zeros(n_nodes, e.shape[1]).index_add_(0, dst, e)
            h = self.node_update(torch.cat([h, a, u[ng]], 1))
            nm = torch.zeros(n_graphs, h.shape[1]).index_add_(0, ng, h) * b["inv_n"]
            em = torch.zeros(n_graphs, e.shape[1]).index_add_(0, eg, e) * b["inv_e"]
            u = self.global_update(torch.cat([u, nm, em], 1))
        return self.classify(self.global_decoder(u))


def load(path):
    z = np.load(path)
    n_nodes = torch.from_numpy(z["n_nodes"].astype(np.int64))
    n_edges = n_nodes * (n_nodes - 1)
    g = torch.arange(len(n_nodes))
    b = {
        "x": torch.from_numpy(z["node_features"]),
        "ea": torch.from_numpy(z["edge_features"]),
        "u": torch.from_numpy(z["global_features"]),
        "src": torch.from_numpy(z["edge_src"]),
        "dst": torch.from_numpy(z["edge_dst"]),
        "node_graph": torch.repeat_interleave(g, n_nodes),
        "edge_graph": torch.repeat_interleave(g, n_edges),
        "inv_n": (1.0 / n_nodes.clamp(min=1).float()).unsqueeze(1),
        "inv_e": (1.0 / n_edges.clamp(min=1).float()).unsqueeze(1),
        "labels": torch.from_numpy(z["labels"]),
        "w": torch.from_numpy(z["weights"]),
    }
    return b


def timed(f, reps):
    for _ in range(2):
        f()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    path = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    b = load(path)
    n = len(b["labels"])
    graph = None
    variants = ["torch index_add_"]
    if dgl is not None:
        graph = dgl.graph((b["src"], b["dst"]), num_nodes=b["x"].shape[0])
        variants.append(f"DGL {dgl.__version__} update_all")
    cpu = platform.processor() or platform.machine()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {cpu}; batch {n} graphs, "
          f"{b['x'].shape[0]} nodes, {b['ea'].shape[0]} edges")
    print("| variant | measure | median s | events/s |")
    print("|---|---|---|---|")
    for variant in variants:
        g = graph if variant.startswith("DGL") else None
        torch.manual_seed(1)
        model = EdgeNetwork(12)
        with torch.no_grad():
            fwd = timed(lambda: model(b, g), reps)
        rows = [("forward (no autograd)", fwd)]
        for setup, n_out, frozen in [("pretrain multiclass (12), full", 12, False),
                                     ("finetune binary, frozen backbone", 1, True),
                                     ("finetune binary, full", 1, False)]:
            torch.manual_seed(1)
            m = EdgeNetwork(n_out)
            if frozen:
                for name, p in m.named_parameters():
                    p.requires_grad_(name.startswith("classify"))
            opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-4, eps=1e-8)
            y = b["labels"] % 2 if n_out == 1 else b["labels"]
            w = b["w"]

            def step():
                logits = m(b, g)
                if n_out == 1:
                    per = nn.functional.binary_cross_entropy_with_logits(
                        logits[:, 0], y.float(), reduction="none")
                else:
                    per = nn.functional.cross_entropy(logits, y, reduction="none")
                loss = (per * w).sum() / w.abs().sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            rows.append((f"train step: {setup}", timed(step, reps)))
        for measure, s in rows:
            print(f"| {variant} | {measure} | {s:.4f} | {n / s:.0f} |")
            print(json.dumps({"benchmark": "reference_torch", "variant": variant, "measure": measure,
                              "batch": n, "median_s": s, "events_per_s": n / s, "reps": reps,
                              "torch": torch.__version__, "threads": torch.get_num_threads()}),
                  file=sys.stderr)
    # Peak resident memory of the whole process (Linux reports KiB), as benchmark_training prints.
    print(f"peak RSS (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
