"""Instruction family vint (being written)."""
