"""The releases of a training framework that an integration is tested on, checked when its
compatibility module (:mod:`~gmts_core.integrations.trl_compat`,
:mod:`~gmts_core.integrations.verl_compat`) is imported.

Both integrations reach into their framework's private methods, which a release may rename
without notice. So each compatibility module states the range of releases the suite ran on
(:class:`ReleaseRange`), refuses any other at import, and checks that every private name it
overrides or calls exists. An incompatible release then fails when the integration is
imported, with the installed release and the supported range in the message, instead of
partway through a training run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


class UnsupportedReleaseError(ImportError):
    """The installed framework is outside the integration's tested range, or lacks a name it
    relies on; the message names the installed release and the supported range."""


_PRE_RELEASE = re.compile(r"^[.\-_]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.IGNORECASE)


def release_key(version: str) -> tuple[tuple[int, ...], int]:
    """An ordering key of a version string: its numeric release (padded to three parts), then
    0 for a pre-release or development build (which comes before its release), else 1."""
    match = re.match(r"^\s*v?(\d+(?:\.\d+)*)(.*)$", version)
    if match is None:
        raise UnsupportedReleaseError(f"cannot read the release of version string {version!r}")
    numbers = tuple(int(part) for part in match.group(1).split("."))
    numbers = numbers + (0,) * max(0, 3 - len(numbers))
    return numbers, 0 if _PRE_RELEASE.match(match.group(2)) else 1


@dataclass(frozen=True)
class ReleaseRange:
    """Releases ``floor`` <= v < ``below`` of ``package``; ``tested`` lists those the suite ran
    on (the floor and the newest)."""

    package: str
    floor: str
    below: str
    tested: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.package}>={self.floor},<{self.below}"

    def check(self, installed: str) -> None:
        """Raise :class:`UnsupportedReleaseError` unless ``installed`` is in the range."""
        key = release_key(installed)  # below: no release of it, pre-releases neither
        if release_key(self.floor) <= key and key[0] < release_key(self.below)[0]:
            return
        raise UnsupportedReleaseError(
            f"{self.package} {installed} is installed; gmts_core's {self.package} integration "
            f"supports {self} (tested on {', '.join(self.tested)}). It overrides private parts "
            f"of {self.package} that other releases may have changed: install a release in the "
            "supported range"
        )

    def require(self, installed: str, where: str, owner: object, names: Iterable[str]) -> None:
        """Raise :class:`UnsupportedReleaseError` naming every one of ``names`` that ``owner``
        (shown as ``where``) lacks."""
        missing = [name for name in names if not hasattr(owner, name)]
        if missing:
            raise self.lacking(installed, f"{', '.join(missing)} on {where}")

    def lacking(self, installed: str, what: str) -> UnsupportedReleaseError:
        """The error for an installed release that lacks ``what``."""
        return UnsupportedReleaseError(
            f"{self.package} {installed} lacks {what}, which gmts_core's {self.package} "
            f"integration relies on; supported: {self} (tested on {', '.join(self.tested)})"
        )
