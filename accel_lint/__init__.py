"""accel-lint: a static analyzer for distributed-training bugs in Hugging Face Accelerate code."""

__version__ = "0.1.0"
