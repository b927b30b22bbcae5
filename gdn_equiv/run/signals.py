"""How a run is stopped from outside (Ctrl-C, SIGTERM, a closed standard output), for every driver and writer:
a signal noted here ends the run at its next example (:func:`interrupt_pending`), and a report being written is
never left half-updated (:func:`deferred_signals`)."""

from __future__ import annotations

import select
import signal
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "caused_by_interrupt",
    "clear_interrupts",
    "deferred_signals",
    "interrupt_pending",
    "note_interrupt",
    "stdout_closed",
]


def caused_by_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised while handling, a ``KeyboardInterrupt``: Hypothesis (6.170)
    turns one that lands before its engine starts into an ``AssertionError`` of its own."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def stdout_closed(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the ``BrokenPipeError`` of writing to a standard output whose reader has gone
    (``gdn-equiv ... | head``): the run was stopped from outside, as by a signal. Any other broken pipe
    (a worker process's, say) is not."""
    if not isinstance(exc, BrokenPipeError):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll here, or stdout is not a file
        return False


_INTERRUPTS: list[int] = []  # Ctrl-C / SIGTERM received by this process (see ``note_interrupt``)


def note_interrupt(signum: int) -> None:
    """Remember that ``signum`` asked this run to stop: the runners check :func:`interrupt_pending`
    before each example, so the run ends even if the ``KeyboardInterrupt`` raised for it was swallowed
    on its way up (code under test that catches ``BaseException``, a C++ frame that rewraps it)."""
    _INTERRUPTS.append(signum)


def interrupt_pending() -> bool:
    return bool(_INTERRUPTS)


def clear_interrupts() -> None:
    _INTERRUPTS.clear()


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM that arrive inside the block are delivered when it ends, so a report is
    never left half-updated (a row in ``rows.jsonl`` but not in the summary, or the reverse).

    Python runs signal handlers in the main thread only, so recording them there is enough whichever
    thread the operating system picked; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: types.FrameType | None) -> None:
        received.append(signum)
        note_interrupt(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)  # now handled as it would have been
