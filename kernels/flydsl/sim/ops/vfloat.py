"""Instruction family vfloat (being written)."""
