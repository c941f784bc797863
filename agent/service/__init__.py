"""The daemon: loop (daemon), components, signals, health, systemd notify, metrics,
what each cycle leaves (record), exit codes."""
