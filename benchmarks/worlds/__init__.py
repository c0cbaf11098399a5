"""Controlled worlds: each seed's mechanism where it must work (issue 64), and their report."""
