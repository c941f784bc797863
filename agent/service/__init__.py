"""The daemon: loop, signals, systemd notify, metrics."""
