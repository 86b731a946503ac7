"""Instruction family xlane (being written)."""
