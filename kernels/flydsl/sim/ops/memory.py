"""Instruction family memory (being written)."""
