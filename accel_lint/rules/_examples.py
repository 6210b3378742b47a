"""Examples that several rules share: one program whose every line is clean for each of them."""

# A flag bound once decides whether an accelerator is built at all: where it is false (the
# `else:` arm, the conditional expression's other side) nothing was prepared. Clean for AL101
# (the plain backward), AL103 (the torch clip) and AL501 (the bare model's `state_dict()`).
FLAG_GATED_ACCELERATOR = """\
import torch
from accelerate import Accelerator
class Trainer:
    def __init__(self, args, model):
        self.use_accelerator = args.use_accelerator
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters())
        if self.use_accelerator:
            self.setup_accelerator()
            self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)
    def setup_accelerator(self):
        self.accelerator = Accelerator(gradient_accumulation_steps=2)
    def step(self, batch):
        loss = self.model(batch).sum()
        if self.use_accelerator:
            self.accelerator.backward(loss)
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
    def save(self, path):
        weights = self.accelerator.get_state_dict(self.model) if self.use_accelerator else self.model.state_dict()
        torch.save(weights, path)
"""
