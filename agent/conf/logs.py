"""Logging the OpenStack way: oslo.log options, a request id per cycle, no secrets.

Every OpenStack service reads the same ``[DEFAULT]`` logging options
(``debug``, ``log_file``, ``log_dir``, ``use_json``, ``use_journal``,
``use_syslog``, ``default_log_levels``, ``logging_context_format_string``
...); oslo.log registers them and builds the handlers. What is ours:

- the command's output goes to stdout, so logs go to stderr unless a file,
  the journal or syslog is configured (oslo.log alone would fall back to
  stdout);
- under systemd, when stderr *is* the journal (``$JOURNAL_STREAM``, as
  systemd.exec(5) advises), lines go to journald natively with their
  priority (``journalctl -p warning`` works) unless ``use_journal`` or
  ``use_stderr`` is set explicitly;
- the noisy libraries the agent loads (Placement's own application when it
  runs embedded, alembic, APScheduler, pyudev) join oslo.log's list of
  loggers kept at WARNING, so ``--debug`` shows the agent's DEBUG lines only;
- every handler drops the values of secret options (passwords, tokens) and
  masks ``password=...``-like text (oslo.utils' ``mask_password``);
- :func:`cycle_context` gives each cycle an oslo.context ``RequestContext``,
  whose ``req-...`` id the default context format string puts on every line.
  It is handed to each record by a filter rather than read from
  oslo.context's per-thread store alone: the embedded Placement runs in the
  agent's thread and stores a context of its own for each request it serves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_log import _options as oslo_log_options
from oslo_log import log as oslo_log
from oslo_utils import strutils

from agent import __version__
from agent.conf.catalog import list_opts

PROJECT = "compute-agent"

QUIET_LIBRARIES: tuple[str, ...] = (
    "placement=WARNING",
    "alembic=WARNING",
    "apscheduler=WARNING",
    "pyudev=WARNING",
    "wsgi_intercept=WARNING",
    "tenacity=WARNING",
    "migrate=WARNING",
    "oslo_concurrency=WARNING",
    "oslo_policy=WARNING",
)
"""Loggers kept at WARNING on top of oslo.log's defaults (stevedore, keystoneauth, ...)."""

REDACTED = "***"

_cycle = threading.local()


def _set_agent_defaults() -> None:
    """The agent's defaults for oslo.log's options, for every ConfigOpts and the sample file.

    oslo.log's ``set_defaults`` covers ``default_log_levels``; ``use_stderr``
    is set on oslo.log's option list itself (its ``_options`` module, which
    its own ``set_defaults`` edits the same way), because stdout carries the
    commands' output (JSON, trees) and logs must go to stderr.
    """
    levels = list(oslo_log.get_default_log_levels())
    levels += [pair for pair in QUIET_LIBRARIES if pair not in levels]
    oslo_log.set_defaults(default_log_levels=levels)
    cfg.set_defaults(oslo_log_options.generic_log_opts, use_stderr=True)


# At import, so that oslo-config-generator's sample shows the agent's defaults.
_set_agent_defaults()


def register_options(conf: cfg.ConfigOpts) -> None:
    """Register oslo.log's options on ``conf`` (with the agent's defaults).

    Must run before ``conf`` parses files (oslo.log adds command-line options).
    """
    oslo_log.register_options(conf)


def stderr_is_journal() -> bool:
    """True when stderr is systemd's journal stream (``$JOURNAL_STREAM`` = ``dev:inode``)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def secret_values(conf: cfg.ConfigOpts) -> set[str]:
    """The values of every secret option set in ``conf`` (passwords, tokens).

    Includes the options of ``[placement]``'s auth plugin, which keystoneauth
    registers only when it loads the plugin: they are registered here first
    (the same options keystoneauth registers, so it finds them in place).
    """
    from keystoneauth1 import loading as ks_loading

    groups: list[tuple[str, list[cfg.Opt]]] = list(list_opts())
    plugin = conf.placement.auth_type
    if plugin:
        try:
            plugin_opts = ks_loading.get_auth_plugin_conf_options(plugin)
        except Exception:  # an unknown plugin is refused by name first (config.auth_plugin)
            plugin_opts = []
        # Another definition under the same name (not expected): keep it, read its value.
        with contextlib.suppress(cfg.DuplicateOptError):
            conf.register_opts(plugin_opts, "placement")
        groups.append(("placement", plugin_opts))
    values: set[str] = set()
    for group, opts in groups:
        section = conf if group == "DEFAULT" else conf[group]
        for opt in opts:
            if not opt.secret:
                continue
            with contextlib.suppress(cfg.Error, ValueError):
                value = getattr(section, opt.dest)
                if isinstance(value, str) and value:
                    values.add(value)
    return values


class SecretFilter(logging.Filter):
    """Drops secret values from what a handler writes.

    Used twice on each handler: as a filter, it cleans the record's message
    before formatting (so structured outputs such as JSON get clean text);
    wrapped around the handler's formatter by :class:`RedactingFormatter`, it
    cleans the final text, tracebacks included.

    Args:
        secrets: exact strings never to show (option values).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first: a secret containing another is replaced whole.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret value and ``password=...``-like value masked."""
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return strutils.mask_password(text, secret=REDACTED)

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message in place; always keep the record."""
        message = record.getMessage()
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def _said_once(text: str, record: logging.LogRecord) -> str:
    """``text`` without oslo.log's error summary when the message already says it."""
    if record.exc_info or record.levelno < logging.WARNING:
        return text
    exc = sys.exc_info()[1]
    if exc is None or not str(exc) or str(exc) not in record.getMessage():
        return text
    summary = traceback.format_exception_only(type(exc), exc)[0].rstrip().split("\n", 1)[0]
    suffix = ": " + summary
    first, newline, rest = text.partition("\n")
    if first.endswith(suffix):
        return first[: -len(suffix)] + newline + rest
    return text


