"""IGNORE_INDEX, spelled once for the data that pads targets and the losses that skip them.

A foundation module: data and model are peers, and both need it.
"""

IGNORE_INDEX = -100
"""Target of padded positions, counted by no loss or accuracy (torch's cross_entropy default ignore_index)."""
