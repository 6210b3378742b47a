"""A small CPU DDP training loop for the overhead benchmark; prints the loop's own wall time."""
import json
import os
import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(os.environ.get("BENCH_STEPS", "300"))
accelerator = Accelerator()
torch.manual_seed(0)
data = TensorDataset(torch.randn(STEPS * 16, 64), torch.randint(0, 4, (STEPS * 16,)))
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(data, batch_size=8, shuffle=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
accelerator.wait_for_everyone()
start = time.perf_counter()
collectives = 0
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.gather_for_metrics(loss.detach().reshape(1))
    collectives += 2
accelerator.wait_for_everyone()
elapsed = time.perf_counter() - start
if accelerator.is_main_process:
    print(json.dumps({"loop_s": elapsed, "steps": len(loader), "collectives": collectives + 1}), flush=True)
