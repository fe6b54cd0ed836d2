"""Placeholder package docstring replaced when the layer lands."""
