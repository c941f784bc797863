"""The agent's own files under state_path."""
