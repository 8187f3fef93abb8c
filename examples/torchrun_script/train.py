"""A plain torchrun DDP script: nothing in it knows `orch`.

Run it alone with `torchrun --nproc-per-node 2 train.py`, or submit it unchanged to `orch`
(`orch submit --working-dir . job.yaml`): each rank gets the variables torchrun would give it,
and `orch` counts its optimizer steps itself.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    args = parser.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 16, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model = DistributedDataParallel(model.to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    step, epoch, loss = 0, 0, torch.zeros(())
    while step < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        epoch += 1
    if rank == 0:
        world = dist.get_world_size()
        print(f"final loss {loss.item():.6f} at step {step} (world size {world})", flush=True)
    dist.barrier()  # leave together: a rank gone mid-teardown can abort the other's gloo
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
