"""The embedded local backend: real GRPO on a transformers model, on the CPU, in one process."""
