"""r3l: reinforcement learning for language models that learn from their own failures through language."""

__version__ = "0.1.0"
