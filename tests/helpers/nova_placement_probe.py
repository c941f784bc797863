"""``python -m tests.helpers.nova_placement_probe NOVA_CONF``: nova 34's own Placement client.

nova-compute's ``SchedulerReportClient`` talks to Placement through
``nova.utils.get_sdk_adapter("placement", admin=True)`` (``report.py``
``_create_client``): openstacksdk over keystoneauth, configured from nova.conf's
``[placement]``. This runs exactly that from a nova.conf (in a process of its own: it loads
nova's global configuration), sends ``GET /resource_providers`` at 1.36 as nova's scheduler
queries do, and prints one JSON line: ``status`` and ``endpoint``, or ``error`` (the
exception's class and text), and ``seconds`` the request took. The judge of how nova reads
``[placement]`` (tests/functional/test_keystone_real.py).
"""

from __future__ import annotations

import json
import sys
import time

import nova.conf
from nova import utils


def main() -> None:
    conf = nova.conf.CONF
    conf([f"--config-file={sys.argv[1]}"], project="nova", default_config_files=[])
    adapter = utils.get_sdk_adapter("placement", admin=True)
    start = time.monotonic()
    out: dict[str, object]
    try:
        resp = adapter.get("/resource_providers", microversion="1.36")
        out = {"status": resp.status_code, "endpoint": adapter.get_endpoint()}
    except Exception as exc:  # what nova's caller would see
        out = {"error": type(exc).__name__, "text": str(exc)[:500]}
    out["seconds"] = time.monotonic() - start
    print(json.dumps(out))


if __name__ == "__main__":
    main()
