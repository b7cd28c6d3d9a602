"""The progress bar over the shapes on stderr (tqdm when installed, else one rewritten line)."""

from __future__ import annotations

import sys
import time
from typing import Any


class _Progress:
    """A bar over the shapes (tqdm when installed, else one rewritten stderr line)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.done = total, enabled, 0
        self.bar: Any = None
        self.label, self.shown = "", 0.0
        if enabled:
            try:
                # types-tqdm is not a dependency: untyped where installed, missing where not.
                from tqdm import tqdm  # type: ignore[import-untyped, import-not-found, unused-ignore]

                self.bar = tqdm(total=total, file=sys.stderr, unit="shape", leave=False,
                                dynamic_ncols=True)
            except Exception:
                self.bar = None

    def start(self, shape: str) -> None:
        self.label = shape
        self._show("", force=True)

    def tick(self, rep: int, repeat: int) -> None:
        self._show(f"rep {rep}/{repeat}")

    def _show(self, extra: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.shown < 0.2:
            return
        self.shown = now
        text = f"{self.label} {extra}".strip()
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)
        else:
            sys.stderr.write(f"\r\x1b[K[{self.done}/{self.total}] {text}")
            sys.stderr.flush()

    def advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
            return
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        print(text, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
