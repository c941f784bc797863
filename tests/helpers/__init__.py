"""Code the test suites share; test modules never import each other (see test_test_layout.py).

One module per job: ``paths`` (repository files), ``conf`` (configuration
without a file), ``net`` (loopback ports, stopping servers), ``names`` (names of a test's own),
``hosts`` (fake host descriptions built as data), ``placement_http`` (plain
HTTP to Placement), ``placement_snapshot`` (a provider tree read back whole),
``served`` (Placement in a subprocess), ``keystone`` (a keystone stand-in),
``faults`` (fault injection), ``sync`` (one provider-tree sync in-process),
``tracker`` (the resource tracker on a fake node), ``service`` (the agent as a
process), ``nova_state`` (Placement as nova-compute leaves it), ``nova_cell``
(a nova cell database), ``libvirt_fixtures`` and ``sysfs_fixtures`` (the
libvirt and host drivers on tests/fixtures), ``events`` (the service in a
thread, its requests), ``libvirtd`` (a real libvirtd to stop and start),
``mariadb`` (a private MariaDB server for Placement).
"""
