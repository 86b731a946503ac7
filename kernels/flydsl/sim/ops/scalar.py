"""Instruction family scalar (being written)."""
