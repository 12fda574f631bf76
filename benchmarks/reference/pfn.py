"""PyTorch reference of the Particle Flow Network (docs/families.md; Komiske, Metodiev, Thaler,
"Energy Flow Networks: Deep Sets for Particle Jets", JHEP 01 (2019) 121): writes weights,
expected logits and one training step's gradients for the batch of
../shared/fixtures/model_inputs.npz, the parity data of crates/models/pfn's tests.

    python benchmarks/reference/pfn.py ../shared/fixtures/model_inputs.npz crates/models/pfn/tests/data

The model: a per-object network Φ (Linear → ReLU per layer, `phi_sizes`), summed over the event's
objects, concatenated with the event's global features, then F (Linear → ReLU → Dropout per
layer, `f_sizes`) and a linear head `classify`. For each of binary (1 output) and multiclass
(12 outputs) a small model (phi_sizes [16, 16, 32], f_sizes [16, 16]) seeded from its variant
writes `<variant>.safetensors` (PyTorch state-dict names), `<variant>_expected.npz` (`logits` in
f32, `logits_f64` from the same weights in f64, `labels`, `weights`, `loss`) and
`<variant>_grads.safetensors` (the gradient of the weighted loss Σ wᵢℓᵢ / Σ|wᵢ| for every
parameter). Needs torch and numpy only.

    python benchmarks/reference/pfn.py --time BATCH.npz [REPS]

times the default model (phi_sizes [100, 100, 128], f_sizes [100, 100, 100], 12 outputs) on a
batch `benchmark_transformer --dump-batch` wrote: inference and a training step (Adam), medians
of REPS (default 10) after 2 warm-up runs, with torch's default threads, and the peak RSS.
"""
import sys

import numpy as np
import torch
from torch import nn

from root_transformer import write_safetensors


class Pfn(nn.Module):
    def __init__(self, n_out, phi_sizes=(16, 16, 32), f_sizes=(16, 16), dropout=0.0,
                 d_node=7, d_global=2):
        super().__init__()
        dims = [d_node, *phi_sizes]
        self.phi = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims, dims[1:])])
        dims = [phi_sizes[-1] + d_global, *f_sizes]
        self.f = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims, dims[1:])])
        self.dropout = nn.Dropout(dropout)
        self.classify = nn.Linear(dims[-1], n_out)

    def forward(self, objects, object_event, globals_):
        """objects [N, d_node] (every event's objects, event by event), object_event [N] (the
        event of each object), globals_ [B, d_global] → logits [B, n_out]."""
        x = objects
        for layer in self.phi:
            x = torch.relu(layer(x))
        latent = torch.zeros(globals_.shape[0], x.shape[1], dtype=x.dtype)
        latent = latent.index_add(0, object_event, x)  # Σ over the event's objects
        x = torch.cat([latent, globals_], 1)
        for layer in self.f:
            x = self.dropout(torch.relu(layer(x)))
        return self.classify(x)


def batch(z, dtype):
    """The flat batch of model_inputs.npz."""
    n_nodes = z["n_nodes"]
    object_event = torch.tensor(np.repeat(np.arange(len(n_nodes)), n_nodes), dtype=torch.int64)
    t = lambda a: torch.tensor(a, dtype=dtype)  # noqa: E731
    return t(z["node_features"]), object_event, t(z["global_features"])


def main():
    inputs, out = sys.argv[1], sys.argv[2]
    z = np.load(inputs)
    n_events = len(z["n_nodes"])
    weights = np.linspace(0.5, 1.5, n_events).astype(np.float32)
    weights[2] = -0.7
    for n_out, task in [(1, "binary"), (12, "multiclass")]:
        labels = (np.arange(n_events) * 5 % max(n_out, 2)).astype(np.int64)
        torch.manual_seed(2000 + n_out)
        model = Pfn(n_out)
        model.train()
        logits = model(*batch(z, torch.float32))
        w = torch.tensor(weights)
        if n_out == 1:
            per_event = nn.functional.binary_cross_entropy_with_logits(
                logits[:, 0], torch.tensor(labels, dtype=torch.float32), reduction="none")
        else:
            per_event = nn.functional.cross_entropy(logits, torch.tensor(labels), reduction="none")
        loss = (w * per_event).sum() / w.abs().sum()
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters()}
        model64 = Pfn(n_out).double()
        model64.load_state_dict(model.state_dict())
        with torch.no_grad():
            logits64 = model64(*batch(z, torch.float64))
        write_safetensors(f"{out}/{task}.safetensors", dict(model.state_dict()))
        write_safetensors(f"{out}/{task}_grads.safetensors", grads)
        np.savez(f"{out}/{task}_expected.npz", logits=logits.detach().numpy(),
                 logits_f64=logits64.numpy(), labels=labels, weights=weights,
                 loss=np.float64(loss.item()))
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{task}: {n_params} parameters, loss {loss.item():.6f}, |logits - logits_f64| "
              f"max {np.abs(logits.detach().numpy() - logits64.numpy()).max():.2e}")


def time_batch(path, reps):
    import json
    import resource
    import statistics
    import time
    z = np.load(path)
    n_nodes = z["n_nodes"]
    objects = torch.tensor(z["node_features"], dtype=torch.float32)
    object_event = torch.tensor(np.repeat(np.arange(len(n_nodes)), n_nodes), dtype=torch.int64)
    globals_ = torch.tensor(z["global_features"], dtype=torch.float32)
    labels = torch.tensor(z["labels"] % 12)
    w = torch.tensor(z["weights"])
    n = len(labels)
    torch.manual_seed(1)
    model = Pfn(12, phi_sizes=(100, 100, 128), f_sizes=(100, 100, 100))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-8)

    def infer():
        model.eval()
        with torch.no_grad():
            model(objects, object_event, globals_)

    def step():
        model.train()
        opt.zero_grad()
        per_event = nn.functional.cross_entropy(model(objects, object_event, globals_), labels,
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
        print(json.dumps({"measure": name, "median_s": med, "events_per_s": n / med,
                          "torch": torch.__version__, "threads": torch.get_num_threads()}))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    if sys.argv[1] == "--time":
        time_batch(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 10)
    else:
        main()
