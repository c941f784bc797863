"""Helpers shared by test modules (test modules do not import each other's helpers)."""
