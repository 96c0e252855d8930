"""Learner: batching, optimisation, checkpoints."""
