"""A realistic DDP training step through Accelerate for the GPU overhead benchmark: a decoder-only
transformer of about 200 M parameters built from torch.nn, bf16 autocast, random tokens.
Prints one JSON line (rank 0) with every step's wall time. Run it under plain torchrun and under
``python -m runtime_checks`` (bench/gpu_overhead.py does both, on the same machine, in one call).
"""
import json
import os
import time

import torch
from accelerate import Accelerator

STEPS = int(os.environ.get("BENCH_STEPS", "300"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "30"))
DIM, LAYERS, HEADS, VOCAB, SEQ, BATCH = 1024, 12, 16, 32000, 1024, 8


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(DIM)
        self.attn = torch.nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(DIM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(), torch.nn.Linear(4 * DIM, DIM))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


accelerator = Accelerator(mixed_precision="bf16")
torch.manual_seed(0)
model = TinyLM()
params = sum(p.numel() for p in model.parameters())
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
generator = torch.Generator(device=accelerator.device).manual_seed(accelerator.process_index)
times = []
for step in range(STEPS + WARMUP):
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=accelerator.device, generator=generator)
    torch.cuda.synchronize()
    start = time.perf_counter()
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if step >= WARMUP:
        times.append(time.perf_counter() - start)
accelerator.wait_for_everyone()
if accelerator.is_main_process:
    print(json.dumps({"params": params, "steps": STEPS, "step_s": times, "gpu": torch.cuda.get_device_name(),
                      "world_size": accelerator.num_processes, "torch": torch.__version__}), flush=True)
