"""Execution providers shipped inside the core (the CPU provider)."""
