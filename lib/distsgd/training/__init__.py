"""A training run: its config, launch, workers, loop, checkpoints and results."""
