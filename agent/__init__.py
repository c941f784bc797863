"""compute-agent: keeps the Placement service in step with one hypervisor."""

__version__ = "0.1.0"