class RedactingFormatter(logging.Formatter):
    """A handler's formatter whose every output goes through :meth:`SecretFilter.redact`.

    Args:
        inner: the formatter oslo.log set (context, JSON ...).
        secrets: the redactor.
    """

    def __init__(self, inner: logging.Formatter, secrets: SecretFilter) -> None:
        super().__init__()
        self.inner = inner
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        """The inner formatter's text, secrets masked (tracebacks included), said once.

        oslo.log's formatter ends a WARNING or ERROR line logged while an exception is
        being handled with that exception's summary (``: module.Class: text``, its
        ``error_summary``), even when the message already says it: the line said the
        same thing twice. The summary is left off when the message holds the
        exception's text already.
        """
        text = self.inner.format(record)
        return self.secrets.redact(_said_once(text, record))

    def formatException(self, ei: Any) -> str:
        """A traceback as the inner formatter writes it, secrets masked."""
        return self.secrets.redact(self.inner.formatException(ei))


class CycleContextFilter(logging.Filter):
    """Gives every record logged inside :func:`cycle_context` that cycle's context, others none."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Set ``record.context`` (read by oslo.log's formatters); always keep the record."""
        if "context" not in record.__dict__:
            # None outside a cycle: oslo.log then writes "[-]" instead of whatever
            # context the embedded Placement left in oslo.context's store.
            record.context = getattr(_cycle, "context", None)
        return True


def _is_set(conf: cfg.ConfigOpts, name: str) -> bool:
    """True when ``[DEFAULT] name`` was given (file, command line), not left at a default."""
    where = conf.get_location(name)
    return where is not None and where.location not in (
        cfg.Locations.opt_default,
        cfg.Locations.set_default,
    )


def setup(conf: cfg.ConfigOpts, debug: bool = False, quiet: bool = False) -> None:
    """Configure logging from ``conf`` (oslo.log), as every OpenStack service does.

    Args:
        conf: a loaded configuration with :func:`register_options` applied.
        debug: ``--debug`` was given (same as ``[DEFAULT] debug = true``).
        quiet: a one-shot command: the root logger stays at WARNING unless
            debugging, so its output is not drowned in INFO lines.
    """
    if debug:
        conf.set_override("debug", True)
    if stderr_is_journal() and not (_is_set(conf, "use_journal") or _is_set(conf, "use_stderr")):
        conf.set_default("use_journal", True)
        conf.set_default("use_stderr", False)
    oslo_log.setup(conf, PROJECT, __version__)
    root = logging.getLogger()
    if quiet and not conf.debug:
        root.setLevel(logging.WARNING)
    secrets = SecretFilter(secret_values(conf))
    for handler in root.handlers:
        # oslo.log made these handlers afresh: no filter of ours is on them yet.
        handler.addFilter(CycleContextFilter())
        handler.addFilter(secrets)
        handler.setFormatter(RedactingFormatter(handler.formatter or logging.Formatter(), secrets))


@contextlib.contextmanager
def cycle_context() -> Iterator[oslo_context.RequestContext]:
    """A fresh ``RequestContext`` (``req-<uuid>``) for the log lines of one cycle.

    Kept per thread; the previous one (if any) is put back afterwards.
    """
    previous = getattr(_cycle, "context", None)
    # overwrite=False: oslo.context's own per-thread store is left alone.
    ctx = oslo_context.RequestContext(overwrite=False)
    _cycle.context = ctx
    try:
        yield ctx
    finally:
        _cycle.context = previous


def current_cycle_context() -> oslo_context.RequestContext | None:
    """The context :func:`cycle_context` set in this thread, or None."""
    return getattr(_cycle, "context", None)


def adopt_cycle_context(ctx: oslo_context.RequestContext | None) -> None:
    """Make ``ctx`` this thread's cycle context (a helper thread logging for a cycle)."""
    _cycle.context = ctx
