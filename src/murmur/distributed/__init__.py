"""The distributed runtime: one process per agent or worker on torch.distributed (gloo)."""
