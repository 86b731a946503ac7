"""Instruction family mfma (being written)."""
