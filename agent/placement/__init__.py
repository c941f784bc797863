"""Talking to the Placement service: sessions, microversions, errors, retries."""
