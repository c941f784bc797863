"""The compute-agent command line."""
