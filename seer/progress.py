"""Progress of long work: a rich bar on a terminal, log lines elsewhere.

Where output goes to a file (batch jobs, remote runs) a bar would print nothing until the
end, so lines are logged instead. :class:`CollectionProgress` counts finished items of a
collection (rate and time left); :class:`StepProgress` names the steps of training and
evaluation as each starts; :class:`CountProgress` counts work whose total is not known
ahead (layers streamed through ``seer predict``).
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)


class CollectionProgress:
    """Context manager: ``advance(n)`` after each finished item; ``note(text)`` for extras."""

    def __init__(self, description: str, total: int, console: Console | None = None,
                 log_every_s: float = 30.0, unit: str = "items") -> None:
        self.console = console or Console(stderr=True)
        self.description = description
        self.total = total
        self.unit = unit
        self.done = 0
        self.extra = ""
        self.log_every_s = log_every_s
        self._started = self._last_log = time.monotonic()
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self) -> "CollectionProgress":
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("left"),
                TimeRemainingColumn(), TextColumn("{task.fields[extra]}"), console=self.console)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total, rate="", extra="")
        else:
            self.console.log(f"{self.description}: {self.total} {self.unit} to do")
        return self

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self._started
        return self.done / elapsed if elapsed > 0 else 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._progress is not None:
            self._progress.update(self._task, advance=n, rate=f"{self.rate:.1f} {self.unit}/s",
                                  extra=self.extra)
        elif time.monotonic() - self._last_log >= self.log_every_s:
            self._log_line()

    def note(self, text: str) -> None:
        self.extra = text
        if self._progress is not None:
            self._progress.update(self._task, extra=text)

    def _log_line(self) -> None:
        self._last_log = time.monotonic()
        left = (self.total - self.done) / self.rate if self.rate > 0 else float("nan")
        self.console.log(f"{self.description}: {self.done}/{self.total} {self.unit}, "
                         f"{self.rate:.1f}/s, ~{left / 60:.1f} min left {self.extra}")

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._log_line()


class StepProgress:
    """Context manager: ``update(done, total, text)`` as each step of some work starts."""

    def __init__(self, description: str, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.description = description
        self._progress: Progress | None = None
        self._task = None
        self._last_text = None

    def __enter__(self) -> "StepProgress":
        if self.console.is_terminal:
            self._progress = Progress(TextColumn(f"[bold]{self.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[step]}"), console=self.console,
                                      transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=None, step="")
        return self

    def update(self, done: int, total: int, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total, step=text)
        elif text != self._last_text:
            self.console.log(f"{self.description}: step {min(done + 1, total)}/{total}: {text}")
        self._last_text = text

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


class CountProgress:
    """Context manager: ``advance(n)`` as work of unknown total gets done. Shown on a terminal
    only once ``quiet_s`` have passed (quick work stays quiet); logged every ``log_every_s``
    elsewhere."""

    def __init__(self, description: str, console: Console | None = None, unit: str = "items",
                 quiet_s: float = 2.0, log_every_s: float = 30.0) -> None:
        self.console = console or Console(stderr=True)
        self.description, self.unit = description, unit
        self.quiet_s, self.log_every_s = quiet_s, log_every_s
        self.done = 0
        self._started = self._last_log = time.monotonic()
        self._progress: Progress | None = None
        self._task = None

    def __enter__(self) -> "CountProgress":
        return self

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        rate = f"{self.done / max(now - self._started, 1e-9):,.0f} {self.unit}/s"
        if self.console.is_terminal:
            if self._progress is None and now - self._started >= self.quiet_s:
                self._progress = Progress(TextColumn(f"[bold]{self.description}"), TextColumn("{task.completed:,}"),
                                          TextColumn(self.unit), TextColumn("{task.fields[rate]}"),
                                          TimeElapsedColumn(), console=self.console, transient=True)
                self._progress.start()
                self._task = self._progress.add_task(self.description, total=None, rate="")
            if self._progress is not None:
                self._progress.update(self._task, completed=self.done, rate=rate)
        elif now - self._last_log >= self.log_every_s:
            self._last_log = now
            self.console.log(f"{self.description}: {self.done:,} {self.unit}, {rate}")

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
