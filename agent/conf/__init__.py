"""Configuration: options, nova.conf, logging set-up."""
