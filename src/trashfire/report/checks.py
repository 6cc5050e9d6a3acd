"""The report section's checks, `report` (registered with trashfire.core.checks)."""

from __future__ import annotations

from omegaconf import DictConfig

from trashfire.core.checks import choice, nonempty_list, register
from trashfire.core.errors import ConfigError

FIGURE_FORMATS = ("png", "pdf", "svg")  # matplotlib writes each without extra packages
EMBEDDED_FORMAT = "png"  # what report.html shows, so every run writes it


@register("report")
def check(cfg: DictConfig) -> None:
    formats = nonempty_list("report.formats", cfg.report.get("formats"))
    for value in formats:
        choice("report.formats", value, FIGURE_FORMATS)
    if EMBEDDED_FORMAT not in formats:
        raise ConfigError("report.formats", f"got {list(formats)}; must include {EMBEDDED_FORMAT}, the format report.html embeds")
    if len(set(formats)) < len(formats):
        raise ConfigError("report.formats", f"got {list(formats)}; list each format once")
