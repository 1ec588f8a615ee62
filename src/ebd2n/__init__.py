"""ebd2n: GPT training campaigns — recipes, data caches, resumable training, audit and reports."""

__version__ = "0.1.0"
